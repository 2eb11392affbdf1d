"""Journaled commits not yet applied to LMDB, and read views that see them.

A `Delta` is the net effect of one or more commits' ops: point entries (a value, or
None for a delete) and deleted ranges; a point entry always wins over a range (a put
after a range delete stays, a put before it is dropped when the range is added). An
`OverlayView` stacks the deltas not yet in LMDB over an LMDB snapshot, so a reader
sees a commit as soon as it is acknowledged, before it is applied. Every op is a blind
write (no read-modify-write), so stacking a delta over a snapshot that already holds it
gives the same state: the snapshot and the stack need not line up exactly.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence

from weir.storage.kv import Buffer, Op, RangeEnd, ReadView


class _TableDelta:
    __slots__ = ("points", "ranges", "sorted_keys")

    def __init__(self) -> None:
        self.points: dict[bytes, memoryview | None] = {}
        self.ranges: list[tuple[bytes, bytes]] = []
        self.sorted_keys: list[bytes] | None = None

    def covered(self, key: bytes) -> bool:
        return any(a <= key < b for a, b in self.ranges)

    def keys_in(self, start: bytes, stop: bytes | None) -> list[bytes]:
        keys = self.sorted_keys
        if keys is None:
            keys = self.sorted_keys = sorted(self.points)
        lo = bisect_left(keys, start)
        hi = len(keys) if stop is None else bisect_left(keys, stop)
        return keys[lo:hi]


def _readonly(value: Buffer) -> memoryview:
    mv = memoryview(value)
    return mv if mv.readonly else memoryview(bytes(mv))


class Delta:
    """The net effect of some ops, table by table; ``nbytes`` approximates its memory."""

    __slots__ = ("nbytes", "tables")

    def __init__(self, ops: Iterable[Op] = ()) -> None:
        self.tables: dict[str, _TableDelta] = {}
        self.nbytes = 0
        for op in ops:
            self.add(op)

    def add(self, op: Op) -> None:
        table, key, value = op
        t = self.tables.get(table)
        if t is None:
            t = self.tables[table] = _TableDelta()
        t.sorted_keys = None
        if isinstance(value, RangeEnd):
            stop = value.stop
            for k in [k for k in t.points if key <= k < stop]:
                del t.points[k]
            t.ranges.append((key, stop))
            self.nbytes += len(key) + len(stop)
        else:
            t.points[key] = None if value is None else _readonly(value)
            self.nbytes += len(key) + (0 if value is None else len(value))

    def ops(self) -> Iterator[Op]:
        """Ops that make a store hold this delta: the range deletes, then the points."""
        for table, t in self.tables.items():
            for a, b in t.ranges:
                yield Op(table, a, RangeEnd(b))
        for table, t in self.tables.items():
            for k, v in t.points.items():
                yield Op(table, k, v)


_MISS = object()


class OverlayView:
    """A `ReadView` of ``deltas`` (oldest first) stacked on ``base``."""

    __slots__ = ("_base", "_deltas")

    def __init__(self, base: ReadView, deltas: Sequence[Delta]) -> None:
        self._base = base
        self._deltas = deltas

    def _lookup(self, table: str, key: bytes) -> memoryview | object | None:
        for d in reversed(self._deltas):
            t = d.tables.get(table)
            if t is None:
                continue
            if key in t.points:
                return t.points[key]
            if t.ranges and t.covered(key):
                return None
        return _MISS

    def get(self, table: str, key: bytes) -> memoryview | None:
        v = self._lookup(table, key)
        if v is _MISS:
            return self._base.get(table, key)
        return v  # type: ignore[return-value]

    def scan(
        self, table: str, start: bytes, stop: bytes | None = None, *, values: bool = True
    ) -> Iterator[tuple[bytes, memoryview]]:
        mine = [t for d in self._deltas if (t := d.tables.get(table)) is not None]
        if not mine:
            yield from self._base.scan(table, start, stop, values=values)
            return
        extra = sorted({k for t in mine for k in t.keys_in(start, stop)})
        empty = memoryview(b"")
        i = 0
        for k, v in self._base.scan(table, start, stop, values=values):
            while i < len(extra) and extra[i] < k:
                yield from self._own(table, extra[i], values, empty)
                i += 1
            if i < len(extra) and extra[i] == k:
                i += 1
                yield from self._own(table, k, values, empty)
                continue
            o = self._lookup(table, k)
            if o is _MISS:
                yield k, v
            elif o is not None:
                yield k, (o if values else empty)  # type: ignore[misc]
        for k in extra[i:]:
            yield from self._own(table, k, values, empty)

    def _own(
        self, table: str, key: bytes, values: bool, empty: memoryview
    ) -> Iterator[tuple[bytes, memoryview]]:
        v = self._lookup(table, key)
        if v is not None and v is not _MISS:
            yield key, (v if values else empty)  # type: ignore[misc]
