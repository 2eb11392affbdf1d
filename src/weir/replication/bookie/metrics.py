"""A bookie's Prometheus metrics and the HTTP endpoint that serves them.

The same conventions as the broker's (`weir.metrics`, docs/observability.md):
off unless ``--metrics-listen HOST:PORT`` is given; ``/metrics`` in the
Prometheus text format, ``/healthz`` and ``/readyz``; counters counted as
requests are answered, gauges read from the live bookie at scrape time, so they
cost nothing between scrapes. Its own small aiohttp app rather than
`weir.metrics.MetricsEndpoint`: that module belongs to the broker, and the
replication layer depends on the storage layer only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric

from weir.http_site import HttpSite

if TYPE_CHECKING:
    from weir.replication.bookie.service import Bookie

# group commit (journal fsync) seconds, as the broker's commit histogram
_COMMIT_SECONDS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class BookieMetrics:
    """Counters of one bookie's requests and journal commits, gauges of its state."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.adds = Counter(
            "weir_bookie_adds",
            "ADD requests answered, by result (ok, fenced, read_only, overloaded, ...).",
            ("result",),
            registry=r,
        )
        self.add_bytes = Counter(
            "weir_bookie_add_bytes", "Entry bytes stored by acknowledged adds.", registry=r
        )
        self.reads = Counter(
            "weir_bookie_reads",
            "READ requests answered, by result (ok, no_entry, no_ledger, ...).",
            ("result",),
            registry=r,
        )
        self.commits = Counter(
            "weir_bookie_journal_commits",
            "Journal group commits (one fsync each, shared by every add in it).",
            registry=r,
        )
        self.commit_seconds = Histogram(
            "weir_bookie_journal_commit_seconds",
            "Time of one journal group commit, fsync included.",
            buckets=_COMMIT_SECONDS,
            registry=r,
        )
        self.bookie: Bookie | None = None
        self.ready = False
        r.register(_BookieCollector(self))
        ProcessCollector(registry=r)

    def on_commit(self, jobs: int, nbytes: int, seconds: float) -> None:
        """The group committer's observer (its thread)."""
        self.commits.inc()
        self.commit_seconds.observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _BookieCollector:
    """Gauges read from the bookie when scraped."""

    def __init__(self, metrics: BookieMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        bookie = self.metrics.bookie
        if bookie is None:
            return []
        ledgers = GaugeMetricFamily("weir_bookie_ledgers", "Ledgers this bookie holds.")
        ledgers.add_metric([], len(bookie.ledgers))
        read_only = GaugeMetricFamily(
            "weir_bookie_read_only", "1 while the bookie is read-only (disk nearly full)."
        )
        read_only.add_metric([], 1.0 if bookie.space.read_only else 0.0)
        requests = GaugeMetricFamily(
            "weir_bookie_requests_in_flight", "Requests waiting for their commit."
        )
        requests.add_metric([], bookie.in_flight)
        waiting = GaugeMetricFamily(
            "weir_bookie_bytes_in_flight", "Payload bytes waiting for their commit."
        )
        waiting.add_metric([], bookie.bytes_in_flight)
        return [ledgers, read_only, requests, waiting]


class BookieMetricsEndpoint:
    """``/metrics``, ``/healthz``, ``/readyz`` of a bookie on its event loop."""

    def __init__(self, metrics: BookieMetrics, listen: str) -> None:
        host, _, port = listen.rpartition(":")
        self.host = host.strip("[]") or "127.0.0.1"
        self.port = int(port)
        self.metrics = metrics
        self._site = HttpSite()

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._handle)
        self.port = await self._site.start(app, self.host, self.port)

    async def stop(self) -> None:
        await self._site.stop()

    async def _handle(self, request: web.Request) -> web.Response:
        text = "text/plain; charset=utf-8"
        status, ctype, body = 404, text, b"not found: try /metrics, /healthz or /readyz\n"
        if request.method not in ("GET", "HEAD"):
            status, body = 405, b"only GET\n"
        elif request.path == "/metrics":
            status, ctype, body = 200, CONTENT_TYPE_LATEST, self.metrics.exposition()
        elif request.path == "/healthz":
            status, body = 200, b"ok\n"
        elif request.path == "/readyz":
            ready = self.metrics.ready
            status, body = (200, b"ready\n") if ready else (503, b"not ready\n")
        resp = web.Response(status=status, body=body)
        resp.headers["Content-Type"] = ctype
        return resp
