"""A subscription's cursor on one partition: the mark-delete position (every offset
below it is acknowledged) plus the ranges acknowledged above it.

`Cursor` is the interface dispatchers use; `StoredCursor` keeps it in the KV store.
An acknowledgement changes the cursor in memory at once (so nothing acked is
dispatched again) and `persist()` resolves once a snapshot containing it is durable:
the ack's response waits for that. Snapshots ride the broker's group commit, at most
one in flight per cursor; acks arriving meanwhile share the next snapshot, so a burst
of acks costs one small KV write, not one fsync each.
"""

from __future__ import annotations

import asyncio
import struct
from bisect import bisect_left
from typing import Protocol

from weir.broker.subscriptions.ranges import RangeSet
from weir.storage.committer import GroupCommitter
from weir.storage.kv import Op, delete, put

SUBSCRIPTIONS = "subscriptions"
_MARK = struct.Struct("<Q")
_CURSOR_KEY = struct.Struct(">cII")
_COUNT = struct.Struct("<QI")


def cursor_key(topic_id: int, partition: int, name: str) -> bytes:
    return _CURSOR_KEY.pack(b"c", topic_id, partition) + name.encode()


def counts_key(cursor_key: bytes) -> bytes:
    """Where a cursor's redelivery counts are kept (beside it; absent when none is > 0)."""
    return b"r" + cursor_key[1:]


def encode_counts(counts: dict[int, int], mark_delete: int) -> bytes:
    return b"".join(_COUNT.pack(o, n) for o, n in sorted(counts.items()) if o >= mark_delete)


def decode_counts(raw: bytes | memoryview) -> dict[int, int]:
    return {o: n for o, n in _COUNT.iter_unpack(raw)}


def parse_cursor_key(key: bytes) -> tuple[int, int, str]:
    _, tid, part = _CURSOR_KEY.unpack_from(key)
    return tid, part, bytes(key[_CURSOR_KEY.size :]).decode()


def encode_cursor(mark_delete: int, acked: RangeSet) -> bytes:
    return _MARK.pack(mark_delete) + acked.encode()


def decode_cursor(raw: bytes | memoryview) -> tuple[int, RangeSet]:
    return _MARK.unpack_from(raw)[0], RangeSet.decode(memoryview(raw)[_MARK.size :])


class Cursor(Protocol):
    """What a subscription sees of a cursor: `StoredCursor` (a subscription's own) or
    `ConsumerCursor` (a consumer's committed offset)."""

    @property
    def acked(self) -> RangeSet: ...

    def check_acks(self, ranges: list[tuple[int, int]]) -> None:
        """Raise BadRequestError when these ``[start, end)`` acks cannot be kept."""

    def drop_ops(self) -> list[Op]: ...

    @property
    def mark_delete(self) -> int: ...

    def is_acked(self, offset: int) -> bool: ...

    def next_unacked(self, offset: int) -> int: ...

    def next_acked(self, offset: int) -> int | None: ...

    def ack_range(self, start: int, end: int) -> None: ...

    def ack_cumulative(self, offset: int) -> None: ...

    def skip_to(self, offset: int) -> None: ...

    def reset(self, offset: int) -> None: ...

    def acked_above(self) -> int: ...

    def persist(self) -> asyncio.Future[None]: ...

    @property
    def counts(self) -> dict[int, int]: ...


def drop_acked(cursor: Cursor, offsets: list[int]) -> list[int]:
    """The offsets of ``offsets`` (ascending) that ``cursor`` has not acknowledged.

    Found a run at a time: one lookup of the next acknowledged range per run of
    unacknowledged offsets (a bisect into ``offsets`` to skip it), instead of one range
    lookup per offset, so a dispatch of a thousand offsets costs a few lookups."""
    n = len(offsets)
    i = bisect_left(offsets, cursor.mark_delete)  # everything below it is acknowledged
    if i == 0 and n:
        o = offsets[0]
        if cursor.next_unacked(o) == o:
            acked = cursor.next_acked(o)
            if acked is None or acked > offsets[-1]:
                return offsets  # the usual case: nothing acked in the span
    out: list[int] = []
    while i < n:
        o = offsets[i]
        u = cursor.next_unacked(o)
        if u != o:  # o is acknowledged: on from the first offset past its range
            i = bisect_left(offsets, u, i)
            continue
        acked = cursor.next_acked(o)
        j = n if acked is None else bisect_left(offsets, acked, i)
        out += offsets[i:j]
        i = j
    return out


class StoredCursor:
    """A `Cursor` written to the ``subscriptions`` table through the group committer."""

    def __init__(
        self,
        committer: GroupCommitter,
        key: bytes,
        mark_delete: int,
        acked: RangeSet | None = None,
        counts: dict[int, int] | None = None,
    ) -> None:
        self._committer = committer
        self.key = key
        self._mark = mark_delete
        self._acked = acked or RangeSet()
        # offset -> times delivered again; kept (only counts > 0) so that dead-lettering
        # after max_redeliver_count is not reset by a restart
        self.counts: dict[int, int] = counts or {}
        self._counts_stored = bool(self.counts)
        self._inflight = False
        self._next: asyncio.Future[None] | None = None

    @property
    def mark_delete(self) -> int:
        return self._mark

    @property
    def acked(self) -> RangeSet:
        return self._acked

    def is_acked(self, offset: int) -> bool:
        return offset < self._mark or offset in self._acked

    def next_unacked(self, offset: int) -> int:
        """The first offset at or after ``offset`` not acknowledged."""
        return self._acked.end_of(max(offset, self._mark))

    def next_acked(self, offset: int) -> int | None:
        """The first acknowledged offset after ``offset`` (None: none is)."""
        return self._acked.next_start(offset)

    def ack_range(self, start: int, end: int) -> None:
        """Acknowledge the offsets of ``[start, end)``."""
        self._acked.add_range(max(start, self._mark), end)
        self._advance()

    def ack_cumulative(self, offset: int) -> None:
        """Everything up to and including ``offset`` is acknowledged."""
        self.skip_to(offset + 1)

    def reset(self, offset: int) -> None:
        """Seek: everything below ``offset`` is acknowledged, nothing from it on (may go back)."""
        self._mark = offset
        self._acked = RangeSet()

    def skip_to(self, offset: int) -> None:
        """Move mark-delete to ``offset`` (never backwards): retention removed what was below."""
        if offset > self._mark:
            self._mark = offset
            self._acked.drop_below(offset)
            self._advance()

    def _advance(self) -> None:
        first = self._acked.first()
        if first is not None and first[0] <= self._mark:
            self._mark = max(self._mark, first[1])
            self._acked.drop_below(self._mark)

    def acked_above(self) -> int:
        return self._acked.count

    def snapshot_op(self) -> Op:
        return put(SUBSCRIPTIONS, self.key, encode_cursor(self._mark, self._acked))

    def snapshot_ops(self) -> list[Op]:
        """The cursor as it is now, and its redelivery counts (removed when none is left)."""
        ops = [self.snapshot_op()]
        counts = encode_counts(self.counts, self._mark) if self.counts else b""
        if counts:
            ops.append(put(SUBSCRIPTIONS, counts_key(self.key), counts))
            self._counts_stored = True
        elif self._counts_stored:
            ops.append(delete(SUBSCRIPTIONS, counts_key(self.key)))
            self._counts_stored = False
        return ops

    def check_acks(self, ranges: list[tuple[int, int]]) -> None:
        return None  # any offsets: the range set keeps them

    def load_counts(self, stored: dict[int, int]) -> None:
        """Counts read back at start (the stored key is rewritten or removed at the next snapshot)."""
        self.counts.update((o, n) for o, n in stored.items() if o >= self._mark)
        self._counts_stored = True

    def drop_ops(self) -> list[Op]:
        return [delete(SUBSCRIPTIONS, self.key), delete(SUBSCRIPTIONS, counts_key(self.key))]

    def persist(self) -> asyncio.Future[None]:
        """A future that resolves once the cursor as it is now is durable."""
        fut = self._next
        if fut is None:
            fut = self._next = asyncio.get_running_loop().create_future()
            if not self._inflight:
                self._write()
        return fut

    def _written(self, fut: asyncio.Future[None], d: asyncio.Future[None]) -> None:
        """A store ended: answer the acks it carried as it ended, then start the next
        store if acks arrived meanwhile."""
        self._inflight = False
        if not fut.done():
            if d.cancelled():
                fut.cancel()
            elif (exc := d.exception()) is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(None)
        if self._next is not None:
            self._write()

    def _write(self) -> None:
        fut, self._next = self._next, None
        assert fut is not None
        self._inflight = True
        ops = self.snapshot_ops()
        try:
            done = asyncio.wrap_future(
                self._committer.submit(ops, sum(len(op.key) + 16 for op in ops))
            )
        except Exception as exc:
            self._inflight = False
            fut.set_exception(exc)
            return

        done.add_done_callback(lambda d: self._written(fut, d))
