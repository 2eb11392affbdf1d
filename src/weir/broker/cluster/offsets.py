"""`LogOffsets`: committed consumer offsets kept in each partition's replicated log.

In embedded mode a consumer's committed offsets are rows of the broker's LMDB
``offsets`` table (`weir.broker.consumers.OffsetStore`). A replicated partition
moves between brokers, so its offsets must move with it: here each one is a
named position of the partition's `ReplicatedPartitionLog`
(``offset:{consumer}`` -> the next offset to read and the consumer's registration time,
two u64 little-endian). A commit
is one managed-log entry, appended in its turn among the partition's writes
(`PartitionActor.run_change`) and acknowledged by AQ bookies before the client
hears "committed"; the positions are folded into the log's snapshots, so the next
owner (after an unload, a kill -9, a lost session) serves them.

A broker knows the offsets of the partitions it serves only: `get` of another
partition is None (every caller first asks for the partition's actor, which names
the owner), and a commit there is refused with the retryable `UnavailableError`.
Offsets are not part of a transaction here (transactions are refused on
replicated partitions).

A consumer dropped from its topic loses its offsets: the broker that drops it clears
them on the partitions it serves, but other brokers' partitions keep the positions
until then; so a position also names the registration it belongs to (the consumer's
``created_at_ms``), and one of an earlier registration reads as no offset. A consumer
dropped and registered again starts afresh on every partition, as in embedded mode.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from weir.broker.consumers import OffsetStore
from weir.broker.partition_actor import PartitionActor
from weir.broker.topics import TopicConfig
from weir.errors import BadRequestError, UnavailableError, UnknownConsumerError, WeirError
from weir.replication.partition_log import ReplicatedPartitionLog
from weir.replication.partition_log.log import ReplicatedChange
from weir.storage.kv import Op

log = logging.getLogger("weir.cluster")

_VAL = struct.Struct("<QQ")  # offset, the consumer's created_at_ms
PREFIX = "offset:"


def position_key(consumer: str) -> str:
    """The name of a consumer's committed offset among a partition's positions."""
    return PREFIX + consumer


def encode_offset(offset: int, registered_ms: int) -> bytes:
    return _VAL.pack(offset, registered_ms)


def decode_offset(raw: bytes) -> tuple[int, int]:
    """(offset, the consumer's created_at_ms when it was committed)."""
    offset, registered = _VAL.unpack(raw)
    return int(offset), int(registered)


class LogOffsets(OffsetStore):
    """`OffsetStore` over the positions of the replicated partitions this broker serves."""

    def __init__(
        self,
        actors: Mapping[tuple[str, int], PartitionActor[Any]],
        topics: Mapping[str, TopicConfig],
    ) -> None:
        """``actors``, ``topics``: the broker's live tables (read, never changed here)."""
        self._offsets = {}  # unused: the logs hold the offsets
        self._actors = actors
        self._topics = topics
        self._names: dict[int, str] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ lookups

    def _name(self, topic_id: int) -> str | None:
        name = self._names.get(topic_id)
        cfg = None if name is None else self._topics.get(name)
        if cfg is None or cfg.topic_id != topic_id:
            name = next((c.name for c in self._topics.values() if c.topic_id == topic_id), None)
            if name is None:
                return None
            self._names[topic_id] = name
        return name

    def _actor(self, topic_id: int, partition: int) -> PartitionActor[Any] | None:
        name = self._name(topic_id)
        actor = None if name is None else self._actors.get((name, partition))
        if actor is None or not isinstance(actor.log, ReplicatedPartitionLog):
            return None
        return actor

    def _served(self, topic_id: int, partition: int) -> PartitionActor[Any]:
        actor = self._actor(topic_id, partition)
        if actor is None:
            raise UnavailableError(
                f"partition {self._name(topic_id) or topic_id}/{partition} is not served by "
                "this broker (it moved): ask its owner"
            )
        return actor

    def _registered(self, topic_id: int, consumer: str) -> int | None:
        """The consumer's created_at_ms on the topic; None if it is not registered."""
        name = self._name(topic_id)
        cfg = None if name is None else self._topics.get(name)
        c = None if cfg is None else cfg.consumers.get(consumer)
        return None if c is None else c.created_at_ms

    @staticmethod
    def _read(plog: ReplicatedPartitionLog, consumer: str, registered: int | None) -> int | None:
        raw = plog.positions.get(position_key(consumer))
        if raw is None or registered is None:
            return None
        offset, at = decode_offset(raw)
        return offset if at == registered else None  # else: an earlier registration's

    # ------------------------------------------------------------------ OffsetStore

    def get(self, topic_id: int, partition: int, consumer: str) -> int | None:
        actor = self._actor(topic_id, partition)
        if actor is None:
            return None
        return self._read(actor.log, consumer, self._registered(topic_id, consumer))

    async def commit(
        self,
        topic_id: int,
        partition: int,
        consumer: str,
        offset: int,
        *,
        allow_backwards: bool = False,
    ) -> bool:
        """Append the offset to the partition's log; False (nothing appended) when it
        would move backwards. Compared in the commit's turn, so two commits racing on one
        partition never move it backwards."""
        if offset < 0:
            raise BadRequestError(f"offset must be >= 0, got {offset}")
        actor = self._served(topic_id, partition)
        plog: ReplicatedPartitionLog = actor.log
        same = False

        def prepare() -> ReplicatedChange | None:
            nonlocal same
            registered = self._registered(topic_id, consumer)
            if registered is None:
                raise UnknownConsumerError(f"consumer {consumer!r} is not registered")
            current = self._read(plog, consumer, registered)
            if (
                current is not None
                and offset <= current
                and not (allow_backwards and offset != current)
            ):
                same = offset == current
                return None
            value = encode_offset(offset, registered)
            return plog.prepare_positions({position_key(consumer): value})

        return await actor.run_change(prepare) or same

    def prepare(
        self, topic_id: int, partition: int, consumer: str, offset: int
    ) -> tuple[list[Op], Callable[[], None]]:
        raise BadRequestError(
            "committing offsets in a transaction is not supported on a replicated partition"
        )

    async def delete(self, topic_id: int, partition: int, consumer: str) -> bool:
        actor = self._served(topic_id, partition)
        plog: ReplicatedPartitionLog = actor.log

        had = self.get(topic_id, partition, consumer) is not None

        def prepare() -> ReplicatedChange | None:
            if position_key(consumer) not in plog.positions:
                return None
            return plog.prepare_positions({position_key(consumer): None})

        return await actor.run_change(prepare) and had

    def partitions_of(self, topic_id: int, consumer: str) -> list[int]:
        """The partitions served here the consumer has an offset on."""
        name = self._name(topic_id)
        return sorted(
            p
            for (t, p) in list(self._actors)
            if t == name and self.get(topic_id, p, consumer) is not None
        )

    def min_committed(self, topic_id: int, partition: int, consumers: Iterable[str]) -> int | None:
        values = [self.get(topic_id, partition, c) or 0 for c in consumers]
        return min(values) if values else None

    def drop_ops(self, topic_id: int, consumer: str | None = None) -> list[Op]:
        return []  # nothing in the broker's LMDB: `forget` clears the logs' positions

    def forget(self, topic_id: int, consumer: str | None = None) -> None:
        """A dropped consumer (or topic): clear its offsets on the partitions served here,
        in the background (a dropped topic's logs go with it)."""
        if consumer is None:
            return
        name = self._name(topic_id)
        key = position_key(consumer)
        for (t, _), actor in list(self._actors.items()):
            plog = actor.log
            if t != name or not isinstance(plog, ReplicatedPartitionLog):
                continue
            if key not in plog.positions:
                continue
            task = asyncio.get_running_loop().create_task(self._clear(actor, plog, key))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _clear(actor: PartitionActor[Any], plog: ReplicatedPartitionLog, key: str) -> None:
        def prepare() -> ReplicatedChange | None:
            return plog.prepare_positions({key: None}) if key in plog.positions else None

        try:
            await actor.run_change(prepare)
        except WeirError as exc:  # moved or closing: the next owner keeps the position
            log.warning("cannot clear a dropped consumer's offset", extra={"error": exc.message})
