"""A set of offsets kept as sorted, disjoint half-open ranges (the acked offsets above a
cursor's mark-delete position): memory and stored size grow with the number of gaps,
not with the number of acked messages."""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right
from collections.abc import Iterator

_PAIR = struct.Struct("<QQ")


class RangeSet:
    """Sorted disjoint ``[start, end)`` ranges of ints."""

    __slots__ = ("_ends", "_starts")

    def __init__(self, ranges: list[tuple[int, int]] | None = None) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        for a, b in ranges or ():
            self.add_range(a, b)

    def __contains__(self, x: int) -> bool:
        i = bisect_right(self._starts, x) - 1
        return i >= 0 and x < self._ends[i]

    def __len__(self) -> int:
        """The number of ranges (gaps + 1), not of offsets."""
        return len(self._starts)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return zip(self._starts, self._ends, strict=True)

    @property
    def count(self) -> int:
        """The number of offsets in the set."""
        return sum(b - a for a, b in self)

    def end_of(self, x: int) -> int:
        """The end of the range holding ``x``; ``x`` itself when no range holds it."""
        i = bisect_right(self._starts, x) - 1
        return self._ends[i] if i >= 0 and x < self._ends[i] else x

    def next_start(self, x: int) -> int | None:
        """The start of the first range beginning after ``x`` (None: there is none)."""
        i = bisect_right(self._starts, x)
        return self._starts[i] if i < len(self._starts) else None

    def first(self) -> tuple[int, int] | None:
        return (self._starts[0], self._ends[0]) if self._starts else None

    def add_range(self, a: int, b: int) -> None:
        """Add ``[a, b)``, merging with the ranges it touches."""
        if a >= b:
            return
        i = bisect_right(self._starts, a) - 1
        if i >= 0 and self._ends[i] >= a:  # touches or overlaps the range on the left
            a = self._starts[i]
        else:
            i += 1
        j = i
        while j < len(self._starts) and self._starts[j] <= b:
            b = max(b, self._ends[j])
            j += 1
        self._starts[i:j] = [a]
        self._ends[i:j] = [b]

    def add(self, x: int) -> None:
        self.add_range(x, x + 1)

    def drop_below(self, x: int) -> None:
        """Forget every offset below ``x``."""
        while self._starts and self._ends[0] <= x:
            del self._starts[0], self._ends[0]
        if self._starts and self._starts[0] < x:
            self._starts[0] = x

    def encode(self) -> bytes:
        """(start, end) pairs, u64 little-endian: built by array slice assignment, so
        thousands of ranges cost microseconds, not a Python call each."""
        n = len(self._starts)
        out = array("Q", bytes(16 * n))
        out[0::2] = array("Q", self._starts)
        out[1::2] = array("Q", self._ends)
        if sys.byteorder != "little":  # pragma: no cover - weir runs on little-endian hosts
            out.byteswap()
        return out.tobytes()

    @classmethod
    def decode(cls, raw: bytes | memoryview) -> RangeSet:
        if len(raw) % _PAIR.size:
            raise ValueError(f"a range set is 16-byte pairs, got {len(raw)} bytes")
        pairs = array("Q")
        pairs.frombytes(raw)
        if sys.byteorder != "little":  # pragma: no cover
            pairs.byteswap()
        rs = cls()
        rs._starts = pairs[0::2].tolist()
        rs._ends = pairs[1::2].tolist()
        return rs
