"""Mixed load under injected faults, recorded as a history and checked afterwards.

Producers and consumers (the weir SDK, through a proxy that can cut their
connections) run against a real server while a fault thread kills it with
SIGKILL, pauses it with SIGSTOP/SIGCONT, restarts it, and drops client
connections mid-stream. The server runs with a tiny low watermark and blob
size so compaction happens all the time, and a short retention interval on a
size-limited topic whose important consumer protects what it has not read.
"""

from __future__ import annotations

import contextlib
import random
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import weir
from tests.conftest import ServerProcess
from tests.reliability.history import History, Report, check, make_data, message_id
from tests.reliability.proxy import FaultyProxy
from weir.client import Consumer
from weir.errors import WeirError

CONSUMER = "checker"

# Compaction and retention in seconds, not hours.
CHAOS_ENV = {
    "WEIR_STORAGE_LOW_WATERMARK": "48KiB",
    "WEIR_STORAGE_MAX_BLOB_SIZE": "64KiB",
    "WEIR_TOPICS_RETENTION_INTERVAL_S": "0.5",
    "WEIR_CONSUMERS_REBALANCE_TIMEOUT_S": "2",
    "WEIR_METRICS_ENABLED": "false",
}


@dataclass
class ChaosSettings:
    duration_s: float = 20.0
    producers: int = 3
    consumers: int = 2
    partitions: int = 3
    message_size: int = 120
    max_messages_per_producer: int = 200_000
    fault_every_s: tuple[float, float] = (0.5, 2.0)
    faults: tuple[str, ...] = ("kill9", "pause", "drop", "restart")
    seed: int = 1


@dataclass
class ChaosResult:
    report: Report
    faults: Counter[str] = field(default_factory=Counter)
    operations: int = 0
    seconds: float = 0.0


class Chaos:
    def __init__(self, server: ServerProcess, settings: ChaosSettings) -> None:
        self.server = server
        self.s = settings
        self.rng = random.Random(settings.seed)
        self.history = History()
        self.proxy = FaultyProxy(lambda: self.server.port)
        self.stop = threading.Event()
        self.faults: Counter[str] = Counter()
        self.ops = 0
        self._ops_lock = threading.Lock()
        self.topics = ["chaos", "chaos_retained"]

    def _op(self, n: int = 1) -> None:
        with self._ops_lock:
            self.ops += n

    # ------------------------------------------------------------------ load

    def _producer(self, idx: int) -> None:
        t_idx = idx % len(self.topics)
        topic = self.topics[t_idx]
        pid = f"prod{idx}"
        client = weir.Client(self.proxy.endpoint)
        w = client.writer(topic, producer_id=pid, max_buffer_messages=2000)
        n = 0
        h = self.history
        try:
            while not self.stop.is_set() and n < self.s.max_messages_per_producer:
                data = make_data(pid, n, self.s.message_size)
                mid = message_id(data)
                try:
                    fut = w.write_future(data, timeout=0.5)
                except WeirError as err:
                    if err.retryable:
                        continue  # buffer full while the server is down: try the same message again
                    raise
                h.attempted(mid)

                def done(f: object, mid: str = mid) -> None:
                    with contextlib.suppress(Exception):
                        r = f.result()  # type: ignore[attr-defined]
                        h.acked(mid, r.partition + 1000 * t_idx, r.offset)

                fut.add_done_callback(done)
                self._op()
                n += 1
            with contextlib.suppress(WeirError):
                w.flush(timeout=60)
        finally:
            with contextlib.suppress(Exception):
                w.close(timeout=30)
            client.close()

    def _consumer(self, idx: int) -> None:
        client = weir.Client(self.proxy.endpoint)
        r = client.reader(self.topics, consumer=CONSUMER)
        h = self.history
        try:
            while not self.stop.is_set():
                try:
                    batch = r.receive_batch(timeout=0.3)
                except WeirError:
                    continue
                if batch is None:
                    continue
                session = f"c{idx}:{id(batch.session)}"
                for m in batch.messages:
                    h.delivered(
                        session,
                        m.partition + 1000 * self.topics.index(_short(m.topic)),
                        m.offset,
                        message_id(m.data),
                    )
                self._op(len(batch.messages))
                with contextlib.suppress(WeirError):
                    r.commit_with_ack(batch, timeout=5)
                    self._op()
        finally:
            with contextlib.suppress(Exception):
                r.close(timeout=5)
            client.close()

    def _commit_monitor(self) -> None:
        """Poll the committed offsets the server reports: they must never go backwards."""
        client: weir.Client | None = None
        while not self.stop.is_set():
            try:
                if client is None:
                    client = weir.Client(self.server.endpoint)
                for t_idx, topic in enumerate(self.topics):
                    info = client.describe_consumer(topic, CONSUMER, timeout=2)
                    for p in info.partitions:
                        self.history.committed(
                            CONSUMER, p.partition + 1000 * t_idx, p.committed_offset
                        )
            except Exception:
                if client is not None:
                    with contextlib.suppress(Exception):
                        client.close()
                client = None
            self.stop.wait(0.2)
        if client is not None:
            client.close()

    # ------------------------------------------------------------------ faults

    def _faults(self) -> None:
        lo, hi = self.s.fault_every_s
        deck: list[str] = []
        while not self.stop.wait(self.rng.uniform(lo, hi)):
            if not deck:  # every kind of fault once per round, in a random order
                deck = list(self.s.faults)
                self.rng.shuffle(deck)
            kind = deck.pop()
            self.faults[kind] += 1
            self.history.fault(kind)
            proc = self.server.proc
            if kind == "kill9":
                self.server.kill()
                self.server.start()
            elif kind == "restart":
                self.server.restart()
            elif kind == "pause" and proc is not None:
                proc.send_signal(signal.SIGSTOP)
                self.stop.wait(self.rng.uniform(0.2, 1.5))
                proc.send_signal(signal.SIGCONT)
            elif kind == "drop":
                self.proxy.drop_all()

    # ------------------------------------------------------------------ run

    def run(self) -> ChaosResult:
        t0 = time.monotonic()
        admin = weir.Client(self.server.endpoint)
        admin.create_topic(
            self.topics[0], partitions=self.s.partitions, consumers=[Consumer(CONSUMER)]
        )
        admin.create_topic(
            self.topics[1],
            partitions=self.s.partitions,
            retention_bytes=40_000,
            consumers=[Consumer(CONSUMER, important=True)],
        )
        admin.close()
        workers = [
            threading.Thread(target=self._producer, args=(i,), name=f"producer-{i}")
            for i in range(self.s.producers)
        ]
        workers += [
            threading.Thread(target=self._consumer, args=(i,), name=f"consumer-{i}")
            for i in range(self.s.consumers)
        ]
        monitor = threading.Thread(target=self._commit_monitor, name="commit-monitor")
        faults = threading.Thread(target=self._faults, name="faults")
        for t in (*workers, monitor, faults):
            t.start()
        time.sleep(self.s.duration_s)  # the load runs for a fixed time: that is the test
        self.stop.set()
        faults.join(60)
        if self.server.proc is None or self.server.proc.poll() is not None:
            self.server.start()
        for t in (*workers, monitor):
            t.join(120)
            assert not t.is_alive(), f"{t.name} did not stop"
        self.proxy.close()
        stored, starts = self._read_back()
        report = check(self.history, stored, starts)
        return ChaosResult(report, self.faults, self.ops, time.monotonic() - t0)

    def _read_back(self) -> tuple[dict[int, list[tuple[int, str]]], dict[int, int]]:
        client = weir.Client(self.server.endpoint)
        stored: dict[int, list[tuple[int, str]]] = {}
        starts: dict[int, int] = {}
        try:
            for t_idx, topic in enumerate(self.topics):
                info = client.describe_topic(topic)
                for p in info.partition_info:
                    key = p.partition + 1000 * t_idx
                    starts[key] = p.start_offset
                    rows: list[tuple[int, str]] = []
                    for chunk in client.read_range(
                        topic, p.partition, p.start_offset, p.end_offset
                    ):
                        rows.extend(
                            (m.offset, message_id(m.data)) for m in chunk.messages(p.start_offset)
                        )
                    stored[key] = rows
        finally:
            client.close()
        return stored, starts


def _short(topic: str) -> str:
    return topic.rsplit("/", 1)[-1]
