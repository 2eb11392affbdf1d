"""The last hour of the server's traffic, kept in memory for the console's charts.

Sampled from the counters the Prometheus observer already keeps, so writes and reads
pay nothing extra for it: one task wakes every few seconds, sums a handful of counters
and stores the differences. With nobody looking that is the whole cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import Counter, Histogram

from weir.metrics import PrometheusObserver

SAMPLE_INTERVAL_S = 5.0
SPAN_S = 3600.0


@dataclass(frozen=True, slots=True)
class Totals:
    """Counters since the server started."""

    messages_in: float
    bytes_in: float
    bytes_out: float
    reads_out: float
    commits: float
    commit_seconds: float


@dataclass(frozen=True, slots=True)
class Rates:
    """Per-second rates over one sample interval ending at ``at`` (unix seconds)."""

    at: float
    messages_in: float
    bytes_in: float
    bytes_out: float
    reads_out: float
    commits: float
    commit_ms: float  # mean duration of one group commit (transaction and fsync)


def _sum(metric: Counter | Histogram, suffix: str) -> float:
    return sum(
        s.value for family in metric.collect() for s in family.samples if s.name.endswith(suffix)
    )


def read_totals(observer: PrometheusObserver) -> Totals:
    return Totals(
        messages_in=_sum(observer.written_messages, "_total"),
        bytes_in=_sum(observer.written_bytes, "_total"),
        bytes_out=_sum(observer.read_bytes, "_total"),
        reads_out=_sum(observer.read_responses, "_total"),
        commits=_sum(observer.commit_seconds, "_count"),
        commit_seconds=_sum(observer.commit_seconds, "_sum"),
    )


class RateHistory:
    """A ring of `Rates`, one per ``interval`` seconds over the last ``span`` seconds."""

    def __init__(
        self,
        totals: Callable[[], Totals],
        interval: float = SAMPLE_INTERVAL_S,
        span: float = SPAN_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.totals = totals
        self.interval = interval
        self.clock = clock
        self.samples: deque[Rates] = deque(maxlen=max(1, int(span / interval)))
        self._last: tuple[float, Totals] | None = None
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> Rates | None:
        """Take one sample: the rates since the previous one (None for the first)."""
        now, cur = self.clock(), self.totals()
        last, self._last = self._last, (now, cur)
        if last is None or now <= last[0]:
            return None
        then, prev = last
        dt = now - then
        commits = cur.commits - prev.commits
        rates = Rates(
            at=now,
            messages_in=(cur.messages_in - prev.messages_in) / dt,
            bytes_in=(cur.bytes_in - prev.bytes_in) / dt,
            bytes_out=(cur.bytes_out - prev.bytes_out) / dt,
            reads_out=(cur.reads_out - prev.reads_out) / dt,
            commits=commits / dt,
            commit_ms=(cur.commit_seconds - prev.commit_seconds) * 1000 / commits
            if commits
            else 0.0,
        )
        self.samples.append(rates)
        return rates

    def series(self) -> dict[str, list[float]]:
        """Column-wise samples, as uPlot takes them."""
        cols: dict[str, list[float]] = {
            "at": [],
            "messages_in": [],
            "bytes_in": [],
            "bytes_out": [],
            "reads_out": [],
            "commits": [],
            "commit_ms": [],
        }
        for r in self.samples:
            for name, values in cols.items():
                values.append(round(getattr(r, name), 3))
        return cols

    def start(self) -> None:
        if self._task is None:
            self.sample()
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.sample()
