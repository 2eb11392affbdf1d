"""Following partition owners in a cluster (docs/cluster.md, "What clients do").

In ``storage.mode = "replicated"`` each partition is served by one broker at a
time; any other broker answers a write or read of it with `NotOwnerError`. The
client then asks a broker it knows (its own endpoint first) who owns the
partition (the ``Lookup`` call: the owner's broker id, claim generation and
endpoints) and opens a connection there, with the same credentials and TLS. The
connections to owners are kept per endpoint and closed with the client's.

An answer with no owner (the partition is moving: its broker died or it is being
unloaded) sends the stream back to the client's own endpoint, which keeps
answering `NotOwnerError` until the move ends; the stream retries with its usual
backoff meanwhile. An embedded (single-node) server answers every partition as
its own, so nothing changes there.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from weir.errors import NotOwnerError, WeirError
from weir.protocols.native import weir_pb2 as pb

if TYPE_CHECKING:
    from weir.client.connection import Connection

log = logging.getLogger("weir.client.owners")

# how long one Lookup may take before the stream falls back to its own endpoint
LOOKUP_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class PartitionOwner:
    """Who serves a partition (`weir.aio.Client.owners`): the broker id, the generation
    of its claim and its endpoints by front ({"native": "host:port"}); ``broker`` is
    empty while nobody does (the partition is moving). ``local``: the broker asked
    serves it (an embedded server serves every partition: broker and endpoints empty)."""

    partition: int
    broker: str = ""
    generation: int = 0
    endpoints: Mapping[str, str] = field(default_factory=dict)
    local: bool = False

    @classmethod
    def from_proto(cls, o: pb.PartitionOwner) -> PartitionOwner:
        return cls(o.partition, o.broker, o.generation, dict(o.endpoints), o.local)


class Owners:
    """The connections of one client to the brokers owning its partitions."""

    def __init__(self, home: Connection) -> None:
        self.home = home
        self._conns: dict[str, Connection] = {}
        # (topic, partition) -> the owner's connection, as the last lookup found it (range
        # reads go straight there; streams keep their own)
        self._known: dict[tuple[str, int], Connection] = {}
        self.lookups = 0  # Lookup calls answered (tests and metrics read it)

    def connection(self, endpoint: str) -> Connection:
        """The connection to ``endpoint`` (the client's own when it is that one)."""
        if endpoint == self.home.endpoint:
            return self.home
        conn = self._conns.get(endpoint)
        if conn is None or conn.closed:
            conn = self.home.sibling(endpoint)
            self._conns[endpoint] = conn
        return conn

    def connections(self) -> list[Connection]:
        """The connections to other brokers this client has opened (owners it has met)."""
        return list(self._conns.values())

    async def lookup(self, topic: str, partition: int | None) -> Connection | None:
        """The connection to the owner of ``topic``/``partition`` (``None``: the topic's
        first partition); None when no broker owns it now or no broker answered.

        The client's own endpoint is asked first, then the owners it knows."""
        request = pb.LookupRequest(topic=topic)
        if partition is not None and partition >= 0:
            request.partitions.append(partition)
        for conn in [self.home, *self._conns.values()]:
            if conn.closed:
                continue
            try:
                resp = await conn.call("Lookup", request, timeout=LOOKUP_TIMEOUT_S)
            except WeirError as exc:  # down, or it has not heard of the topic yet
                log.debug("lookup of %s/%s at %s: %r", topic, partition, conn.endpoint, exc)
                continue
            self.lookups += 1
            if not resp.partitions:
                return None
            owner = resp.partitions[0]
            if owner.local:
                return conn
            endpoint = owner.endpoints.get("native", "")
            if not owner.broker or not endpoint:
                return None  # moving
            return self.connection(endpoint)
        return None

    def known(self, topic: str, partition: int) -> Connection | None:
        """The owner of ``topic``/``partition`` the last lookup found (None: ask the home)."""
        conn = self._known.get((topic, partition))
        return None if conn is None or conn.closed else conn

    def remember(self, topic: str, partition: int, conn: Connection | None) -> None:
        if conn is None or conn is self.home:
            self._known.pop((topic, partition), None)
        else:
            self._known[(topic, partition)] = conn

    async def close(self) -> None:
        for conn in self._conns.values():
            await conn.close()
        self._conns.clear()


def not_owner(err: WeirError) -> bool:
    """``err`` says the partition is served by another broker (or by none, for now)."""
    return isinstance(err, NotOwnerError)
