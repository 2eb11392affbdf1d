"""GetSchema and GetOrCreateSchema: the schema of a topic (`weir.broker.schemas`)."""

from __future__ import annotations

from weir.errors import (
    UnknownTopicError,
    WeirError,
)
from weir.protocols.pulsar import pulsar_api_pb2 as pb
from weir.protocols.pulsar.connection_state import ConnectionState
from weir.protocols.pulsar.errors import server_error
from weir.security.grants import Permission

T = pb.BaseCommand


class SchemaCommands(ConnectionState):
    """GetSchema and GetOrCreateSchema: the schema of a topic (`weir.broker.schemas`)."""

    async def handle_get_schema(self, req: pb.CommandGetSchema) -> None:
        resp = pb.CommandGetSchemaResponse(request_id=req.request_id)
        try:
            t = self._topic_name(req.topic)
            self._allow(None, t, "read the schema of")
            version = int.from_bytes(req.schema_version, "big") if req.schema_version else None
            found = self.broker.topic_schema(t.weir_name, version)
            if found is None:
                raise UnknownTopicError(f"topic {t.url()} has no schema")
        except WeirError as err:
            resp.error_code = server_error(err)
            resp.error_message = err.message
        else:
            info, v = found
            resp.schema.CopyFrom(
                pb.Schema(
                    name=info.name,
                    schema_data=info.data,
                    type=info.type,  # type: ignore[arg-type]
                    properties=[pb.KeyValue(key=k, value=x) for k, x in info.properties.items()],
                )
            )
            resp.schema_version = v.to_bytes(8, "big")
        self.send(T(type=T.GET_SCHEMA_RESPONSE, getSchemaResponse=resp))

    async def handle_get_or_create_schema(self, req: pb.CommandGetOrCreateSchema) -> None:
        resp = pb.CommandGetOrCreateSchemaResponse(request_id=req.request_id)
        try:
            t = self._topic_name(req.topic)
            self._allow(Permission.PRODUCE, t, "set the schema of")
            cfg = await self._topic_for_use(t)
            v = await self._schema_version(cfg, req.schema)
        except WeirError as err:
            resp.error_code = server_error(err)
            resp.error_message = err.message
        else:
            resp.schema_version = (v or 0).to_bytes(8, "big")
        self.send(T(type=T.GET_OR_CREATE_SCHEMA_RESPONSE, getOrCreateSchemaResponse=resp))
