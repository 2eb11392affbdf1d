"""Prometheus metrics of one server, and the HTTP endpoint that serves them.

Two sources feed one per-server registry: `PrometheusObserver` counts broker
events as they happen (writes, reads, refusals, group commits), and
`BrokerCollector` reads the live broker when scraped (offsets, sizes, queues,
consumer lag), so gauges cost nothing between scrapes. `MetricsEndpoint` serves
``/metrics``, ``/healthz`` and ``/readyz`` from the server's own event loop (an
aiohttp application, which the web console shares): a scrape reads broker state
without locks, and an answer from ``/healthz`` proves the loop that serves clients
is responsive.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

import weir
from weir.broker.observer import BrokerObserver
from weir.broker.topics import short_topic
from weir.http_site import HttpSite
from weir.storage.journaled_kv import JournaledKV

if TYPE_CHECKING:
    from weir.broker.broker import Broker

log = logging.getLogger("weir.metrics")

_TP = ("topic", "partition")
_COMMIT_SECONDS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_COMMIT_JOBS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
_COMMIT_BYTES = tuple(float(1 << n) for n in range(10, 29, 2))  # 1 KiB .. 256 MiB


@dataclass
class RunningTotals:
    """Server-wide sums of the counters below, as plain numbers: the web console samples
    these every few seconds, which a `collect()` of every labelled series would make cost
    a millisecond per thousand partitions."""

    messages_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    reads_out: int = 0
    commits: int = 0
    commit_seconds: float = 0.0
    partition_messages: dict[tuple[str, str], int] = field(
        default_factory=dict
    )  # (topic, partition)


class PrometheusObserver(BrokerObserver):
    """Broker events as counters and histograms (topic names as users type them)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.totals = RunningTotals()
        # the labelled counters of each partition written and read: looked up once, as the
        # broker reports every write and every read response (no series is ever removed)
        self._written: dict[tuple[str, int], tuple[tuple[str, str], Counter, Counter]] = {}
        self._read: dict[tuple[str, int], tuple[Counter, Counter]] = {}
        r = registry
        self.written_messages = Counter(
            "weir_written_messages", "Messages stored (acknowledged writes).", _TP, registry=r
        )
        self.written_bytes = Counter(
            "weir_written_bytes", "Bytes committed to storage for writes.", _TP, registry=r
        )
        self.dedup_skipped = Counter(
            "weir_dedup_skipped_messages",
            "Messages dropped as duplicates (seq_no not above the producer's last).",
            _TP,
            registry=r,
        )
        self.read_bytes = Counter(
            "weir_read_bytes", "Stored bytes sent to readers.", _TP, registry=r
        )
        self.read_responses = Counter(
            "weir_read_responses",
            "Read responses (chunks of stored batches) sent.",
            _TP,
            registry=r,
        )
        self.refusals = Counter(
            "weir_write_refusals",
            "Writes refused by backpressure: overloaded, overflow (partition limits), storage_full.",
            (*_TP, "reason"),
            registry=r,
        )
        self.consumer_commits = Counter(
            "weir_consumer_commits",
            "Committed offset moves of consumers.",
            (*_TP, "consumer"),
            registry=r,
        )
        self.compacted_messages = Counter(
            "weir_compacted_messages",
            "Messages compaction runs read (old view and log) to publish a partition's view.",
            _TP,
            registry=r,
        )
        self.non_persistent_delivered = Counter(
            "weir_non_persistent_delivered_messages",
            "Non-persistent topics: messages handed to a consumer's queue.",
            _TP,
            registry=r,
        )
        self.non_persistent_dropped = Counter(
            "weir_non_persistent_dropped_messages",
            "Non-persistent topics: messages dropped because a consumer's queue was full.",
            _TP,
            registry=r,
        )
        self.commit_seconds = Histogram(
            "weir_group_commit_seconds",
            "Duration of one group commit (one transaction and fsync).",
            buckets=_COMMIT_SECONDS,
            registry=r,
        )
        self.commit_jobs = Histogram(
            "weir_group_commit_jobs",
            "Jobs (partition writes, offset commits, ...) merged into one group commit.",
            buckets=_COMMIT_JOBS,
            registry=r,
        )
        self.commit_bytes = Histogram(
            "weir_group_commit_bytes",
            "Bytes written by one group commit.",
            buckets=_COMMIT_BYTES,
            registry=r,
        )

    def on_write(self, topic: str, partition: int, records: int, nbytes: int, skipped: int) -> None:
        w = self._written.get((topic, partition))
        if w is None:
            labels = (short_topic(topic), str(partition))
            w = (labels, self.written_messages.labels(*labels), self.written_bytes.labels(*labels))
            self._written[(topic, partition)] = w
        labels, messages, written = w
        t = self.totals
        t.messages_in += records
        t.bytes_in += nbytes
        t.partition_messages[labels] = t.partition_messages.get(labels, 0) + records
        messages.inc(records)
        written.inc(nbytes)
        if skipped:
            self.dedup_skipped.labels(*labels).inc(skipped)

    def on_read(self, topic: str, partition: int, nbytes: int) -> None:
        r = self._read.get((topic, partition))
        if r is None:
            labels = (short_topic(topic), str(partition))
            r = (self.read_bytes.labels(*labels), self.read_responses.labels(*labels))
            self._read[(topic, partition)] = r
        self.totals.bytes_out += nbytes
        self.totals.reads_out += 1
        r[0].inc(nbytes)
        r[1].inc()

    def on_refused(self, topic: str, partition: int, reason: str) -> None:
        self.refusals.labels(short_topic(topic), str(partition), reason).inc()

    def on_commit(self, jobs: int, nbytes: int, seconds: float) -> None:
        self.totals.commits += 1
        self.totals.commit_seconds += seconds
        self.commit_seconds.observe(seconds)
        self.commit_jobs.observe(jobs)
        self.commit_bytes.observe(nbytes)

    def on_consumer_commit(self, topic: str, partition: int, consumer: str, offset: int) -> None:
        self.consumer_commits.labels(short_topic(topic), str(partition), consumer).inc()

    def on_compaction(self, topic: str, partition: int, scanned: int, kept: int) -> None:
        self.compacted_messages.labels(short_topic(topic), str(partition)).inc(scanned)

    def on_non_persistent(
        self, topic: str, partition: int, delivered: int, dropped: int, nbytes: int
    ) -> None:
        labels = (short_topic(topic), str(partition))
        self.non_persistent_delivered.labels(*labels).inc(delivered)
        self.non_persistent_dropped.labels(*labels).inc(dropped)  # 0 still makes the series


class BrokerCollector:
    """Gauges read from the live broker at scrape time (nothing while it is not open)."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def _families(self) -> list[GaugeMetricFamily | CounterMetricFamily]:
        tp = list(_TP)
        tpc = [*tp, "consumer"]
        return [
            GaugeMetricFamily("weir_build_info", "weir version.", labels=["version"]),
            GaugeMetricFamily("weir_ready", "1 while the server accepts clients, else 0."),
            GaugeMetricFamily("weir_broker_generation", "Restarts of this data directory."),
            GaugeMetricFamily("weir_topics", "Topics."),
            GaugeMetricFamily(
                "weir_partition_start_offset", "First offset still stored.", labels=tp
            ),
            GaugeMetricFamily(
                "weir_partition_end_offset", "Offset the next message will get.", labels=tp
            ),
            GaugeMetricFamily("weir_partition_size_bytes", "Bytes stored.", labels=tp),
            GaugeMetricFamily(
                "weir_partition_head_bytes",
                "Bytes in small head blobs, not yet compacted.",
                labels=tp,
            ),
            GaugeMetricFamily(
                "weir_partition_queued_bytes",
                "Bytes waiting for commit (writes are refused past limits.max_partition_queue_bytes).",
                labels=tp,
            ),
            GaugeMetricFamily(
                "weir_consumer_committed_offset",
                "Next offset the consumer will read.",
                labels=tpc,
            ),
            GaugeMetricFamily(
                "weir_consumer_lag_messages",
                "Messages stored but not yet committed by the consumer.",
                labels=tpc,
            ),
            GaugeMetricFamily("weir_storage_used_bytes", "Size of the LMDB data file."),
            GaugeMetricFamily(
                "weir_storage_capacity_bytes", "Largest size of the LMDB file (storage.map_size)."
            ),
            GaugeMetricFamily(
                "weir_storage_disk_free_bytes", "Free space of the disk holding the data."
            ),
            GaugeMetricFamily(
                "weir_group_commit_pending_jobs", "Jobs waiting for the next group commit."
            ),
            GaugeMetricFamily(
                "weir_journal_unapplied_commits",
                "Commits durable in the journal, not yet applied to LMDB (storage.journal).",
            ),
            CounterMetricFamily(
                "weir_journal_applies", "Durable LMDB commits applying journaled commits."
            ),
            CounterMetricFamily(
                "weir_journal_direct_commits",
                "Commits of 1 MiB or more made to LMDB directly, past the journal.",
            ),
            CounterMetricFamily(
                "weir_read_cache_hits", "Big-blob reads served from the shared read cache."
            ),
            CounterMetricFamily(
                "weir_read_cache_misses",
                "Big-blob reads that fetched and checked the blob (then cached if it fits).",
            ),
            CounterMetricFamily(
                "weir_read_cache_evictions",
                "Blobs evicted to keep the read cache within storage.read_cache_bytes.",
            ),
            GaugeMetricFamily(
                "weir_read_cache_bytes", "Memory held by the read cache (blobs and their index)."
            ),
            GaugeMetricFamily("weir_read_cache_blobs", "Big blobs in the read cache."),
            GaugeMetricFamily(
                "weir_read_cache_capacity_bytes",
                "Bound of the read cache (storage.read_cache_bytes).",
            ),
            *_tier_families(tp),
            CounterMetricFamily(
                "weir_transactions",
                "Transactions ended, by outcome: committed, aborted (by the client, a timeout, a "
                "fence or a restart).",
                labels=["outcome"],
            ),
            GaugeMetricFamily("weir_transactions_open", "Transactions open now."),
            GaugeMetricFamily(
                "weir_partition_stable_offset",
                "Last stable offset: where read-committed readers stop (the first offset of "
                "the oldest open transaction, else the end offset).",
                labels=tp,
            ),
            CounterMetricFamily(
                "weir_auth_failures",
                "Refused authentications by reason: bad_password, bad_token, no_credentials, "
                "throttled (a login refused unchecked while failures are being slowed down).",
                labels=["reason"],
            ),
        ]

    def collect(self) -> Iterable[Metric]:
        fams = {f.name: f for f in self._families()}
        fams["weir_build_info"].add_metric([weir.__version__], 1)
        fams["weir_ready"].add_metric([], 1 if self.metrics.ready else 0)
        broker = self.metrics.broker
        if broker is not None and not broker.closed:
            self._collect_broker(broker, fams)
        failures = self.metrics.auth_failures
        for reason in ("bad_password", "bad_token", "no_credentials", "throttled"):
            fams["weir_auth_failures"].add_metric([reason], failures.get(reason, 0))
        return list(fams.values())

    @staticmethod
    def _collect_broker(
        broker: Broker, fams: dict[str, GaugeMetricFamily | CounterMetricFamily]
    ) -> None:
        fams["weir_broker_generation"].add_metric([], broker.generation)
        topics = broker.list_topics()
        fams["weir_topics"].add_metric([], len(topics))
        for cfg in topics:
            name = short_topic(cfg.name)
            for info in broker.partitions(cfg.name):
                labels = [name, str(info.partition)]
                fams["weir_partition_start_offset"].add_metric(labels, info.start_offset)
                fams["weir_partition_end_offset"].add_metric(labels, info.end_offset)
                fams["weir_partition_stable_offset"].add_metric(labels, info.stable_offset)
                fams["weir_partition_size_bytes"].add_metric(labels, info.size_bytes)
                if cfg.kind != "persistent":
                    continue  # nothing stored, nothing queued for commit
                actor = broker.actor(cfg.name, info.partition)
                fams["weir_partition_head_bytes"].add_metric(labels, actor.log.head_bytes)
                fams["weir_partition_queued_bytes"].add_metric(labels, actor.queued_bytes)
                fams["weir_partition_local_bytes"].add_metric(labels, actor.log.local_bytes)
                fams["weir_partition_offloaded_bytes"].add_metric(labels, actor.log.remote_bytes)
            for consumer in cfg.consumers:
                for c in broker.describe_consumer(cfg.name, consumer):
                    labels = [name, str(c.partition), consumer]
                    fams["weir_consumer_committed_offset"].add_metric(labels, c.committed_offset)
                    fams["weir_consumer_lag_messages"].add_metric(labels, c.lag)
        usage = broker.store.kv.usage()
        fams["weir_storage_used_bytes"].add_metric([], usage.used_bytes)
        fams["weir_storage_capacity_bytes"].add_metric([], usage.capacity_bytes)
        fams["weir_storage_disk_free_bytes"].add_metric([], usage.disk_free_bytes)
        fams["weir_group_commit_pending_jobs"].add_metric([], broker.store.committer.pending)
        kv = broker.store.kv
        jkv = kv if isinstance(kv, JournaledKV) else None
        fams["weir_journal_unapplied_commits"].add_metric([], jkv.unapplied if jkv else 0)
        fams["weir_journal_applies"].add_metric([], jkv.applies if jkv else 0)
        fams["weir_journal_direct_commits"].add_metric([], jkv.direct_commits if jkv else 0)
        cache = broker.store.read_cache.stats
        fams["weir_read_cache_hits"].add_metric([], cache.hits)
        fams["weir_read_cache_misses"].add_metric([], cache.misses)
        fams["weir_read_cache_evictions"].add_metric([], cache.evictions)
        fams["weir_read_cache_bytes"].add_metric([], cache.bytes)
        fams["weir_read_cache_blobs"].add_metric([], cache.blobs)
        fams["weir_read_cache_capacity_bytes"].add_metric([], cache.capacity)
        txns = broker.transactions
        fams["weir_transactions"].add_metric(["committed"], txns.committed)
        fams["weir_transactions"].add_metric(["aborted"], txns.aborted)
        fams["weir_transactions_open"].add_metric([], len(txns.open_ids))
        tier = broker.store.tier
        if tier is not None:
            s = tier.stats
            for name, value in (
                ("offloaded_bytes", s.bytes_offloaded),
                ("offloaded_objects", s.objects_offloaded),
                ("deleted_objects", s.objects_deleted),
                ("orphans_removed", s.orphans_removed),
                ("store_errors", s.store_errors),
                ("corrupt_objects", s.corrupt_objects),
                ("cache_hits", s.cache_hits),
                ("cache_misses", s.cache_misses),
                ("fetches", s.fetches),
                ("fetch_bytes", s.fetch_bytes),
                ("fetch_seconds", s.fetch_seconds),
                ("payload_objects", s.payload_objects_written),
                ("payloads_collected", s.payloads_collected),
            ):
                fams[f"weir_tier_{name}"].add_metric([], value)
            fams["weir_tier_cache_bytes"].add_metric([], tier.cache.stats.bytes)


_TIER_COUNTERS = {
    "offloaded_bytes": "Object bytes written to the tier's store and verified (offload).",
    "offloaded_objects": "Segments offloaded (one object per sealed blob).",
    "deleted_objects": "Segment objects deleted (retention, topic drop, abandoned copies).",
    "orphans_removed": "Objects the sweeper removed because no record named them.",
    "store_errors": "Requests to the object store that failed (unreachable, timeouts, 5xx).",
    "corrupt_objects": "Objects read back with a wrong size or checksum (never served).",
    "cache_hits": "Reads of offloaded blobs served from the tier's cache.",
    "cache_misses": "Reads of offloaded blobs that had to fetch the object.",
    "fetches": "Objects fetched from the store for reads (read-ahead included).",
    "fetch_bytes": "Bytes fetched from the store for reads.",
    "fetch_seconds": "Time spent fetching objects for reads (divide by fetches: latency).",
    "payload_objects": "Large payloads stored as objects of their own.",
    "payloads_collected": "Unreferenced payload objects collected.",
}


def _tier_families(tp: list[str]) -> list[GaugeMetricFamily | CounterMetricFamily]:
    """Tiered storage: what went to the object store, what came back, what failed."""
    fams: list[GaugeMetricFamily | CounterMetricFamily] = [
        CounterMetricFamily(f"weir_tier_{name}", doc) for name, doc in _TIER_COUNTERS.items()
    ]
    fams += [
        GaugeMetricFamily("weir_tier_cache_bytes", "Memory held by the tier's read cache."),
        GaugeMetricFamily(
            "weir_partition_local_bytes", "Bytes of the partition held locally.", labels=tp
        ),
        GaugeMetricFamily(
            "weir_partition_offloaded_bytes",
            "Bytes of the partition in the tier's object store.",
            labels=tp,
        ),
    ]
    return fams


class ServerMetrics:
    """The metrics of one server: a registry of its own, the observer, the broker gauges."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.observer = PrometheusObserver(self.registry)
        self.broker: Broker | None = None
        self.auth_failures: Mapping[str, int] = {}  # the server's Security.throttle.failures
        self.ready = False
        self.registry.register(BrokerCollector(self))
        ProcessCollector(registry=self.registry)

    def exposition(self) -> bytes:
        """The Prometheus text format of every series."""
        return generate_latest(self.registry)


class MetricsEndpoint:
    """``/metrics``, ``/healthz`` and ``/readyz`` over HTTP on the running event loop.

    An aiohttp application, so more pages can share the port: ``mount`` is called with
    the application before it starts (the web console adds its routes there).
    """

    def __init__(
        self,
        metrics: ServerMetrics,
        listen: str,
        alive: Callable[[], bool] = lambda: True,
        mount: Callable[[web.Application], None] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        pages: Sequence[str] | None = None,
    ) -> None:
        host, _, port = listen.rpartition(":")
        self.host = host.strip("[]")
        self.port = int(port)
        self.metrics = metrics
        self.alive = alive
        self.mount = mount
        self.ssl_context = ssl_context  # set: HTTPS only
        # what "/" lists besides the endpoint's own pages (None: /console when mounted)
        self.pages = tuple(pages) if pages is not None else (("/console",) if mount else ())
        self._site = HttpSite()

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://{self.host}:{self.port}"

    def application(self) -> web.Application:
        app = web.Application()
        if self.mount is not None:
            self.mount(app)
        app.router.add_route("*", "/{path:.*}", self._handle)
        return app

    async def start(self) -> None:
        self.port = await self._site.start(
            self.application(), self.host, self.port, self.ssl_context
        )

    async def stop(self) -> None:
        await self._site.stop()

    def respond(self, method: str, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for one request."""
        text = "text/plain; charset=utf-8"
        if method not in ("GET", "HEAD"):
            return 405, text, b"only GET\n"
        path = path.split("?", 1)[0]
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, self.metrics.exposition()
        if path == "/healthz":
            ok = self.alive()
            return (200, text, b"ok\n") if ok else (503, text, b"failed\n")
        if path == "/readyz":
            if self.metrics.ready:
                return 200, text, b"ready\n"
            return 503, text, b"not ready: starting or shutting down\n"
        if path == "/":
            pages = " ".join(("weir:", "/metrics", "/healthz", "/readyz", *self.pages))
            return 200, text, pages.encode() + b"\n"
        return 404, text, b"not found: try /metrics, /healthz or /readyz\n"

    async def _handle(self, request: web.Request) -> web.Response:
        status, ctype, body = self.respond(request.method, request.path)
        resp = web.Response(status=status, body=body)
        resp.headers["Content-Type"] = ctype
        return resp
