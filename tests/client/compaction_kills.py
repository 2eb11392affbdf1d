"""kill -9 of the server at random points of compaction runs, judged afterwards.

Two writers with producer ids of their own write keyed messages (some of them tombstones:
a key and empty data) to a topic of two partitions, through every kill: the SDK resends
what was not acknowledged after each restart. Every message carries its id
(``id:<writer>:<n>``, `tests.reliability.history`) in a header, so a tombstone has one too,
and every send and ack goes into a `History`.

Each kill: the server starts with a hold at a step chosen from the seed (the run creates
a file and waits there for ever: the n-th "scanned", "blob-batch" or "published" of its
life, `weir.broker.compaction.facade.HOLD_AT_ENV`), or none (the run ends, the kill comes
after it). A run is started while the writers write; once it is held, and the writers
have had more acks while it is held (compaction does not block them), the server is
killed with writes in flight. After the restart the writers flush (everything they sent
is acknowledged) and the compacted view is judged against the model of the acknowledged
writes (latest value per key in write order, a tombstone removes its key):

- a half-written view is never served and a published one is never lost: the partitions
  compacted before the held one keep their new position, the held one has its new view
  only if it was held after its publish, the later ones keep the old;
- each partition's compacted read is exactly the latest stored message of each key below
  the view's position (tombstones kept), then the whole live tail; folded, it equals the
  model (every key's latest acknowledged value, no deleted key, nothing else);
- each message it returns is one that was sent, at the offset it was stored at, with the
  key and data it was sent with (the reads are recorded as deliveries in the History).

At the end a run that is not cut short compacts everything, and `check` judges the
history against the whole log: no acknowledged message lost, duplicated, reordered or
moved, no phantom, no gap. The seed is printed; replay with WEIR_CHAOS_SEED.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import weir
from tests.conftest import ServerProcess
from tests.reliability.checker import Report, check
from tests.reliability.history import History, Stored, make_data, parse_id
from weir.broker.compaction.facade import HOLD_AT_ENV, HOLD_ENV
from weir.client.writer_settings import WriteResult
from weir.errors import WeirTimeoutError

TOPIC = "kv"
PARTITIONS = 2
WRITERS = ("p0", "p1")
ID_HEADER = "id"
# points to hold a run at; every run reaches the first ones (each partition has new
# data, so at least one job of view blobs); "end": no hold, the kill comes after the run
BLOB_POINTS = ("blob-batch:1", "blob-batch:2")
POINTS = (
    "scanned:1",
    "scanned:2",
    *BLOB_POINTS,
    "blob-batch:3",
    "blob-batch:4",
    "blob-batch:6",
    "published:1",
    "published:2",
    "end",
)


@dataclass
class KillSettings:
    kills: int = 3
    seed: int = 1
    keys: int = 120  # per writer
    tombstone_rate: float = 0.08
    acks_before_run: int = 600  # after a restart, before the run is started
    acks_while_held: int = 40
    max_seconds: float = 300.0


@dataclass
class KillRecord:
    point: str
    held: str = ""  # "<phase> p<partition>" when the run was held there ("" : not reached)
    in_flight: int = 0  # messages sent and not acknowledged when the server was killed
    positions: list[int] = field(default_factory=list)  # the views' positions after restart


class KeyedWriter(threading.Thread):
    """One producer id over its own keys, for the whole run (paused to be judged)."""

    def __init__(self, run: CompactionKills, label: str) -> None:
        super().__init__(name=f"writer-{label}", daemon=True)
        self.owner = run
        self.label = label
        self.sent: list[tuple[bytes, bytes]] = []  # n -> (key, data)
        self.acked: set[int] = set()
        self.lock = threading.Lock()
        self.parked = threading.Event()

    def run(self) -> None:
        r = self.owner
        rng = random.Random(f"{r.s.seed}/{self.label}")
        try:
            with weir.Client(r.server.endpoint) as client:
                w = client.writer(TOPIC, producer_id=self.label, max_buffer_messages=400)
                n = 0
                while not r.stop.is_set():
                    if not r.go.is_set():
                        w.flush(timeout=60)  # after a restart: resent until acknowledged
                        self.parked.set()
                        while not r.go.wait(0.05) and not r.stop.is_set():
                            pass  # parked until the next phase of the run
                        self.parked.clear()
                        continue
                    key = b"%s-k%d" % (self.label.encode(), rng.randrange(r.s.keys))
                    mid = f"id:{self.label}:{n}"
                    data = (
                        b"" if rng.random() < r.s.tombstone_rate else make_data(self.label, n, 48)
                    )
                    if not self._write(w, n, mid, key, data):
                        break
                    n += 1
                w.flush(timeout=60)
                w.close(timeout=5)
        except Exception as err:
            r.history.error(f"writer {self.label}: {err!r}")
        finally:
            self.parked.set()

    def _write(self, w: weir.Writer, n: int, mid: str, key: bytes, data: bytes) -> bool:
        r = self.owner
        while not r.stop.is_set():
            try:
                fut = w.write_future(data, key=key, headers={ID_HEADER: mid}, timeout=0.5)
                break
            except WeirTimeoutError:
                continue  # the buffer is full while the server is down: the same message again
        else:
            return False
        with self.lock:
            self.sent.append((key, data))
        r.history.attempted(mid)

        def done(f: Future[WriteResult]) -> None:
            err = f.exception()
            if err is not None:
                r.history.error(f"ack of {mid}: {err!r}")
                return
            res = f.result()
            r.history.acked(mid, res.partition, res.offset)
            with self.lock:
                self.acked.add(n)
            r.count_ack()

        fut.add_done_callback(done)
        return True


def fold(msgs: list[weir.Message]) -> dict[bytes, bytes]:
    d: dict[bytes, bytes] = {}
    for m in msgs:
        if m.data:
            d[m.key] = m.data
        else:
            d.pop(m.key, None)
    return d


class CompactionKills:
    def __init__(self, tmp_path: Path, s: KillSettings) -> None:
        self.s = s
        self.rng = random.Random(f"{s.seed}/compaction-kills")
        self.hold = tmp_path / "held"
        # small view blobs: several durable blob jobs per partition (points to hold at)
        self.base_env = {"WEIR_COMPACTION_BLOB_BYTES": "512", "WEIR_METRICS_ENABLED": "false"}
        self.server = ServerProcess(tmp_path / "data", env=self.base_env)
        self.history = History()
        self.go = threading.Event()
        self.stop = threading.Event()
        self.acks = 0
        self._acks_lock = threading.Lock()
        self.writers = [KeyedWriter(self, label) for label in WRITERS]
        self.kills: list[KillRecord] = []
        self.reads = 0
        self.deadline = time.monotonic() + s.max_seconds

    def why(self, report: Report | None = None) -> str:
        seed = self.s.seed
        points = ", ".join(f"{k.point}->{k.held or 'not held'}" for k in self.kills)
        head = f"seed {seed} (replay: WEIR_CHAOS_SEED={seed}); kills: {points}"
        if self.history.errors:
            head += f"; client errors: {self.history.errors[:5]}"
        return head + (f"; {report.summary()}" if report is not None else "")

    def count_ack(self) -> None:
        with self._acks_lock:
            self.acks += 1

    def acked_count(self) -> int:
        with self._acks_lock:
            return self.acks

    def _await(self, what: str, done: object) -> None:
        assert callable(done)
        while not done():
            assert time.monotonic() < self.deadline, f"{what}: timed out; {self.why()}"
            time.sleep(0.02)  # polling to the run's deadline

    def _await_acks(self, more: int) -> None:
        target = self.acked_count() + more
        self._await(f"{more} acks", lambda: self.acked_count() >= target)

    # ------------------------------------------------------------------ the run

    def _start(self, point: str | None) -> None:
        """Start the server with a hold at ``point`` (None, "end": no hold)."""
        self.hold.unlink(missing_ok=True)
        env = dict(self.base_env)
        if point is not None and point != "end":
            env.update({HOLD_ENV: str(self.hold), HOLD_AT_ENV: point})
        self.server.env = env
        self.server.start()

    def _pause(self) -> None:
        """Stop the writers once everything they sent is acknowledged."""
        self.go.clear()
        for w in self.writers:
            self._await(f"writer {w.label} to flush", w.parked.is_set)

            def answered(w: KeyedWriter = w) -> bool:
                with w.lock:
                    return len(w.acked) == len(w.sent)

            self._await(f"writer {w.label}'s ack callbacks", answered)

    def run(self) -> Report:
        # one kill at least with blobs of a new view durable and the view unpublished
        points = [self.rng.choice(BLOB_POINTS)]
        points += [self.rng.choice(POINTS) for _ in range(self.s.kills - 1)]
        self.rng.shuffle(points)
        self._start(points[0])
        try:
            with weir.Client(self.server.endpoint) as c:
                c.create_topic(TOPIC, partitions=PARTITIONS)
            for w in self.writers:
                w.start()
            for i, point in enumerate(points):
                record = KillRecord(point)
                self.kills.append(record)
                self.go.set()
                self._await_acks(self.s.acks_before_run)
                expect = self._run_and_kill(record)
                self._start(points[i + 1] if i + 1 < len(points) else None)
                self._pause()
                record.positions = self._judge_view(f"after kill {i + 1}", expect)
            with weir.Client(self.server.endpoint) as c:
                info = c.compact(TOPIC, wait=True)  # a run not cut short compacts everything
                assert not info.running and info.last_error == "", self.why()
                ends = [p.end_offset for p in c.describe_topic(TOPIC).partition_info]
            self._judge_view("final run", (ends, -1), whole=True)
            self.stop.set()
            for w in self.writers:
                w.join(timeout=60)
            stored = self._read_log("final")
        finally:
            self.stop.set()
            self.server.kill()
        return check(self.history, stored, {}, routed=WRITERS)

    def _run_and_kill(self, record: KillRecord) -> tuple[list[int], int]:
        """Start a run, kill -9 the server at its hold (or after it ended) with writes in
        flight. Returns the positions expected after the restart and the partition whose
        new view must have moved past its position then (-1: none)."""
        with weir.Client(self.server.endpoint) as c:
            c.compact(TOPIC)

            def reached() -> bool:
                return self.hold.exists() or not c.describe_compaction(TOPIC).running

            self._await(f"the run to reach {record.point}", reached)
            st = c.describe_compaction(TOPIC)
            positions = [p.position for p in st.partitions]
            moved = -1
            if self.hold.exists():
                busy = [p for p in st.partitions if p.phase not in ("", "waiting")]
                assert st.running and busy, self.why()
                held = busy[-1]  # partitions go one after the other: the last begun is held
                record.held = f"{held.phase} p{held.partition}"
                step = record.point.partition(":")[0]
                if step == "published":  # durable, not yet live: it must be there after
                    assert held.phase == "publishing", self.why()
                    moved = held.partition
                self._await_acks(self.s.acks_while_held)  # writers are not held with it
        h = self.history
        record.in_flight = h.attempted_count - h.acked_count
        self.server.kill()
        self.history.fault(f"kill9 at {record.point} ({record.held or 'not held'})")
        return positions, moved

    # ------------------------------------------------------------------ judging

    def _mid(self, m: weir.Message) -> str:
        return str(m.headers.get(ID_HEADER, ""))

    def _read_log(self, when: str) -> dict[int, list[Stored]]:
        """Every partition's whole log, recorded as one reader session's deliveries."""
        out: dict[int, list[Stored]] = {}
        with weir.Client(self.server.endpoint) as c:
            for p in c.describe_topic(TOPIC).partition_info:
                rows = [
                    Stored(m.offset, self._mid(m), m.producer_id, m.seq_no)
                    for ch in c.read_range(TOPIC, p.partition, p.start_offset, p.end_offset)
                    for m in ch.messages(p.start_offset)
                ]
                self.reads += 1
                self.history.delivered_batch(
                    f"log {self.reads} ({when})",
                    p.partition,
                    [r.offset for r in rows],
                    [r.mid for r in rows],
                )
                out[p.partition] = rows
        return out

    def _model(self) -> dict[bytes, bytes]:
        """Latest acknowledged value per key (in each writer's order; every key is one
        writer's); a tombstone removes the key."""
        model: dict[bytes, bytes] = {}
        for w in self.writers:
            with w.lock:
                assert len(w.acked) == len(w.sent), (
                    f"writer {w.label}: {len(w.sent) - len(w.acked)} sends not acknowledged "
                    f"after a flush; {self.why()}"
                )
                for n in sorted(w.acked):
                    key, data = w.sent[n]
                    if data:
                        model[key] = data
                    else:
                        model.pop(key, None)
        return model

    def _sent(self, mid: str) -> tuple[bytes, bytes] | None:
        pn = parse_id(mid)
        if pn is None or pn[0] not in WRITERS:
            return None
        w = self.writers[WRITERS.index(pn[0])]
        with w.lock:
            return w.sent[pn[1]] if pn[1] < len(w.sent) else None

    def _judge_view(
        self, when: str, expect: tuple[list[int], int], whole: bool = False
    ) -> list[int]:
        """The compacted view after a restart, against the model and the stored log."""
        expected, moved = expect
        why = f"{when}: {self.why()}"
        model = self._model()
        log = self._read_log(when)
        everything: list[weir.Message] = []
        with weir.Client(self.server.endpoint) as c:
            st = c.describe_compaction(TOPIC)
            positions = [p.position for p in st.partitions]
            for p, (pos, want) in enumerate(zip(positions, expected, strict=True)):
                if p == moved:
                    assert pos > want, f"p{p}: a published view was lost ({pos}); {why}"
                else:
                    assert pos == want, f"p{p}: view at {pos}, expected {want}; {why}"
            info = {pi.partition: pi for pi in c.describe_topic(TOPIC).partition_info}
            for p in range(PARTITIONS):
                msgs = [
                    m
                    for ch in c.read_range(TOPIC, p, 0, info[p].end_offset, compacted=True)
                    for m in ch.messages()
                ]
                self.reads += 1
                self.history.delivered_batch(
                    f"compacted {self.reads} ({when})",
                    p,
                    [m.offset for m in msgs],
                    [self._mid(m) for m in msgs],
                )
                for m in msgs:
                    sent = self._sent(self._mid(m))
                    assert sent == (m.key, m.data), f"p{p}/{m.offset}: never sent as read; {why}"
                self._judge_partition(p, positions[p], msgs, log[p], why)
                if whole:  # everything compacted: one message per key ever written
                    assert all(m.offset < positions[p] for m in msgs), why
                everything.extend(msgs)
        got = fold(everything)
        lost = sorted(k for k in model if got.get(k) != model[k])[:5]
        extra = sorted(k for k in got if k not in model)[:5]
        assert got == model, f"keys wrong {lost}, deleted keys served {extra}; {why}"
        return positions

    def _judge_partition(
        self,
        p: int,
        position: int,
        msgs: list[weir.Message],
        log: list[Stored],
        why: str,
    ) -> None:
        """Below the position: exactly the latest stored message of each key; from it on:
        the whole log."""
        latest: dict[bytes, int] = {}
        for offset, mid, _, _ in log:
            if offset < position:
                sent = self._sent(mid)
                assert sent is not None, f"p{p}/{offset}: {mid!r} stored, never sent; {why}"
                latest[sent[0]] = offset
        view = [m.offset for m in msgs if m.offset < position]
        tail = [m.offset for m in msgs if m.offset >= position]
        assert view == sorted(latest.values()), (
            f"p{p}: view below {position} is not the latest of each key: "
            f"missing {sorted(set(latest.values()) - set(view))[:5]}, "
            f"extra {sorted(set(view) - set(latest.values()))[:5]}; {why}"
        )
        assert tail == [r.offset for r in log if r.offset >= position], (
            f"p{p}: tail not whole; {why}"
        )


def run_compaction_kills(tmp_path: Path, settings: KillSettings) -> CompactionKills:
    run = CompactionKills(tmp_path, settings)
    report = run.run()
    why = run.why(report)
    print(why)
    assert report.ok, why
    assert not run.history.errors, why
    # not vacuous: every kill came, at least one mid-run, with writes in flight resent
    assert len(run.history.faults) == settings.kills, why
    assert any(k.held for k in run.kills), why
    assert report.attempted == report.acknowledged == report.stored, why
    assert report.delivered > report.stored, why
    assert sum(k.in_flight for k in run.kills) > 0, why
    return run
