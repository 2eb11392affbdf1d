"""`ClusterPartitions`: the partitions a broker of the cluster serves, as partition actors.

The `PartitionHost` a replicated broker gives its `Ownership`: acquiring a
partition opens its replicated log under the claim (`ReplicatedLogHost`: the
previous owner is fenced) and builds the one `PartitionActor` that writes it,
committing each change as one managed-log entry (``commit=plog.commit``),
reading through the log (``read=plog.read``) and dropping whole ledgers in its
retention steps (``retain=plog.retain``). Releasing closes the actor first
(the commit in flight finishes, queued writes fail with a retryable error), then
the log: gracefully (a snapshot, the next owner replays nothing) or, when the
session was lost, abandoned at once (the next owner recovers and fences).

`actor` answers a write or read: the partition's actor when this broker serves
it, else `UnavailableError` (retryable) naming the broker that does (its endpoints
too, asked of ZooKeeper), so a client can go there; `actor_now` is the synchronous
twin for synchronous callers, naming the owner as of the last reconcile.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from weir.broker.cluster.claims import partition_key, split_key
from weir.broker.cluster.log_host import ReplicatedLogHost
from weir.broker.cluster.ownership import Ownership
from weir.broker.partition_actor import AsyncRead, PartitionActor
from weir.errors import NotOwnerError, UnavailableError, WeirError
from weir.replication.errors import (
    BookieOverloadedError,
    BookieReadOnlyError,
    BookieUnavailableError,
    ManagedLogFailedError,
    ManagedLogFencedError,
    NotEnoughBookiesError,
)
from weir.replication.partition_log import ReplicatedPartitionLog
from weir.replication.partition_log.log import ReplicatedChange
from weir.storage.partition import ReadResult

log = logging.getLogger("weir.cluster")

ReplicatedActor = PartitionActor[ReplicatedPartitionLog]
# the ledger layer's retryable failures of a read (codes the clients do not know)
_TRANSIENT = (
    BookieUnavailableError,
    BookieOverloadedError,
    BookieReadOnlyError,
    NotEnoughBookiesError,
    ManagedLogFailedError,
)


@dataclass(frozen=True, slots=True)
class ActorLimits:
    """The per-partition write limits of `weir.broker.config.BrokerConfig`."""

    max_queue_bytes: int = 128 << 20
    max_commit_bytes: int = 16 << 20


class ClusterPartitions:
    """See the module docstring. Give it to `Ownership` as its host, then `attach` that
    Ownership (lookups name owners through it)."""

    def __init__(self, logs: ReplicatedLogHost, limits: ActorLimits | None = None) -> None:
        self.logs = logs
        self.limits = limits or ActorLimits()
        self.actors: dict[str, ReplicatedActor] = {}
        self.ownership: Ownership | None = None

    def attach(self, ownership: Ownership) -> None:
        self.ownership = ownership

    # ------------------------------------------------------------------ PartitionHost

    async def acquire(self, key: str, generation: int) -> None:
        await self.logs.acquire(key, generation)
        plog = self.logs.log(key)
        topic, partition = split_key(key)
        self.actors[key] = PartitionActor(
            plog,
            None,
            topic=topic,
            partition=partition,
            generation=generation,
            max_queue_bytes=self.limits.max_queue_bytes,
            max_commit_bytes=self.limits.max_commit_bytes,
            commit=self._committer(key, generation, plog),
            read=self._reader(key, plog),
            retain=plog.retain,
        )

    def _committer(
        self, key: str, generation: int, plog: ReplicatedPartitionLog
    ) -> Callable[[ReplicatedChange], Awaitable[None]]:
        """``plog.commit``, where a log that is no longer this owner's answers the retryable
        not-owner error (`_lost`); the log is told to raise the same on the next change."""
        lost = self._lost(key, generation)
        plog.lost = lost

        async def commit(change: ReplicatedChange) -> None:
            try:
                await plog.commit(change)
            except (ManagedLogFencedError, ManagedLogFailedError) as exc:
                raise lost(exc) from exc

        return commit

    def _reader(self, key: str, plog: ReplicatedPartitionLog) -> AsyncRead:
        """``plog.read``, where a read the bookies could not answer now (none of an entry's
        bookies reachable: a network cut, bookies restarting) is the retryable
        `UnavailableError`: the ledger layer's own codes mean nothing to clients, which
        took them for internal errors (found by tests/cluster/test_cluster_faults.py)."""

        async def read(from_offset: int, max_bytes: int, to_offset: int | None) -> ReadResult:
            try:
                return await plog.read(from_offset, max_bytes, to_offset)
            except _TRANSIENT as exc:
                raise UnavailableError(
                    f"partition {key}: its ledgers cannot be read now ({exc.message}): retry"
                ) from exc

        return read

    def _lost(self, key: str, generation: int) -> Callable[[WeirError], NotOwnerError]:
        """A fenced log (another broker opened it: this broker's claim is gone, whether or
        not its session noticed yet), or a failed one (it lost track of its ledgers:
        ZooKeeper unreachable while it closed a failed ledger; opening it again recovers
        what was written): the partition is given up at once, to the next claim (this
        broker's or another's), and the client is told NOT_OWNER (retryable: the SDK looks
        the owner up and resends there; its dedup keeps the resent batches once)."""
        topic, partition = split_key(key)

        def lost(exc: WeirError) -> NotOwnerError:
            fenced = isinstance(exc, ManagedLogFencedError)
            if self.ownership is not None:
                self.ownership.give_up(key, generation, "was fenced" if fenced else "log failed")
            if fenced:
                why = (
                    f"was taken over by another broker (its log was fenced under generation "
                    f"{generation} on {self.logs.broker_id})"
                )
            else:
                why = (
                    f"is being reopened (its log failed under generation {generation} on "
                    f"{self.logs.broker_id}: {exc.message})"
                )
            return NotOwnerError(
                f"partition {key} {why}: look it up again", topic=topic, partition=partition
            )

        return lost

    async def release(self, key: str, *, graceful: bool) -> None:
        actor = self.actors.pop(key, None)
        try:
            if actor is not None:
                await actor.close()
        finally:
            await self.logs.release(key, graceful=graceful)

    # ------------------------------------------------------------------ lookups

    def _serving(self, key: str) -> ReplicatedActor | None:
        own = self.ownership
        actor = self.actors.get(key)
        if actor is not None and own is not None and own.serving(key) is not None:
            return actor
        return None

    async def actor(self, topic: str, partition: int) -> ReplicatedActor:
        """The actor of a partition this broker serves now; UnavailableError (retryable)
        naming the owner otherwise."""
        key = partition_key(topic, partition)
        actor = self._serving(key)
        if actor is None:
            raise await self._not_here(key)
        return actor

    def actor_now(self, topic: str, partition: int) -> ReplicatedActor:
        """`actor` without waiting: the owner named is the one the last reconcile saw."""
        key = partition_key(topic, partition)
        actor = self._serving(key)
        if actor is not None:
            return actor
        me = self.logs.broker_id
        seen = None if self.ownership is None else self.ownership.owners_seen.get(key)
        if seen is None or seen.broker == me:
            raise not_owned(key, me)
        endpoints = self.ownership.brokers_seen.get(seen.broker, {}) if self.ownership else {}
        raise not_owned(key, me, seen.broker, endpoints, seen.generation)

    async def _not_here(self, key: str) -> NotOwnerError:
        own = self.ownership
        me = self.logs.broker_id
        if own is None:
            return not_owned(key, me)
        got = await own.lookup(key)
        if got is None or got[0] == me:
            return not_owned(key, me)
        broker, endpoints, generation = got
        return not_owned(key, me, broker, endpoints, generation)


def not_owned(
    key: str,
    me: str,
    broker: str = "",
    endpoints: dict[str, Any] | None = None,
    generation: int = 0,
) -> NotOwnerError:
    """The not-owner error: the owner, its generation and where to reach it (no owner:
    the partition is moving)."""
    topic, partition = split_key(key)
    if not broker:
        return NotOwnerError(
            f"partition {key} has no owner now (it is moving): retry shortly",
            topic=topic,
            partition=partition,
        )
    eps = {str(k): str(v) for k, v in (endpoints or {}).items()}
    where = ", ".join(f"{k} {v}" for k, v in sorted(eps.items()))
    return NotOwnerError(
        f"partition {key} is owned by broker {broker} (generation {generation}"
        f"{'; ' + where if where else ''}), not by {me}",
        topic=topic,
        partition=partition,
        owner=broker,
        generation=generation,
        endpoints=eps,
    )
