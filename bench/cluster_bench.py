"""The broker cluster beside the embedded mode: produce and consume through the native SDK.

    python -m bench.run --workloads cluster --systems weir-cluster --quick --reps 2 --no-profile
    python -m bench.cluster_bench --small 400000 --large 40000 --seconds 20 --partitions 4 \
        --quorums 3/2/2 --out rows.jsonl        # alone: longer runs for the CPU constants

A ZooKeeper, 3 bookies (metrics on) and 3 brokers (``weir serve`` in replicated mode,
each its own process, as ``weir cluster up`` runs them) on loopback, and one embedded
``weir serve`` (LMDB) beside them. For each quorum set (E/WQ/AQ, default 3/2/2 and
2/2/1; the brokers are restarted with the next set, the bookies and ZooKeeper stay),
every workload runs on the embedded server and on the cluster in turn (A/B, the order
swapped every repetition):

* ``cluster produce P=k SIZE``: a fresh topic of k partitions (placement spreads them
  over the brokers: 4 partitions on 3 brokers are 2/1/1), one producer process per
  partition (``writer.write()`` per message, ``flush()`` at the end, dedup on); the
  writer is given broker-0's endpoint and follows each partition's owner.
* ``cluster consume P=k SIZE``: the same topic read back, one process per partition
  reading it whole with ``Client.read_range`` (what the Spark connector does; it follows
  the partition's owner). Not yet a reader of a consumer (the reader spanning several
  owners, `weir.client.owner_readers`, landed after this bench was written).

Besides the rate, each row carries what the capacity model of docs/cluster.md is built
from: CPU seconds of every broker and bookie process (/proc/PID/stat) per message and
per MB, and from the bookies' /metrics the journal group commits (one fsync
each) and the entry bytes stored (= WQ copies of each entry). Every process shares
this machine's two cores and one disk: the cluster pays three brokers, three bookies
and WQ fsyncs per entry on the same cores the embedded server has to itself.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import weir_workloads as weir_wl
from bench.peers import servers
from bench.peers.workloads import Gate, Result, Target, _merge_throughput, _now, _run_workers
from bench.throughput import Window, cpu_seconds, scrape

ROOT = "/weir-bench"
QUORUMS: tuple[tuple[int, int, int], ...] = ((3, 2, 2), (2, 2, 1))
EMBEDDED = "weir-embedded"


def cluster_system(quorum: tuple[int, int, int]) -> str:
    e, wq, aq = quorum
    return f"weir-cluster E{e}/WQ{wq}/AQ{aq}"


# --------------------------------------------------------------------------
# processes
# --------------------------------------------------------------------------


@dataclass
class BenchCluster:
    """ZooKeeper + bookies with /metrics + brokers, all on loopback, stopped by PID."""

    workdir: Path
    brokers: int = 3
    bookies: int = 3
    zookeeper: Any = None
    bookie_procs: list[Any] = field(default_factory=list)
    bookie_metrics: list[int] = field(default_factory=list)
    broker_procs: list[Any] = field(default_factory=list)
    quorum: tuple[int, int, int] = (0, 0, 0)

    def start(self) -> BenchCluster:
        from weir.replication.local_cluster import BookieProcess, stable_port
        from weir.replication.zkserver import ZooKeeperServer

        try:
            self.zookeeper = ZooKeeperServer(self.workdir / "zookeeper")
            self.zookeeper.start()
            for i in range(self.bookies):
                mport = stable_port()
                b = BookieProcess(
                    self.workdir / f"bookie-{i}",
                    self.zookeeper.hosts,
                    ROOT,
                    "--metrics-listen",
                    f"127.0.0.1:{mport}",
                )
                self.bookie_procs.append(b)
                self.bookie_metrics.append(mport)
                b.start()
        except BaseException:
            self.stop()
            raise
        return self

    def start_brokers(self, quorum: tuple[int, int, int]) -> None:
        """(Re)start the brokers with quorums E/WQ/AQ; returns once all have joined."""
        from weir.broker_process import BrokerPorts, BrokerProcess
        from weir.replication.local_cluster import stable_port

        self.stop_brokers()
        e, wq, aq = quorum
        env = {
            "WEIR_CLUSTER_ZOOKEEPER": self.zookeeper.hosts,
            "WEIR_CLUSTER_ROOT": ROOT,
            "WEIR_CLUSTER_ENSEMBLE_SIZE": str(e),
            "WEIR_CLUSTER_WRITE_QUORUM": str(wq),
            "WEIR_CLUSTER_ACK_QUORUM": str(aq),
            "WEIR_LOG_LEVEL": "warning",
        }
        self.quorum = quorum
        for i in range(self.brokers):
            ports = BrokerPorts(stable_port(), stable_port(), stable_port(), stable_port())
            p = BrokerProcess(f"broker-{i}", self.workdir / f"broker-{i}", ports, cluster_env=env)
            p.log_file = self.workdir / f"broker-{i}.log"
            p.launch()
            self.broker_procs.append(p)
        for p in self.broker_procs:
            p.wait_ready(120)
        self._await_joined()

    def _await_joined(self, timeout: float = 120.0) -> None:
        from kazoo.client import KazooClient

        from weir.broker.cluster.claims import brokers_path

        zk = KazooClient(hosts=self.zookeeper.hosts, timeout=10)
        zk.start(timeout=30)
        try:
            want = {p.broker_id for p in self.broker_procs}
            deadline = time.monotonic() + timeout
            while not want <= set(zk.get_children(brokers_path(ROOT)) or []):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"brokers {sorted(want)} did not join in {timeout:.0f} s")
                time.sleep(0.2)  # polling ZooKeeper to a deadline
        finally:
            zk.stop()
            zk.close()

    def stop_brokers(self) -> None:
        for p in self.broker_procs:
            with contextlib.suppress(Exception):
                p.stop()
        self.broker_procs = []

    def stop(self) -> None:
        self.stop_brokers()
        for b in self.bookie_procs:
            with contextlib.suppress(Exception):
                b.stop()
        self.bookie_procs = []
        if self.zookeeper is not None:
            with contextlib.suppress(Exception):
                self.zookeeper.stop()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.broker_procs[0].ports.native}"

    def broker_pids(self) -> list[int]:
        return [p.proc.pid for p in self.broker_procs if p.proc is not None]

    def bookie_pids(self) -> list[int]:
        return [b.proc.pid for b in self.bookie_procs if b.proc is not None]


@dataclass
class System:
    """One side of the A/B: a target, the processes whose CPU counts, the bookies' metrics."""

    name: str
    target: Target
    brokers: list[int]
    bookies: list[int] = field(default_factory=list)
    bookie_metrics: list[int] = field(default_factory=list)
    idle: tuple[float, float] = (0.0, 0.0)  # CPU s per s of brokers and bookies, idle

    def measure_idle(self, seconds: float = 3.0) -> None:
        """The processes' CPU with no client (ZooKeeper pings, reconcile loops), subtracted
        from every run: a run's window includes spawning its client processes."""
        a, t0 = Counters.read(self), time.monotonic()
        time.sleep(seconds)  # measuring over a fixed span, not synchronising
        b, dt = Counters.read(self), time.monotonic() - t0
        self.idle = ((b.broker_cpu - a.broker_cpu) / dt, (b.bookie_cpu - a.bookie_cpu) / dt)


@dataclass
class Counters:
    """What the capacity model needs, read before and after a run."""

    broker_cpu: float
    bookie_cpu: float
    journal_commits: float
    bookie_add_bytes: float
    bookie_adds: float

    @classmethod
    def read(cls, s: System) -> Counters:
        scrapes = [scrape(m) for m in s.bookie_metrics]
        return cls(
            sum(cpu_seconds(p) for p in s.brokers),
            sum(cpu_seconds(p) for p in s.bookies),
            sum(m.get("weir_bookie_journal_commits_total", 0.0) for m in scrapes),
            sum(m.get("weir_bookie_add_bytes_total", 0.0) for m in scrapes),
            sum(m.get("weir_bookie_adds_total", 0.0) for m in scrapes),
        )

    def delta(self, after: Counters, res: Result, wq: int) -> dict[str, Any]:
        """Per message / MB / second of ``res``; an entry is stored on ``wq`` bookies."""
        n, mb = max(1, res.messages), max(1e-9, res.bytes / 1e6)
        secs = max(1e-9, res.seconds)
        broker_cpu = after.broker_cpu - self.broker_cpu
        bookie_cpu = after.bookie_cpu - self.bookie_cpu
        out: dict[str, Any] = dict(
            broker_cpu_s=round(broker_cpu, 3),
            server_cpu_us_per_msg=round(broker_cpu / n * 1e6, 2),
            broker_cpu_ms_per_mb=round(broker_cpu / mb * 1e3, 1),
        )
        if after.bookie_adds or bookie_cpu:
            commits = after.journal_commits - self.journal_commits
            adds = after.bookie_adds - self.bookie_adds
            out.update(
                bookie_cpu_s=round(bookie_cpu, 3),
                bookie_cpu_us_per_msg=round(bookie_cpu / n * 1e6, 2),
                bookie_cpu_ms_per_mb=round(bookie_cpu / mb * 1e3, 1),
                bookie_cpu_us_per_add=round(bookie_cpu / adds * 1e6, 1) if adds else None,
                journal_fsyncs_per_s=round(commits / secs, 1),
                bookie_adds=int(adds),
                msgs_per_entry=round(n * wq / adds, 1) if adds else None,
                adds_per_fsync=round(adds / commits, 1) if commits else None,
                stored_bytes_per_payload_byte=round(
                    (after.bookie_add_bytes - self.bookie_add_bytes) / max(1, res.bytes), 2
                ),
            )
        return out


# --------------------------------------------------------------------------
# workloads
# --------------------------------------------------------------------------


def owner_groups(t: Target, topic: str, partitions: int) -> dict[str, list[int]]:
    """Native endpoint -> the partitions its broker serves (waits until all have owners)."""
    import weir

    deadline = time.monotonic() + 120
    with weir.Client(weir_wl.endpoint(t)) as c:
        while True:
            owners = c.owners(topic)
            if len(owners) == partitions and all(o.broker or o.local for o in owners):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: partitions without owner after 120 s: {owners}")
            time.sleep(0.2)  # polling Lookup to a deadline
    groups: dict[str, list[int]] = {}
    for o in owners:
        ep = o.endpoints.get("native") or weir_wl.endpoint(t)
        groups.setdefault(ep, []).append(o.partition)
    return groups


def _range_worker(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """Reads ``[0, end)`` of one partition with ``Client.read_range`` (the path of the
    Spark connector: no consumer, follows the partition's owner), decoding every message."""
    import weir

    client = weir.Client(weir_wl.endpoint(t))
    win = Window(gate, p["max_seconds"])
    count = nbytes = 0
    for chunk in client.read_range(p["topic"], p["partition"], 0, p["end"], timeout=60):
        for m in chunk.messages():
            count += 1
            nbytes += len(m.data)
        if win.over():
            break
    t_end = _now()
    cpu = win.cpu()
    client.close()
    return win.result(count, nbytes, t_end, cpu)


def _run(
    s: System, fn: Callable[[], Result], workload: str, quorum: tuple[int, int, int]
) -> Result:
    before, t0 = Counters.read(s), time.monotonic()
    load0 = os.getloadavg()[0]
    res = fn()
    after, wall = Counters.read(s), time.monotonic() - t0
    after.broker_cpu -= s.idle[0] * wall
    after.bookie_cpu -= s.idle[1] * wall
    res.system = s.name
    res.workload = workload
    res.extra.update(before.delta(after, res, quorum[1]))
    res.extra["idle_cpu_subtracted_s"] = round((s.idle[0] + s.idle[1]) * wall, 3)
    res.extra["loadavg_1m"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    res.extra["quorum"] = "/".join(map(str, quorum)) if s.bookies else "embedded"
    return res


def produce_consume(
    s: System,
    partitions: int,
    size: int,
    n: int,
    max_seconds: float,
    quorum: tuple[int, int, int],
) -> list[Result]:
    """Produce ``n`` messages of ``size`` into a fresh topic of ``partitions`` partitions
    (a producer process per partition), then read them back (a reader per owner)."""
    t = s.target
    ref = weir_wl.prepare_topic(t, f"c{partitions}", partitions=partitions)
    label = weir_wl._size_label(size)
    rows: list[Result] = []
    try:
        groups = owner_groups(t, ref.name, partitions)
        prod = _run(
            s,
            lambda: weir_wl.produce(t, ref, n, size, partitions, max_seconds),
            f"cluster produce P={partitions} {label}",
            quorum,
        )
        prod.extra["owners"] = len(groups)
        rows.append(prod)
        ends = weir_wl.end_offsets(t, ref) if not s.bookies else _ends(groups, ref.name)
        specs = [
            (
                _range_worker,
                dict(topic=ref.name, partition=k, end=end, max_seconds=max_seconds),
            )
            for k, end in enumerate(ends)
        ]

        def consume() -> Result:
            parts = _run_workers(t, specs, timeout=max_seconds + 180)
            res = _merge_throughput(
                t,
                "",
                parts,
                dict(
                    available=sum(ends),
                    size=size,
                    consumers=len(specs),
                    how="read_range(topic, partition, 0, end) per partition, one process each",
                ),
            )
            res.extra["unread"] = sum(ends) - res.messages
            res.extra["client_cpu_s"] = round(sum(q["cpu_s"] for q in parts), 3)
            return res

        rows.append(_run(s, consume, f"cluster consume P={partitions} {label}", quorum))
    finally:
        with contextlib.suppress(Exception):
            weir_wl.drop_topic(t, ref)
    return rows


def _ends(groups: dict[str, list[int]], topic: str) -> list[int]:
    """End offsets of every partition, each described at its owner (a broker describes
    only the partitions it serves)."""
    import weir

    out: dict[int, int] = {}
    for ep, parts in groups.items():
        with weir.Client(ep) as c:
            for pi in c.describe_topic(topic).partition_info:
                if pi.partition in parts:
                    out[pi.partition] = pi.end_offset
    return [out[k] for k in sorted(out)]


# --------------------------------------------------------------------------
# the harness's runner, table and chart
# --------------------------------------------------------------------------


def systems(cluster: BenchCluster, embedded: Any) -> list[System]:
    """The embedded server and the cluster (its brokers' current quorum set)."""
    version = weir_wl.weir_version()
    return [
        System(
            EMBEDDED,
            Target(EMBEDDED, "weir", embedded.host, embedded.port, True, version),
            [embedded.pid],
        ),
        System(
            cluster_system(cluster.quorum),
            Target(
                cluster_system(cluster.quorum),
                "weir",
                "127.0.0.1",
                cluster.broker_procs[0].ports.native,
                True,
                version,
            ),
            cluster.broker_pids(),
            cluster.bookie_pids(),
            cluster.bookie_metrics,
        ),
    ]


def run_rep(
    cluster: BenchCluster,
    embedded: Any,
    rep: int,
    sizes: tuple[tuple[int, int], ...],
    partitions: tuple[int, ...],
    quorums: tuple[tuple[int, int, int], ...],
    max_seconds: float,
    emit: Callable[[Result], None],
    error: Callable[[str, str, str], None],
) -> None:
    """One repetition: per quorum set (odd repetitions walk them backwards, so the
    brokers are restarted once per set change), per size and partition count, the
    embedded server and the cluster in turn (which goes first alternates)."""
    import traceback

    for quorum in quorums if rep % 2 == 0 else tuple(reversed(quorums)):
        if cluster.quorum != quorum or not cluster.broker_procs:
            print(f"== cluster: brokers with E/WQ/AQ {quorum}", flush=True)
            cluster.start_brokers(quorum)
        pair = systems(cluster, embedded)
        for s in pair:
            s.measure_idle()
        for size, n in sizes:
            for k in partitions:
                for s in pair if (rep + k) % 2 == 0 else list(reversed(pair)):
                    try:
                        rows = produce_consume(s, k, size, n, max_seconds, quorum)
                    except Exception:
                        error(s.name, f"cluster P={k} {size}B", traceback.format_exc())
                        continue
                    for r in rows:
                        emit(r)
                        print(f"   {line(r)}", flush=True)


def line(r: Result) -> str:
    x = r.extra
    more = ""
    if x.get("bookie_cpu_us_per_msg") is not None:
        more = (
            f", bookies {x['bookie_cpu_us_per_msg']:.0f} µs/msg, "
            f"{x.get('journal_fsyncs_per_s', 0):.0f} fsyncs/s"
        )
    return (
        f"{r.system:28} {r.workload:30} {r.msgs_per_s:9,.0f} msgs/s {r.mb_per_s:7.1f} MB/s  "
        f"brokers {x.get('server_cpu_us_per_msg', 0):.0f} µs/msg{more}  load {x.get('loadavg_1m')}"
    )


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def _workload_key(wl: str) -> tuple[int, int, int]:
    return (1 if "10KB" in wl else 0, 1 if "consume" in wl else 0, int(wl.split("P=")[1][0]))


def _derived(r: dict[str, Any]) -> dict[str, float | None]:
    """The capacity model's constants of one row: CPU per MB and per ledger entry (a
    broker's work is per batch, not per message: the SDK batches), copies, fsyncs."""
    x, mb = r["extra"], max(1e-9, r["bytes"] / 1e6)
    q = str(x.get("quorum", ""))
    wq = int(q.split("/")[1]) if q.count("/") == 2 else 0
    adds = x.get("bookie_adds") or 0
    entries = adds / wq if wq and adds else 0
    broker = x.get("broker_cpu_s")
    bookie = x.get("bookie_cpu_s")
    return {
        "broker_ms_per_mb": broker / mb * 1e3 if broker is not None else None,
        "broker_us_per_entry": broker / entries * 1e6 if broker and entries else None,
        "bookie_ms_per_mb": bookie / mb * 1e3 if bookie is not None else None,
        "bookie_us_per_add": bookie / adds * 1e6 if bookie and adds else None,
        "msgs_per_entry": r["messages"] / entries if entries else None,
        "fsyncs_per_s": x.get("journal_fsyncs_per_s"),
        "adds_per_fsync": x.get("adds_per_fsync"),
        "copies": x.get("stored_bytes_per_payload_byte"),
        "client_us_per_msg": (
            x["client_cpu_s"] / r["messages"] * 1e6
            if x.get("client_cpu_s") is not None and r["messages"]
            else None
        ),
    }


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: per workload and system, the median (min-max) rate and the capacity
    model's inputs (CPU of brokers and bookies per MB and per entry, fsyncs, copies)."""
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("error") or not str(r.get("workload", "")).startswith("cluster "):
            continue
        cells.setdefault((r["workload"], r["system"]), []).append(r)
    out = [
        "| workload | system | msgs/s median (min-max) | MB/s | vs embedded "
        "| broker CPU ms/MB | broker CPU µs/entry | bookie CPU ms/MB | bookie CPU µs/add "
        "| msgs/entry | journal fsyncs/s | adds/fsync | bytes stored / payload byte "
        "| client CPU µs/msg | load 1m | reps |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    emb = {wl: _median([r["msgs_per_s"] for r in rs]) for (wl, s), rs in cells.items()
           if s == EMBEDDED}  # fmt: skip

    def med(rs: list[dict[str, Any]], key: str, digits: int = 0) -> str:
        v = [d[key] for d in map(_derived, rs) if d.get(key) is not None]
        return f"{_median(v):,.{digits}f}" if v else "-"

    for (wl, s), rs in sorted(cells.items(), key=lambda kv: (_workload_key(kv[0][0]), kv[0][1])):
        mps = [r["msgs_per_s"] for r in rs]
        m = _median(mps)
        ratio = f"{m / emb[wl]:.2f}x" if s != EMBEDDED and emb.get(wl) else "-"
        loads = [x for r in rs for x in r["extra"].get("loadavg_1m", [])]
        load = f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-"
        out.append(
            f"| {wl} | {s} | {m:,.0f} ({min(mps):,.0f}-{max(mps):,.0f}) "
            f"| {_median([r['mb_per_s'] for r in rs]):,.1f} | {ratio} "
            f"| {med(rs, 'broker_ms_per_mb', 1)} | {med(rs, 'broker_us_per_entry')} "
            f"| {med(rs, 'bookie_ms_per_mb', 1)} | {med(rs, 'bookie_us_per_add')} "
            f"| {med(rs, 'msgs_per_entry', 1)} | {med(rs, 'fsyncs_per_s')} "
            f"| {med(rs, 'adds_per_fsync', 1)} | {med(rs, 'copies', 2)} "
            f"| {med(rs, 'client_us_per_msg', 1)} | {load} | {len(rs)} |"
        )
    return "\n".join(out) if len(out) > 2 else ""


def chart(rows: list[dict[str, Any]], out: Path) -> Path | None:
    """Bars per system: produce and consume rates at 100 B (msgs/s) and 10 KB (MB/s)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if not r.get("error") and str(r.get("workload", "")).startswith("cluster "):
            cells.setdefault((r["workload"], r["system"]), []).append(r)
    if not cells:
        return None
    names = sorted({s for _, s in cells}, key=lambda s: (s != EMBEDDED, s))
    parts = sorted({int(wl.split("P=")[1].split()[0]) for wl, _ in cells})
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    panels = [
        ("produce", "100B", "msgs_per_s", "messages/s"),
        ("consume", "100B", "msgs_per_s", "messages/s"),
        ("produce", "10KB", "mb_per_s", "MB/s"),
        ("consume", "10KB", "mb_per_s", "MB/s"),
    ]
    width = 0.8 / len(names)
    for ax, (op, size, key, unit) in zip(axes.flat, panels, strict=True):
        for i, s in enumerate(names):
            xs, ys, lo, hi = [], [], [], []
            for g, k in enumerate(parts):
                rs = cells.get((f"cluster {op} P={k} {size}", s))
                if not rs:
                    continue
                v = [r[key] for r in rs]
                m = _median(v)
                xs.append(g + (i - (len(names) - 1) / 2) * width)
                ys.append(m)
                lo.append(m - min(v))
                hi.append(max(v) - m)
            if xs:
                ax.bar(xs, ys, width, label=s, yerr=[lo, hi], capsize=2)
        ax.set_xticks(range(len(parts)))
        ax.set_xticklabels([f"{k} partition{'s' if k > 1 else ''}" for k in parts])
        ax.set_ylabel(unit)
        ax.set_title(f"{op} {size} (median, whiskers min-max)", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=9)
    fig.suptitle(
        "Embedded (one process) beside the cluster (3 brokers + 3 bookies + ZooKeeper), "
        "all on this machine's 2 cores"
    )
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def dump(rows: list[Result], path: Path) -> None:
    """For a quick look without the harness: one JSON line per row."""
    with open(path, "w") as fh:
        for r in rows:
            fh.write(json.dumps(r.to_dict()) + "\n")


def start_embedded(data_dir: Path) -> Any:
    """The embedded ``weir serve`` of the comparison, its Kafka front on a free port (the
    default 9092 may be another server's on a shared machine)."""
    (kport,) = servers.free_ports(1)
    return weir_wl.start_server(data_dir, env={"WEIR_KAFKA_LISTEN": f"127.0.0.1:{kport}"})


@contextlib.contextmanager
def running(workdir: Path) -> Iterator[tuple[BenchCluster, Any]]:
    """The cluster's ZooKeeper and bookies and one embedded server, stopped by PID."""
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = BenchCluster(workdir / "cluster").start()
    embedded = None
    try:
        embedded = start_embedded(workdir / "embedded")
        yield cluster, embedded
    finally:
        if embedded is not None:
            embedded.stop()
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def parse_quorums(text: str) -> tuple[tuple[int, int, int], ...]:
    """ "3/2/2,2/2/1" -> ((3, 2, 2), (2, 2, 1))."""
    out = []
    for q in text.split(","):
        e, wq, aq = (int(x) for x in q.split("/"))
        out.append((e, wq, aq))
    return tuple(out)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--small", type=int, default=20_000)
    ap.add_argument("--large", type=int, default=2_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--partitions", default="1,4")
    ap.add_argument("--quorums", default="3/2/2,2/2/1", help="E/WQ/AQ sets")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    # SIGTERM -> KeyboardInterrupt, so `finally` stops every server
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    got: list[Result] = []
    with running(Path(tempfile.mkdtemp(prefix="weir-cluster-bench-"))) as (cluster, embedded):
        for rep in range(args.reps):
            run_rep(
                cluster, embedded, rep, ((100, args.small), (10_240, args.large)),
                tuple(int(k) for k in args.partitions.split(",")),
                parse_quorums(args.quorums),
                args.seconds,
                got.append, lambda s, w, tb: print(f"!! {s} {w}\n{tb}", flush=True),
            )  # fmt: skip
    print(table([r.to_dict() for r in got]))
    if args.out:
        dump(got, args.out)


if __name__ == "__main__":
    main()
