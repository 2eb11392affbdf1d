"""Mixed load under injected faults, recorded as a history and checked afterwards.

Writers of every kind (a producer id; a partition and no producer id;
anonymous, reopened now and then; a producer id with its own seq_nos that
abandons its writer and resends what was not acknowledged) and consumers
committing with acks run through a proxy that can cut their connections,
against a real server, while a fault thread:

- ``kill9``: kills the server with SIGKILL and restarts it (the page cache survives);
- ``powercut``: cuts the power of its data directory (a `LazyMount`: every
  write not fsync'd is dropped, and I/O blocks), kills it and restarts it on
  what was synced;
- ``restart``: stops it with SIGTERM and starts it again;
- ``pause``: SIGSTOP, then SIGCONT a little later;
- ``drop``: cuts every client connection at the proxy;
- ``grow``: adds a partition to the first topic (pinned producers must stay put).

After every restart the committed positions the server reports are recorded,
to be checked against the commits it acknowledged before. The run ends after
``kills`` server kills (kill9 and power cuts), not after a time, so its
coverage does not depend on the machine's speed. The server runs with a tiny
low watermark and blob size so compaction happens all the time, and a short
retention interval on a size-limited topic whose important consumer protects
what it has not read. Everything random comes from one seed.
"""

from __future__ import annotations

import contextlib
import random
import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import weir
from tests.conftest import ServerProcess
from tests.reliability.history import (
    TOPIC_STRIDE,
    History,
    Report,
    Stored,
    check,
    make_data,
    message_id,
)
from tests.reliability.lazyfs import LazyMount
from tests.reliability.proxy import FaultyProxy
from weir.client import Consumer
from weir.client.reader import PartitionSessionClosedError
from weir.client.writer_settings import WriteResult
from weir.errors import ClosedError, NotFoundError, WeirError, WeirTimeoutError

CONSUMER = "checker"
KILLS = ("kill9", "powercut")

# Compaction and retention in seconds, not hours.
CHAOS_ENV = {
    "WEIR_STORAGE_LOW_WATERMARK": "48KiB",
    "WEIR_STORAGE_MAX_BLOB_SIZE": "64KiB",
    "WEIR_TOPICS_RETENTION_INTERVAL_S": "0.5",
    "WEIR_CONSUMERS_REBALANCE_TIMEOUT_S": "2",
    "WEIR_METRICS_ENABLED": "false",
}

# (kind, topic index): every kind of writer. On the retained topic (40 KB per partition)
# retention removes whole producers' messages while they write; their dedup state
# outlives them (docs/storage.md), which tests/reliability/test_dedup_retention.py checks.
ALL_WRITERS: tuple[tuple[str, int], ...] = (
    ("pid", 0),
    ("partition", 0),
    ("anonymous", 0),
    ("resend", 0),
    ("partition", 1),
    ("partition", 1),
)


@dataclass
class ChaosSettings:
    kills: int = 10  # the run ends after this many kill9 + powercut faults
    max_seconds: float = 600.0  # ... or after this long, whatever comes first (then it fails)
    writers: tuple[tuple[str, int], ...] = ALL_WRITERS
    consumers: int = 2
    partitions: int = 3
    max_partitions: int = 6  # "grow" adds partitions to topic 0 up to this many
    message_size: int = 120
    reopen_every: tuple[int, int] = (50, 400)  # messages between reopens (anonymous, resend)
    fault_every_s: tuple[float, float] = (0.2, 0.8)
    faults: dict[str, int] = field(
        default_factory=lambda: {
            "kill9": 3,
            "powercut": 3,
            "pause": 1,
            "drop": 1,
            "restart": 1,
            "grow": 1,
        }
    )  # kind -> how many of each per round (a shuffled deck)
    catch_up_s: float = 10.0  # after a restart, wait up to this long for new acks
    retained_topic: bool = True  # the second topic: size retention, an important consumer
    seed: int = 1

    @property
    def power_cuts(self) -> bool:
        return self.faults.get("powercut", 0) > 0


@dataclass
class ChaosResult:
    report: Report
    seed: int
    faults: Counter[str] = field(default_factory=Counter)
    recovery_s: dict[str, list[float]] = field(default_factory=dict)  # kind -> seconds to serve
    errors: list[str] = field(default_factory=list)  # client errors the load did not expect
    operations: int = 0
    seconds: float = 0.0
    dropped_pages: int = 0  # unsynced pages the power cuts dropped

    @property
    def kills(self) -> int:
        return sum(self.faults[k] for k in KILLS)

    @property
    def max_recovery_s(self) -> float:
        return max((s for v in self.recovery_s.values() for s in v), default=0.0)


class Chaos:
    def __init__(
        self, server: ServerProcess, settings: ChaosSettings, mount: LazyMount | None = None
    ) -> None:
        if settings.power_cuts and mount is None:
            raise ValueError("power cuts need the data directory on a LazyMount")
        self.server = server
        self.mount = mount
        self.s = settings
        self.rng = random.Random(settings.seed)
        self.history = History()
        self.proxy = FaultyProxy(lambda: self.server.port)
        self.stop = threading.Event()
        self.faults: Counter[str] = Counter()
        self.recovery: dict[str, list[float]] = defaultdict(list)
        self.ops = 0
        self._ops_lock = threading.Lock()
        self.topics = ["chaos", "chaos_retained"] if settings.retained_topic else ["chaos"]
        self._writers: list[threading.Thread] = []
        self.partitions = {t: settings.partitions for t in self.topics}

    def _op(self, n: int = 1) -> None:
        with self._ops_lock:
            self.ops += n

    def _unexpected(self, who: str, err: BaseException) -> None:
        """Recorded for the verdict, and printed now: a long soak's log shows when it was."""
        line = f"{who}: {err!r}"
        self.history.error(line)
        print(f"chaos: unexpected client error at {time.strftime('%H:%M:%S')}: {line}", flush=True)

    # ------------------------------------------------------------------ writers

    def _on_ack(self, mid: str, t_idx: int, expected: Callable[[BaseException], bool]) -> Callable:
        h = self.history

        def done(f: Future[WriteResult]) -> None:
            err = f.exception()
            if err is None:
                res = f.result()
                h.acked(mid, res.partition + TOPIC_STRIDE * t_idx, res.offset)
            elif not expected(err):
                self._unexpected(f"ack of {mid}", err)

        return done

    def _write(
        self,
        w: weir.Writer,
        who: str,
        label: str,
        n: int,
        t_idx: int,
        seq_no: int | None = None,
        on_ack: Callable[[int], None] | None = None,
        expected: Callable[[BaseException], bool] = lambda e: False,
    ) -> bool:
        """Buffer message ``n`` of ``label`` (retrying while the buffer is full); False: stop."""
        data = make_data(label, n, self.s.message_size)
        mid = message_id(data)
        while not self.stop.is_set():
            try:
                fut = w.write_future(data, seq_no=seq_no, timeout=0.5)
                break
            except WeirError as err:
                if type(err) is WeirTimeoutError:
                    continue  # buffer full while the server is down: the same message again
                # the writer failed (e.g. gave up after its delivery timeout): every later
                # call raises the same error, so retrying here would spin for good
                self._unexpected(f"{who} write", err)
                return False
        else:
            return False
        self.history.attempted(mid)
        fut.add_done_callback(self._on_ack(mid, t_idx, expected))
        if on_ack is not None:
            fut.add_done_callback(lambda f: f.exception() is None and on_ack(n))
        self._op()
        return True

    def _finish(self, w: weir.Writer, who: str) -> None:
        """Flush what is left once the faults are over: it must all be acknowledged."""
        try:
            w.flush(timeout=60)
        except WeirError as err:
            self._unexpected(f"{who} final flush", err)
        with contextlib.suppress(WeirError):
            w.close(timeout=5)

    def _writer(self, idx: int, kind: str, t_idx: int, part: int) -> None:
        topic = self.topics[t_idx]
        who = f"writer {idx} ({kind}, {topic})"
        rng = random.Random(f"{self.s.seed}/writer/{idx}")
        client = weir.Client(self.proxy.endpoint)
        try:
            if kind == "pid":
                self._steady(client, who, topic, t_idx, f"p{idx}", producer_id=f"p{idx}")
            elif kind == "partition":
                self._steady(client, who, topic, t_idx, f"w{idx}", partition=part)
            elif kind == "anonymous":
                self._anonymous(client, who, topic, t_idx, idx, rng)
            elif kind == "resend":
                self._resend(client, who, topic, t_idx, f"r{idx}", rng)
            else:
                raise ValueError(f"unknown writer kind {kind!r}")
        except Exception as err:
            self._unexpected(who, err)
        finally:
            client.close()

    def _steady(
        self,
        client: weir.Client,
        who: str,
        topic: str,
        t_idx: int,
        label: str,
        *,
        producer_id: str | None = None,
        partition: int | None = None,
    ) -> None:
        """One writer for the whole run: its producer must keep its pin and its order."""
        w = client.writer(
            topic, producer_id=producer_id, partition=partition, max_buffer_messages=2000
        )
        n = 0
        while not self.stop.is_set() and self._write(w, who, label, n, t_idx):
            n += 1
        self._finish(w, who)

    def _anonymous(
        self, client: weir.Client, who: str, topic: str, t_idx: int, idx: int, rng: random.Random
    ) -> None:
        """No producer id, no partition; closed and reopened now and then (a new producer)."""
        gen = 0
        while not self.stop.is_set():
            w = client.writer(topic, max_buffer_messages=2000)
            label = f"a{idx}.{gen}"
            for n in range(rng.randint(*self.s.reopen_every)):
                if not self._write(
                    w, who, label, n, t_idx, expected=lambda e: isinstance(e, ClosedError)
                ):
                    self._finish(w, who)  # stopping, or the writer failed (recorded)
                    return
            with contextlib.suppress(WeirError):  # the server may be down: unacked ones go
                w.close(timeout=2)
            gen += 1

    def _resend(
        self, client: weir.Client, who: str, topic: str, t_idx: int, pid: str, rng: random.Random
    ) -> None:
        """A producer id with its own seq_nos (n + 1): it abandons its writer without waiting
        for the acks, opens a new one with the same id and resends every message not
        acknowledged; the broker must skip what it already has."""
        lock = threading.Lock()
        acked: set[int] = set()

        def ack(n: int) -> None:
            with lock:
                acked.add(n)

        low = 0  # every n below is acknowledged
        top = 0  # next new n
        while not self.stop.is_set():
            w = client.writer(topic, producer_id=pid, max_buffer_messages=2000)
            with lock:
                while low in acked:
                    acked.discard(low)
                    low += 1
                again = [n for n in range(low, top) if n not in acked]
            fresh = rng.randint(*self.s.reopen_every)
            for n in [*again, *range(top, top + fresh)]:
                if not self._write(
                    w,
                    who,
                    pid,
                    n,
                    t_idx,
                    seq_no=n + 1,
                    on_ack=ack,
                    expected=lambda e: isinstance(e, ClosedError),
                ):
                    self._finish(w, who)  # stopping, or the writer failed (recorded)
                    return
                top = max(top, n + 1)
            with contextlib.suppress(WeirError):
                w.close(timeout=0)  # abandon: what is not acknowledged yet is resent

    # ------------------------------------------------------------------ consumers

    def _consumer(self, idx: int) -> None:
        client = weir.Client(self.proxy.endpoint)
        h = self.history
        who = f"consumer {idx}"
        r = client.reader(self.topics, consumer=CONSUMER)
        try:
            while not self.stop.is_set():
                try:
                    batch = r.receive_batch(timeout=0.3)
                except WeirError as err:
                    if not err.retryable:
                        self._unexpected(f"{who} receive", err)
                        with contextlib.suppress(Exception):
                            r.close(timeout=1)
                        self.stop.wait(0.2)  # not a tight loop of failures
                        r = client.reader(self.topics, consumer=CONSUMER)
                    continue
                if batch is None:
                    continue
                ps = batch.session
                session = f"c{idx}/g{ps.generation}/a{ps.assignment_id}"
                key = batch.partition + TOPIC_STRIDE * self.topics.index(_short(batch.topic))
                for offset, data in zip(batch.offsets, batch.values, strict=True):
                    h.delivered(session, key, offset, message_id(data))
                self._op(len(batch))
                try:
                    r.commit_with_ack(batch, timeout=5)
                except PartitionSessionClosedError:
                    continue  # rebalanced or reconnected: the next owner reads it again
                except WeirError as err:
                    if not err.retryable:
                        self._unexpected(f"{who} commit", err)
                    continue
                h.commit_acked(CONSUMER, key, batch.commit_offset)
                self._op()
        except Exception as err:
            self._unexpected(who, err)
        finally:
            with contextlib.suppress(Exception):
                r.close(timeout=5)
            client.close()

    # ------------------------------------------------------------------ faults

    def _deck(self) -> list[str]:
        deck = [k for k, n in self.s.faults.items() for _ in range(n)]
        self.rng.shuffle(deck)
        return deck

    def _faults(self, t_end: float) -> None:
        lo, hi = self.s.fault_every_s
        deck: list[str] = []
        kills = 0
        try:
            while kills < self.s.kills and time.monotonic() < t_end:
                if self.stop.wait(self.rng.uniform(lo, hi)):
                    return
                if not deck:
                    deck = self._deck()
                kind = deck.pop()
                self.faults[kind] += 1
                self.history.fault(kind)
                self._inject(kind)
                kills += kind in KILLS
                if kind in (*KILLS, "restart"):
                    self._await_acks(len(self.history.acks))
        except Exception as err:
            self._unexpected("fault injection", err)

    def _await_acks(self, before: int) -> None:
        """Let the load catch up after a restart (new acks, bounded wait), so that every
        kill hits a server under load rather than one the clients have not reached yet."""
        deadline = time.monotonic() + self.s.catch_up_s
        while len(self.history.acks) < before + 20 and time.monotonic() < deadline:
            if not any(t.is_alive() for t in self._writers) or self.stop.wait(0.02):
                return

    def _inject(self, kind: str) -> None:
        t0 = time.monotonic()
        proc = self.server.proc
        if kind == "kill9":
            self.server.kill()
            self._start(kind)
        elif kind == "powercut":
            assert self.mount is not None and proc is not None
            self.mount.cut()  # from here on the disk has only what was fsync'd; I/O blocks
            proc.send_signal(signal.SIGKILL)  # dies without seeing another I/O result
            self.mount.release()
            self.server.kill()
            self.mount.remount()
            self._start(kind)
        elif kind == "restart":
            self.server.stop()
            self._start(kind)
        elif kind == "pause" and proc is not None:
            proc.send_signal(signal.SIGSTOP)
            self.stop.wait(self.rng.uniform(0.2, 1.0))
            proc.send_signal(signal.SIGCONT)
            return
        elif kind == "drop":
            self.proxy.drop_all()
            return
        elif kind == "grow":
            self._grow()
            return
        self.recovery[kind].append(time.monotonic() - t0)
        self._check_commits(f"after {kind} #{self.faults[kind]}")

    def _start(self, kind: str) -> None:
        try:
            self.server.start()
        except RuntimeError as err:
            self._unexpected(f"server restart after {kind}", err)
            raise

    def _grow(self) -> None:
        topic = self.topics[0]
        if self.partitions[topic] >= self.s.max_partitions:
            return
        with weir.Client(self.server.endpoint) as admin:
            info = admin.alter_topic(topic, partitions=self.partitions[topic] + 1, timeout=10)
        self.partitions[topic] = info.partitions

    def _check_commits(self, when: str) -> None:
        """The committed positions the server reports now: none may be below a commit it
        acknowledged before we asked (recorded; `check` judges)."""
        with weir.Client(self.server.endpoint) as client:
            for t_idx, topic in enumerate(self.topics):
                deadline = time.monotonic() + 60
                while True:
                    since = self.history.clock()
                    try:
                        info = client.describe_consumer(topic, CONSUMER, timeout=10)
                        break
                    except WeirError as err:
                        if not err.retryable or time.monotonic() > deadline:
                            self._unexpected(f"commit check {when}", err)
                            info = None
                            break
                if info is None:
                    continue
                for p in info.partitions:
                    self.history.commit_observed(
                        since,
                        CONSUMER,
                        p.partition + TOPIC_STRIDE * t_idx,
                        p.committed_offset,
                        when,
                    )

    # ------------------------------------------------------------------ run

    def run(self) -> ChaosResult:
        t0 = time.monotonic()
        with weir.Client(self.server.endpoint) as admin:
            admin.create_topic(
                self.topics[0], partitions=self.s.partitions, consumers=[Consumer(CONSUMER)]
            )
            if self.s.retained_topic:
                admin.create_topic(
                    self.topics[1],
                    partitions=self.s.partitions,
                    retention_bytes=40_000,
                    consumers=[Consumer(CONSUMER, important=True)],
                )
        workers = []
        parts: Counter[int] = Counter()  # partition writers take partitions 0, 1, ... per topic
        for i, (kind, t) in enumerate(self.s.writers):
            if t >= len(self.topics):
                continue
            args = (i, kind, t, parts[t] % self.s.partitions)
            parts[t] += kind == "partition"
            workers.append(threading.Thread(target=self._writer, args=args, name=f"writer-{i}"))
        workers += [
            threading.Thread(target=self._consumer, args=(i,), name=f"consumer-{i}")
            for i in range(self.s.consumers)
        ]
        self._writers = workers[: len(workers) - self.s.consumers]
        for t in workers:
            t.start()
        self._faults(t0 + self.s.max_seconds)
        if self.server.proc is None or self.server.proc.poll() is not None:
            self.server.start()
        self._await_progress(self._writers)
        self.stop.set()
        for t in workers:
            t.join(120)
            assert not t.is_alive(), f"{t.name} did not stop"
        self.proxy.close()
        stored, starts, protected = self._read_back()
        report = check(self.history, stored, starts, protected)
        return ChaosResult(
            report,
            self.s.seed,
            self.faults,
            dict(self.recovery),
            list(self.history.errors),
            self.ops,
            time.monotonic() - t0,
            self.mount.dropped_pages if self.mount is not None else 0,
        )

    def _await_progress(self, writers: list[threading.Thread]) -> None:
        """After the last fault the load must go on: wait (bounded) for new acks and, with
        consumers, a new commit ack."""
        h = self.history
        acked, commits = len(h.acks), len(h.commit_acks)
        want_commit = 1 if self.s.consumers else 0

        def done() -> bool:
            return len(h.acks) >= acked + 50 and len(h.commit_acks) >= commits + want_commit

        deadline = time.monotonic() + 60
        while not done() and time.monotonic() < deadline:
            if not any(t.is_alive() for t in writers):
                break  # every writer failed (recorded): nothing will come
            self.stop.wait(0.05)
        if not done():
            h.error("no progress: fewer than 50 acks or no commit ack in 60 s after the last fault")

    def _read_back(
        self,
    ) -> tuple[dict[int, list[Stored]], dict[int, int], dict[int, int]]:
        stored: dict[int, list[Stored]] = {}
        starts: dict[int, int] = {}
        protected: dict[int, int] = {}
        with weir.Client(self.server.endpoint) as client:
            self._check_commits("final")
            for t_idx, topic in enumerate(self.topics):
                try:
                    info = client.describe_topic(topic)
                except NotFoundError as err:
                    self._unexpected("read back", err)
                    continue
                for p in info.partition_info:
                    key = p.partition + TOPIC_STRIDE * t_idx
                    starts[key] = p.start_offset
                    rows: list[Stored] = []
                    for chunk in client.read_range(
                        topic, p.partition, p.start_offset, p.end_offset
                    ):
                        rows.extend(
                            Stored(m.offset, message_id(m.data), m.producer_id, m.seq_no)
                            for m in chunk.messages(max(chunk.first_offset, p.start_offset))
                            if p.start_offset <= m.offset < p.end_offset
                        )
                    stored[key] = rows
                if any(c.important for c in info.consumers):
                    ci = client.describe_consumer(topic, CONSUMER)
                    for cp in ci.partitions:
                        protected[cp.partition + TOPIC_STRIDE * t_idx] = cp.committed_offset
        return stored, starts, protected


def _short(topic: str) -> str:
    return topic.rsplit("/", 1)[-1]


def run_chaos(
    workdir: Path, settings: ChaosSettings, env: dict[str, str] | None = None
) -> ChaosResult:
    """A server (on a LazyMount when the settings cut power) under `Chaos`; always cleaned up."""
    data = workdir / "data"
    mount: LazyMount | None = None
    if settings.power_cuts:
        why = LazyMount.available()
        if why is not None:
            raise RuntimeError(f"power cuts need FUSE: {why}")
        mount = LazyMount(workdir / "disk", data, workdir / "lock-files").start()
    try:
        server = ServerProcess(data, env={**CHAOS_ENV, **(env or {})}).start()
        try:
            return Chaos(server, settings, mount).run()
        finally:
            server.kill()
    finally:
        if mount is not None:
            mount.stop()


def summary_column(result: ChaosResult) -> dict[str, str]:
    """One run's column of the summary table (plain strings: an xdist worker sends it to
    the process that prints the table)."""
    r = result
    column = {
        "seed": str(r.seed),
        "server kills (kill -9 + power cut)": str(r.kills),
        **{f"faults: {k}": str(n) for k, n in sorted(r.faults.items())},
        "unsynced pages dropped by power cuts": str(r.dropped_pages),
        "messages attempted": str(r.report.attempted),
        "acknowledged": str(r.report.acknowledged),
        "delivered to consumers": str(r.report.delivered),
        "stored at the end": str(r.report.stored),
        "removed by retention": str(r.report.retained),
        "commits acknowledged": str(r.report.commits_acked),
        "committed positions checked": str(r.report.commit_checks),
        "lost": str(len(r.report.lost)),
        "duplicated": str(len(r.report.duplicated)),
        "other violations": str(
            sum(len(v) for k, v in r.report.violations().items() if k not in ("lost", "duplicated"))
        ),
        "unexpected client errors": str(len(r.errors)),
        "max recovery time (s)": f"{r.max_recovery_s:.2f}",
        "run time (s)": f"{r.seconds:.0f}",
    }
    return column


def summary_table(columns: list[tuple[str, dict[str, str]]]) -> str:
    """A markdown table, one column per run (`summary_column`): faults by kind, acked, lost,
    duplicated, ..."""
    rows: list[str] = []
    for _, column in columns:
        rows += [k for k in column if k not in rows]
    faults = sorted(k for k in rows if k.startswith("faults: "))
    rest = [k for k in rows if not k.startswith("faults: ")]
    rows = rest[:2] + faults + rest[2:]  # seed, kills, the faults by kind, then the rest
    default = {k: "0" for k in faults}
    head = ["", *(name for name, _ in columns)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += [
        "| " + " | ".join([k, *({**default, **c}.get(k, "") for _, c in columns)]) + " |"
        for k in rows
    ]
    return "\n".join(lines)
