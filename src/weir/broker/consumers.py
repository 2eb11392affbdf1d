"""Consumers: committed offsets (durable) and the spreading of partitions over read sessions.

`OffsetStore` keeps (topic, partition, consumer) -> committed offset in the
``offsets`` table, cached in memory; commits go through the group committer so
they share fsyncs with the writes around them. A committed offset is the next
offset to read, as in Kafka and YDB.

`ConsumerGroup` is one consumer of one topic: its live read sessions share the
partitions, each partition read by one session. Balancing is sticky: a joining
session takes partitions only from sessions holding more than their share, and
a partition moves only after its old session has let go (graceful stop,
confirmed) or the rebalance timeout has passed.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Iterable
from typing import Protocol

from weir.errors import BadRequestError
from weir.storage.committer import GroupCommitter
from weir.storage.kv import KV, Op, delete, put

OFFSETS = "offsets"
_KEY = struct.Struct(">II")
_VAL = struct.Struct("<Q")


def offset_key(topic_id: int, partition: int, consumer: str) -> bytes:
    return _KEY.pack(topic_id, partition) + consumer.encode()


class OffsetStore:
    """Durable committed offsets, one per (topic id, partition, consumer)."""

    def __init__(self, kv: KV, committer: GroupCommitter) -> None:
        self._committer = committer
        self._offsets: dict[tuple[int, int, str], int] = {}
        for k, v in kv.scan(OFFSETS):
            tid, part = _KEY.unpack_from(k)
            self._offsets[(tid, part, k[_KEY.size :].decode())] = _VAL.unpack(v)[0]

    def get(self, topic_id: int, partition: int, consumer: str) -> int | None:
        return self._offsets.get((topic_id, partition, consumer))

    async def commit(
        self,
        topic_id: int,
        partition: int,
        consumer: str,
        offset: int,
        *,
        allow_backwards: bool = False,
    ) -> bool:
        """Durably store ``offset``; False (and nothing stored) if it would move backwards."""
        if offset < 0:
            raise BadRequestError(f"offset must be >= 0, got {offset}")
        key = (topic_id, partition, consumer)
        current = self._offsets.get(key)
        if (
            current is not None
            and offset <= current
            and not (allow_backwards and offset != current)
        ):
            return offset == current
        op = put(OFFSETS, offset_key(topic_id, partition, consumer), _VAL.pack(offset))
        await asyncio.wrap_future(self._committer.submit([op], 16))
        latest = self._offsets.get(key)
        if latest is None or offset > latest or allow_backwards:
            self._offsets[key] = offset
        return True

    def prepare(
        self, topic_id: int, partition: int, consumer: str, offset: int
    ) -> tuple[list[Op], Callable[[], None]]:
        """The ops that store ``offset`` inside a bigger KV transaction (none when it would
        not move forward), and what to call once they are durable."""
        if offset < 0:
            raise BadRequestError(f"offset must be >= 0, got {offset}")
        key = (topic_id, partition, consumer)
        current = self._offsets.get(key)
        if current is not None and offset <= current:
            return [], _nothing
        op = put(OFFSETS, offset_key(topic_id, partition, consumer), _VAL.pack(offset))

        def done() -> None:
            latest = self._offsets.get(key)
            if latest is None or offset > latest:
                self._offsets[key] = offset

        return [op], done

    async def delete(self, topic_id: int, partition: int, consumer: str) -> bool:
        """Durably forget the consumer's offset of one partition; False if it had none."""
        key = (topic_id, partition, consumer)
        if key not in self._offsets:
            return False
        op = delete(OFFSETS, offset_key(topic_id, partition, consumer))
        await asyncio.wrap_future(self._committer.submit([op], 16))
        self._offsets.pop(key, None)
        return True

    def partitions_of(self, topic_id: int, consumer: str) -> list[int]:
        """The partitions of a topic the consumer has a committed offset on."""
        return sorted(p for (t, p, c) in self._offsets if t == topic_id and c == consumer)

    def min_committed(self, topic_id: int, partition: int, consumers: Iterable[str]) -> int | None:
        """Lowest committed offset among ``consumers`` (0 for one that never committed)."""
        values = [self._offsets.get((topic_id, partition, c), 0) for c in consumers]
        return min(values) if values else None

    def drop_ops(self, topic_id: int, consumer: str | None = None) -> list[Op]:
        return [
            delete(OFFSETS, offset_key(t, p, c))
            for (t, p, c) in self._offsets
            if t == topic_id and (consumer is None or c == consumer)
        ]

    def forget(self, topic_id: int, consumer: str | None = None) -> None:
        for key in [
            k for k in self._offsets if k[0] == topic_id and (consumer is None or k[2] == consumer)
        ]:
            del self._offsets[key]


def _nothing() -> None:
    pass


class GroupMember(Protocol):
    """A read session as the group sees it; the front turns calls into protocol messages."""

    @property
    def session_id(self) -> str: ...

    def assign(self, topic: str, partition: int) -> None:
        """Start reading ``partition`` (the front sends start_partition_session)."""

    def revoke(self, topic: str, partition: int, graceful: bool) -> None:
        """Stop reading ``partition``. Graceful: finish, then call `ConsumerGroup.released`."""


class ConsumerGroup:
    """The live read sessions of one consumer on one topic, and who reads which partition."""

    def __init__(
        self, topic: str, consumer: str, partitions: int, rebalance_timeout: float
    ) -> None:
        self.topic = topic
        self.consumer = consumer
        self.partitions = partitions
        self.rebalance_timeout = rebalance_timeout
        self.members: dict[str, GroupMember] = {}
        self.owner: dict[int, str] = {}
        self._revoking: dict[int, asyncio.TimerHandle] = {}

    def join(self, member: GroupMember) -> None:
        self.members[member.session_id] = member
        self._rebalance()

    def leave(self, session_id: str) -> None:
        """A session went away: its partitions are free at once (nobody is reading them)."""
        if self.members.pop(session_id, None) is None:
            return
        for p in [p for p, s in self.owner.items() if s == session_id]:
            del self.owner[p]
            timer = self._revoking.pop(p, None)
            if timer is not None:
                timer.cancel()
        self._rebalance()

    def released(self, session_id: str, partition: int) -> None:
        """The session confirmed it stopped reading ``partition``."""
        if self.owner.get(partition) != session_id:
            return
        del self.owner[partition]
        timer = self._revoking.pop(partition, None)
        if timer is not None:
            timer.cancel()
        self._rebalance()

    def set_partitions(self, partitions: int) -> None:
        self.partitions = partitions
        self._rebalance()

    def assignment(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {s: [] for s in self.members}
        for p, s in sorted(self.owner.items()):
            out.setdefault(s, []).append(p)
        return out

    def _desired(self) -> dict[int, str]:
        ids = list(self.members)
        if not ids:
            return {}
        base, extra = divmod(self.partitions, len(ids))
        quota = {s: base + (1 if i < extra else 0) for i, s in enumerate(ids)}
        desired: dict[int, str] = {}
        for p in range(self.partitions):
            s = self.owner.get(p)
            if s is not None and quota.get(s, 0) > 0:
                desired[p] = s
                quota[s] -= 1
        free = [p for p in range(self.partitions) if p not in desired]
        for s in ids:
            while quota[s] > 0 and free:
                desired[free.pop(0)] = s
                quota[s] -= 1
        return desired

    def _rebalance(self) -> None:
        desired = self._desired()
        for p in range(self.partitions):
            want = desired.get(p)
            cur = self.owner.get(p)
            if cur == want or want is None:
                continue
            if cur is None:
                self.owner[p] = want
                self.members[want].assign(self.topic, p)
            elif p not in self._revoking:
                self.members[cur].revoke(self.topic, p, True)
                loop = asyncio.get_running_loop()
                self._revoking[p] = loop.call_later(self.rebalance_timeout, self._force, cur, p)

    def _force(self, session_id: str, partition: int) -> None:
        self._revoking.pop(partition, None)
        member = self.members.get(session_id)
        if member is not None and self.owner.get(partition) == session_id:
            member.revoke(self.topic, partition, False)
            del self.owner[partition]
            self._rebalance()

    def close(self) -> None:
        for timer in self._revoking.values():
            timer.cancel()
        self._revoking.clear()
