"""Message rates of a subscription over a recent window (Pulsar's msgRateOut and
messageAckRate): a few one-second buckets, so counting costs one clock read per
delivery or ack request, not per message."""

from __future__ import annotations

import time

WINDOW_S = 10


class RateMeter:
    """Events per second over the last `WINDOW_S` whole seconds (plus the current one)."""

    __slots__ = ("_buckets", "_now", "_sec")

    def __init__(self, now: float | None = None) -> None:
        self._buckets = [0] * (WINDOW_S + 1)
        self._now = time.monotonic
        self._sec = int(self._now() if now is None else now)

    def _roll(self, sec: int) -> None:
        gap = sec - self._sec
        if gap <= 0:
            return
        n = len(self._buckets)
        for i in range(1, min(gap, n) + 1):
            self._buckets[(self._sec + i) % n] = 0
        self._sec = sec

    def add(self, count: int, now: float | None = None) -> None:
        sec = int(self._now() if now is None else now)
        if sec != self._sec:
            self._roll(sec)
        self._buckets[sec % len(self._buckets)] += count

    def rate(self, now: float | None = None) -> float:
        """Per second, over the last `WINDOW_S` seconds (the current partial one included,
        the oldest left out, so the window is always about `WINDOW_S` long)."""
        t = self._now() if now is None else now
        sec = int(t)
        self._roll(sec)
        n = len(self._buckets)
        total = sum(self._buckets) - self._buckets[(sec + 1) % n]
        return total / WINDOW_S
