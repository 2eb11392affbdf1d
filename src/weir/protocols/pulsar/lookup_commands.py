"""LookupTopic, PartitionedTopicMetadata, GetTopicsOfNamespace: where a topic is served and
how many partitions it has.
"""

from __future__ import annotations

import contextlib
import re

from weir.errors import (
    UnknownTopicError,
    WeirError,
)
from weir.protocols.pulsar import pulsar_api_pb2 as pb
from weir.protocols.pulsar.connection_state import ConnectionState
from weir.protocols.pulsar.errors import server_error
from weir.security.principal import ANONYMOUS

T = pb.BaseCommand


class LookupCommands(ConnectionState):
    """LookupTopic, PartitionedTopicMetadata, GetTopicsOfNamespace: where a topic is served and"""

    async def handle_lookup(self, req: pb.CommandLookupTopic) -> None:
        resp = pb.CommandLookupTopicResponse(request_id=req.request_id)
        try:
            t = self._topic_name(req.topic)
            self._allow(None, t, "look up")
        except WeirError as err:
            resp.response = pb.CommandLookupTopicResponse.Failed
            resp.error = server_error(err)
            resp.message = err.message
        else:
            resp.response = pb.CommandLookupTopicResponse.Connect
            resp.authoritative = True
            resp.proxy_through_service_url = True  # one server: the address the client used
            if self.settings.tls:
                resp.brokerServiceUrlTls = self.settings.broker_url
            else:
                resp.brokerServiceUrl = self.settings.broker_url
        self.send(T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=resp))

    async def handle_partitioned_metadata(self, req: pb.CommandPartitionedTopicMetadata) -> None:
        resp = pb.CommandPartitionedTopicMetadataResponse(request_id=req.request_id)
        try:
            t = self._topic_name(req.topic)
            self._allow(None, t, "look up")
            if t.partition is not None:
                n = 0
            else:
                try:
                    cfg = self.broker.topic(t.weir_name)
                except UnknownTopicError:
                    # auto-creation: the client creates producers / consumers next
                    cfg = await self.broker.topic_for_use(t.weir_name)
                n = 0 if cfg.partitions == 1 else cfg.partitions
        except WeirError as err:
            resp.response = pb.CommandPartitionedTopicMetadataResponse.Failed
            resp.error = server_error(err)
            resp.message = err.message
        else:
            resp.response = pb.CommandPartitionedTopicMetadataResponse.Success
            resp.partitions = n
        self.send(T(type=T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=resp))

    async def handle_get_topics(self, req: pb.CommandGetTopicsOfNamespace) -> None:
        me = self.principal or ANONYMOUS
        out: list[str] = []
        if req.mode != pb.CommandGetTopicsOfNamespace.NON_PERSISTENT:
            for cfg in self.broker.namespace_topics(req.namespace):
                if not self.security.can_see(me, cfg.name):
                    continue
                base = f"persistent://{cfg.name}"
                if cfg.partitions == 1:
                    out.append(base)
                else:
                    out.extend(f"{base}-partition-{p}" for p in range(cfg.partitions))
        filtered = False
        if req.topics_pattern:
            with contextlib.suppress(re.error):
                pattern = re.compile(req.topics_pattern)
                out = [
                    n
                    for n in out
                    if pattern.fullmatch(n) or pattern.fullmatch(n.split("://", 1)[1])
                ]
                filtered = True
        self.send(
            T(
                type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
                getTopicsOfNamespaceResponse=pb.CommandGetTopicsOfNamespaceResponse(
                    request_id=req.request_id, topics=out, filtered=filtered, changed=True
                ),
            )
        )
