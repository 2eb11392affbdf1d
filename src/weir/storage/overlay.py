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
    __slots__ = ("points", "ranges")

    def __init__(self) -> None:
        self.points: dict[bytes, memoryview | None] = {}
        self.ranges: list[tuple[bytes, bytes]] = []


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


class _Merged:
    """One table's net effect of a stack of deltas: what a view consults per key."""

    __slots__ = ("keys", "points", "ranges")

    def __init__(self, deltas: Sequence[Delta], table: str) -> None:
        points: dict[bytes, memoryview | None] = {}
        ranges: list[tuple[bytes, bytes]] = []
        for d in deltas:
            t = d.tables.get(table)
            if t is None:
                continue
            for a, b in t.ranges:
                # a range hides older points, and (below) LMDB's keys; newer points win
                for k in [k for k in points if a <= k < b]:
                    del points[k]
                ranges.append((a, b))
            points.update(t.points)
        self.points = points
        self.ranges = ranges
        self.keys = sorted(points)

    def lookup(self, key: bytes) -> memoryview | object | None:
        if key in self.points:
            return self.points[key]
        if self.ranges and any(a <= key < b for a, b in self.ranges):
            return None
        return _MISS


_MISS = object()

# table -> its merged deltas; shared by the views of one stack of deltas
MergedCache = dict[str, _Merged]


class OverlayView:
    """A `ReadView` of ``deltas`` (oldest first) stacked on ``base``. ``cache`` holds the
    per-table merge of these deltas, built on first use and shared by every view of
    the same stack (a view costs one dict lookup per key, whatever the stack's depth)."""

    __slots__ = ("_base", "_cache", "_deltas")

    def __init__(
        self, base: ReadView, deltas: Sequence[Delta], cache: MergedCache | None = None
    ) -> None:
        self._base = base
        self._deltas = deltas
        self._cache: MergedCache = {} if cache is None else cache

    def _merged(self, table: str) -> _Merged:
        m = self._cache.get(table)
        if m is None:
            m = self._cache[table] = _Merged(self._deltas, table)
        return m

    def get(self, table: str, key: bytes) -> memoryview | None:
        v = self._merged(table).lookup(key)
        if v is _MISS:
            return self._base.get(table, key)
        return v  # type: ignore[return-value]

    def scan(
        self, table: str, start: bytes, stop: bytes | None = None, *, values: bool = True
    ) -> Iterator[tuple[bytes, memoryview]]:
        m = self._merged(table)
        if not m.points and not m.ranges:
            yield from self._base.scan(table, start, stop, values=values)
            return
        keys = m.keys
        i = bisect_left(keys, start)
        hi = len(keys) if stop is None else bisect_left(keys, stop)
        empty = memoryview(b"")
        points = m.points
        for k, v in self._base.scan(table, start, stop, values=values):
            while i < hi and keys[i] < k:
                if (o := points[keys[i]]) is not None:
                    yield keys[i], (o if values else empty)
                i += 1
            if i < hi and keys[i] == k:
                i += 1
                if (o := points[k]) is not None:
                    yield k, (o if values else empty)
                continue
            if m.ranges and any(a <= k < b for a, b in m.ranges):
                continue
            yield k, v
        while i < hi:
            if (o := points[keys[i]]) is not None:
                yield keys[i], (o if values else empty)
            i += 1
