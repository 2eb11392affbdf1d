"""The committed offset of one read partition session, moved only over contiguous ranges.

The SDK commits half-open offset ranges ``[start, end)``, one per commit call,
in any order (a reader may commit a later batch before an earlier one). The
consumer's committed offset must never skip an uncommitted message, so a range
that starts past the committed offset waits until the ranges before it arrive.
"""

from __future__ import annotations

import bisect

from weir.errors import BadRequestError

MAX_PENDING_RANGES = 100_000


class CommitTracker:
    """``committed`` is the next offset to read; `add` returns whether it moved."""

    def __init__(self, committed: int) -> None:
        self.committed = committed
        self._ranges: list[tuple[int, int]] = []  # sorted, all starting past `committed`

    @property
    def pending(self) -> int:
        """Ranges waiting for a gap before them to be committed."""
        return len(self._ranges)

    def add(self, start: int, end: int) -> bool:
        if start < 0 or end < start:
            raise BadRequestError(f"bad commit range [{start}, {end})")
        if end <= self.committed:
            return False  # committed already (a repeated commit is fine)
        if start > self.committed:
            if len(self._ranges) >= MAX_PENDING_RANGES:
                raise BadRequestError(
                    f"more than {MAX_PENDING_RANGES} commit ranges wait for a gap at "
                    f"offset {self.committed}"
                )
            bisect.insort(self._ranges, (start, end))
            return False
        self.committed = end
        while self._ranges and self._ranges[0][0] <= self.committed:
            self.committed = max(self.committed, self._ranges.pop(0)[1])
        return True
