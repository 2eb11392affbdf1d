"""The last hour of the server's traffic, kept in memory for the console's charts.

Sampled from the running totals the Prometheus observer keeps beside its counters (a
few additions per write call), so writes and reads pay next to nothing for it: one task
wakes every few seconds, reads those totals and each consumer's lag, and stores the
differences. With nobody looking that is the whole cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from weir.metrics import PrometheusObserver

log = logging.getLogger("weir.console")

SAMPLE_INTERVAL_S = 5.0
SPAN_S = 3600.0
SPARK_SPAN_S = 900.0  # per-topic write rates: the last 15 minutes
MAX_LAG_SERIES = 10_000  # (topic, consumer) pairs followed over time; past it, none


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


def partition_messages(observer: PrometheusObserver) -> dict[tuple[str, str], float]:
    """Messages written since start, per (topic as users type it, partition)."""
    return {k: float(n) for k, n in observer.totals.partition_messages.items()}


def read_totals(observer: PrometheusObserver) -> Totals:
    t = observer.totals
    return Totals(
        messages_in=t.messages_in,
        bytes_in=t.bytes_in,
        bytes_out=t.bytes_out,
        reads_out=t.reads_out,
        commits=t.commits,
        commit_seconds=t.commit_seconds,
    )


class RateHistory:
    """A ring of `Rates`, one per ``interval`` seconds over the last ``span`` seconds."""

    def __init__(
        self,
        totals: Callable[[], Totals],
        interval: float = SAMPLE_INTERVAL_S,
        span: float = SPAN_S,
        clock: Callable[[], float] = time.time,
        partitions: Callable[[], dict[tuple[str, str], float]] = dict,
        lags: Callable[[], Awaitable[dict[tuple[str, str], int]]] | None = None,
    ) -> None:
        self.totals = totals
        self.partitions = partitions
        self.lags = lags
        self.interval = interval
        self.clock = clock
        self.samples: deque[Rates] = deque(maxlen=max(1, int(span / interval)))
        # per topic: messages written per second; per (topic, consumer): lag. Each series
        # ends at the last sample; a topic or consumer that goes away is forgotten.
        self.topic_rates: dict[str, deque[float]] = {}
        self.partition_rates: dict[tuple[str, str], float] = {}  # of the last sample only
        self.consumer_lags: dict[tuple[str, str], deque[int]] = {}
        self._spark_len = max(1, int(SPARK_SPAN_S / interval))
        self._last: tuple[float, Totals, dict[tuple[str, str], float]] | None = None
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> Rates | None:
        """Take one sample: the rates since the previous one (None for the first)."""
        now, cur, per_part = self.clock(), self.totals(), self.partitions()
        last, self._last = self._last, (now, cur, per_part)
        if last is None or now <= last[0]:
            return None
        then, prev, prev_part = last
        dt = now - then
        self.partition_rates = {k: (v - prev_part.get(k, 0.0)) / dt for k, v in per_part.items()}
        per_topic: dict[str, float] = {}
        for (topic, _), rate in self.partition_rates.items():
            per_topic[topic] = per_topic.get(topic, 0.0) + rate
        self._follow(self.topic_rates, per_topic, self._spark_len)
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

    async def sample_lags(self) -> None:
        """Each consumer's lag now, after a `sample` that returned rates (same times)."""
        if self.lags is not None:
            self._follow(self.consumer_lags, await self.lags(), self.samples.maxlen or 1)

    @staticmethod
    def _follow(series: dict[Any, deque[Any]], values: dict[Any, Any], length: int) -> None:
        for key in [k for k in series if k not in values]:
            del series[key]
        for key, value in values.items():
            series.setdefault(key, deque(maxlen=length)).append(value)

    def times(self, count: int) -> list[float]:
        """The times of the last ``count`` samples."""
        n = len(self.samples)
        return [r.at for r in itertools.islice(self.samples, max(0, n - count), n)]

    def lag_series(self, topic: str) -> dict[str, list[float | None]]:
        """Lag over time of each consumer of ``topic``, with the sample times, for uPlot
        (None where a consumer did not exist yet)."""
        mine = {c: s for (t, c), s in self.consumer_lags.items() if t == topic}
        length = max((len(s) for s in mine.values()), default=0)
        out: dict[str, list[float | None]] = {"at": list(self.times(length))}
        for consumer, values in sorted(mine.items()):
            out[consumer] = [None] * (length - len(values)) + [float(v) for v in values]
        return out

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
            try:
                if self.sample() is not None:
                    await self.sample_lags()
            except Exception:  # a chart with a gap, never a console without charts
                log.exception("console sample failed")
