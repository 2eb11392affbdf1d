"""Delayed delivery: a message whose ``weir-deliver-at`` header (ms since the epoch; the
SDK's ``deliver_at`` / ``deliver_after``) lies in the future is held back from Shared and
Key_Shared subscriptions until then (Exclusive and Failover deliver it at once, as
Pulsar does).

The time travels with the message, so the index of held-back messages is rebuilt from
the data after a restart (and after kill -9): nothing about it needs storing. Only
batches that carry headers are looked at. `DelayedIndex` is one partition's index: a
heap of (time, offset) and one timer.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Callable, Iterable
from typing import Any

from weir.storage.batch import FLAG_HEADERS, decode_payload, iter_batches

DELIVER_AT = "weir-deliver-at"


def deliver_times(chunks: Iterable[Any], lo: int, hi: int) -> dict[int, int]:
    """offset -> deliver-at (ms) of the messages of ``[lo, hi)`` that carry one."""
    out: dict[int, int] = {}
    for chunk in chunks:
        for pos, h in iter_batches(chunk, verify=False):
            if h.next_offset <= lo or not h.flags & FLAG_HEADERS:
                continue
            if h.base_offset >= hi:
                return out
            for i, headers in enumerate(decode_payload(chunk, pos, h).header_list()):
                at = headers.get(DELIVER_AT)
                o = h.base_offset + i
                if at is not None and lo <= o < hi and at.isdigit():
                    out[o] = int(at)
    return out


class DelayedIndex:
    """One partition's messages held back until their delivery time."""

    __slots__ = ("_heap", "_timer", "closed", "on_due")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int]] = []  # (deliver-at ms, offset)
        self._timer: asyncio.TimerHandle | None = None
        self.on_due: Callable[[list[int]], None] | None = None  # offsets whose time came
        self.closed = False

    def __len__(self) -> int:
        return len(self._heap)

    def hold_back(self, take: list[int], chunks: Any) -> list[int]:
        """``take`` (offsets about to be delivered, read from ``chunks``) without those
        whose time is still to come: they wait here, then go to ``on_due``."""
        times = deliver_times(chunks, take[0], take[-1] + 1)
        if not times:
            return take
        now = _now_ms()
        later = {o for o in take if times.get(o, 0) > now}
        if not later:
            return take
        for o in later:
            heapq.heappush(self._heap, (times[o], o))
        self._arm()
        return [o for o in take if o not in later]

    def clear(self) -> None:
        self._heap.clear()
        self._arm()

    def close(self) -> None:
        self.closed = True
        self._arm()

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._heap and not self.closed:
            wait = max(0.0, (self._heap[0][0] - _now_ms()) / 1000)
            self._timer = asyncio.get_running_loop().call_later(wait, self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = _now_ms()
        due = []
        while self._heap and self._heap[0][0] <= now:
            due.append(heapq.heappop(self._heap)[1])
        if due and self.on_due is not None:
            self.on_due(due)
        self._arm()


def _now_ms() -> int:
    return int(time.time() * 1000)
