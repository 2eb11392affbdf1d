"""The broker's schema calls: each topic's schema versions (see `weir.broker.schemas`)."""

from __future__ import annotations

from weir.broker.schemas import SchemaInfo
from weir.broker.state import BrokerState


class SchemaAdmin(BrokerState):
    """Topic schemas, as Pulsar's schema registry serves them."""

    def topic_schema(self, topic: str, version: int | None = None) -> tuple[SchemaInfo, int] | None:
        """The topic's latest schema (or ``version``) with its version."""
        return self.schemas.get(self.topic(topic).topic_id, version)

    async def ensure_schema(self, topic: str, schema: SchemaInfo) -> int | None:
        """The version of ``schema`` on the topic, added when compatible (None for raw bytes)."""
        return await self.schemas.ensure(self.topic(topic).topic_id, schema)

    async def delete_schema(self, topic: str) -> None:
        await self.schemas.delete(self.topic(topic).topic_id)
