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

The client's own broker may die too. So a lookup is asked of every broker the client
knows: the ones it was given (``weir.Client("h1:p1,h2:p2")``, the bootstrap list) and
the live brokers each answer names (``LookupResponse.brokers``), the one that answered
last first. While any other broker is known, a stream whose broker failed looks its
owner up again instead of waiting for that broker, and admin calls the client's own
broker cannot take are asked of the others (`call_elsewhere`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from weir.errors import NotOwnerError, UnavailableError, WeirError
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
    """The connections of one client to the brokers of its cluster: its own (``home``), the
    other bootstrap endpoints, the live brokers lookups named, and the owners it met."""

    def __init__(self, home: Connection) -> None:
        self.home = home
        self._conns: dict[str, Connection] = {}
        # the live brokers' native endpoints, as the last lookup answer named them
        self._learned: list[str] = []
        self._last_good: Connection | None = None  # the broker that answered last
        self._discovery: asyncio.Task[None] | None = None  # see discover()
        self._discovered = False
        # (topic, partition) -> the owner's connection, as the last lookup found it (range
        # reads go straight there; streams keep their own)
        self._known: dict[tuple[str, int], Connection] = {}
        self.lookups = 0  # Lookup calls answered (tests and metrics read it)

    @property
    def can_fail_over(self) -> bool:
        """Another broker than the client's own is known: ask it when that one fails."""
        return bool(self.home.bootstrap or self._learned)

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

    def candidates(self) -> list[Connection]:
        """Every broker to ask, in order: the one that answered last, the client's own, the
        other bootstrap endpoints, the live brokers learned, the owners met."""
        eps = [*self.home.bootstrap, *self._learned, *self._conns]
        out = [self.home] + [self.connection(ep) for ep in dict.fromkeys(eps)]
        good = self._last_good
        if good is not None and good in out and not good.closed:
            out.remove(good)
            out.insert(0, good)
        return [c for c in out if not c.closed]

    async def ask(self, request: pb.LookupRequest) -> tuple[Connection, pb.LookupResponse] | None:
        """The first answer to ``request`` from the brokers this client knows (and the
        broker that gave it); None when none answered. Each broker is asked once when
        others are known, so a dead one costs one refusal, not a timeout."""
        once = self.can_fail_over
        for conn in self.candidates():
            try:
                resp = await conn.call(
                    "Lookup", request, timeout=LOOKUP_TIMEOUT_S, retry=not once, failover=False
                )
            except WeirError as exc:  # down, or it has not heard of the topic yet
                log.debug("lookup of %s at %s: %r", request.topic, conn.endpoint, exc)
                continue
            self.lookups += 1
            self._last_good = conn
            if resp.brokers:
                self._learned = [ep for ep in resp.brokers if ep != self.home.endpoint]
            return conn, resp
        return None

    def discover(self, topic: str) -> None:
        """Learn the cluster's live brokers once, in the background (a writer's first use of
        the client; readers look up at once anyway), so that a client given only its own
        broker can still ask another when that one dies. Must run in the client's loop."""
        if self._discovered or (self._discovery is not None and not self._discovery.done()):
            return
        self._discovery = asyncio.get_running_loop().create_task(
            self._discover(topic), name="weir-discover-brokers"
        )

    async def _discover(self, topic: str) -> None:
        got = await self.ask(pb.LookupRequest(topic=topic))
        self._discovered = got is not None  # an answer (none: the next writer asks again)

    async def lookup(self, topic: str, partition: int | None) -> Connection | None:
        """The connection to the owner of ``topic``/``partition`` (``None``: the topic's
        first partition); None when no broker owns it now or no broker answered."""
        request = pb.LookupRequest(topic=topic)
        if partition is not None and partition >= 0:
            request.partitions.append(partition)
        got = await self.ask(request)
        if got is None:
            return None
        conn, resp = got
        if not resp.partitions:
            return None
        owner = resp.partitions[0]
        if owner.local:
            return conn
        endpoint = owner.endpoints.get("native", "")
        if not owner.broker or not endpoint:
            return None  # moving
        return self.connection(endpoint)

    async def call_elsewhere(
        self, method: str, request: Any, timeout: float | None
    ) -> tuple[bool, Any]:
        """Make a unary call the client's own broker could not (it is down) at another
        broker it knows: ``(True, answer)`` from the first that answers, ``(False, None)``
        when none could be reached. An error a broker answers with is raised."""
        for conn in self.candidates():
            if conn is self.home:
                continue
            left = LOOKUP_TIMEOUT_S if timeout is None else min(timeout, LOOKUP_TIMEOUT_S)
            try:
                result = await conn.call(method, request, left, retry=False, failover=False)
            except UnavailableError as exc:
                log.debug("%s at %s: %r", method, conn.endpoint, exc)
                continue
            self._last_good = conn
            return True, result
        return False, None

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
        if self._discovery is not None and not self._discovery.done():
            self._discovery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._discovery
        for conn in self._conns.values():
            await conn.close()
        self._conns.clear()


def not_owner(err: WeirError) -> bool:
    """``err`` says the partition is served by another broker (or by none, for now)."""
    return isinstance(err, NotOwnerError)
