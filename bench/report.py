"""The Markdown report of one harness run: the side-by-side table and the goals.

Input is the JSONL the harness writes (one row per measurement and
repetition, the :class:`bench.peers.workloads.Result` fields plus run
metadata); every number in the report is the median over repetitions with
its min-max, because the machine is shared and single runs lie.

"Ratio to best peer" is always "higher is better for this row": throughput
rows divide by the best real broker's median (NATS, Redis, RabbitMQ) for the
same workload; latency rows divide the best broker's p99 by the row's; the
ydb SDK rows divide by the same SDK against the null server, and so do the
pulsar-client rows.

    python -m bench.report bench/results/full-<stamp>.jsonl   # rebuild .md and charts
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PEERS = ("nats-js-fsync", "nats-js-default", "redis-aof-always", "rabbitmq-stream")
WEIR = "weir-native"
WEIR_TCP = "weir-native-tcp"  # the same server, its writers on the native TCP port
WEIR_TLS = "weir-native-tls"  # the native front behind TLS, a JWT and grant checks
WEIR_YDB = "weir-ydb"
YDB_NULL = "ydb-null"
WEIR_PULSAR = "weir-pulsar"
PULSAR_NULL = "pulsar-null"
WEIR_KAFKA = "weir-kafka"
KAFKA_NULL = "kafka-null"
KAFKA_NULL_FSYNC = "kafka-null-fsync"  # the durable floor: append + fdatasync, nothing else
DISK = "disk append+fdatasync"
SYSTEM_ORDER = (
    WEIR,
    WEIR_TCP,
    WEIR_TLS,
    WEIR_YDB,
    YDB_NULL,
    WEIR_PULSAR,
    PULSAR_NULL,
    WEIR_KAFKA,
    KAFKA_NULL,
    KAFKA_NULL_FSYNC,
    *PEERS,
    DISK,
)
# rows judged against a null server
NULL_OF = {"ydb": YDB_NULL, "pulsar": PULSAR_NULL, "kafka": KAFKA_NULL}

Rows = list[dict[str, Any]]


def load(path: Path) -> tuple[Rows, dict[str, Any]]:
    """Measurement rows (errors included) and the run's metadata line of a JSONL file."""
    rows: Rows = []
    meta: dict[str, Any] = {}
    with open(path) as fh:
        for line in fh:
            if not line.strip():
                continue
            row = json.loads(line)
            if "meta" in row:
                meta.update(row["meta"])
            else:
                rows.append(row)
    return rows, meta


def ok_rows(rows: Iterable[dict[str, Any]]) -> Rows:
    return [r for r in rows if "error" not in r]


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


# --------------------------------------------------------------------------
# grouping
# --------------------------------------------------------------------------


def workload_key(wl: str) -> tuple[Any, ...]:
    """Sort order: produce/consume by size, latency, ydb, partitions, disk."""
    size = 1 if "10KB" in wl else 0
    if wl.startswith("produce") or wl.startswith("consume"):
        return (0, size, 0 if wl.startswith("produce") else 1, wl)
    if wl.startswith("latency"):
        return (1, 0, 0 if "ack" in wl else 1, wl)
    if wl.startswith("ydb"):
        return (2, 0, 1 if "consume" in wl else 0, "[" in wl, wl)
    if wl.startswith("pulsar"):
        return (2, 1, size, 1 if "consume" in wl else 0, wl)
    if wl.startswith("partitions"):
        m = re.match(r"partitions=(\d+)", wl)
        return (3, int(m.group(1)) if m else 0, 0, wl)
    if wl.startswith("append"):
        return (4, _bytes(wl), 0, wl)
    return (5, 0, 0, wl)


def _bytes(wl: str) -> int:
    m = re.search(r"(\d+)(B|KB|MB)", wl)
    if not m:
        return 0
    return int(m.group(1)) * {"B": 1, "KB": 1 << 10, "MB": 1 << 20}[m.group(2)]


def system_key(system: str) -> int:
    return SYSTEM_ORDER.index(system) if system in SYSTEM_ORDER else len(SYSTEM_ORDER)


@dataclass
class Cell:
    """The repetitions of one (system, workload)."""

    system: str
    workload: str
    rows: Rows

    def values(self, key: str) -> list[float]:
        return [r[key] for r in self.rows if r.get(key) is not None]

    def extras(self, key: str) -> list[float]:
        return [r["extra"][key] for r in self.rows if r["extra"].get(key) is not None]

    @property
    def mps(self) -> float:
        return median(self.values("msgs_per_s"))

    @property
    def mbps(self) -> float:
        return median(self.values("mb_per_s"))

    @property
    def p99(self) -> float | None:
        v = self.values("p99_ms")
        return median(v) if v else None

    @property
    def saturated(self) -> bool:
        return any(r["extra"].get("saturated") for r in self.rows)

    @property
    def fsync(self) -> bool:
        return bool(self.rows[0]["fsync_before_ack"])


def cells(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str], Cell]:
    out: dict[tuple[str, str], Cell] = {}
    for r in ok_rows(rows):
        key = (r["system"], r["workload"])
        out.setdefault(key, Cell(r["system"], r["workload"], [])).rows.append(r)
    return dict(sorted(out.items(), key=lambda kv: (workload_key(kv[0][1]), system_key(kv[0][0]))))


# --------------------------------------------------------------------------
# ratio to the best peer
# --------------------------------------------------------------------------


def reference(
    cell: Cell, all_cells: dict[tuple[str, str], Cell], baseline: dict[tuple[str, str], Cell]
) -> tuple[float, str, bool] | None:
    """(ratio, the reference system, taken from the baseline run?) for one cell, or None."""
    wl = cell.workload
    null = NULL_OF.get(wl.split(" ", 1)[0])
    if null is not None:
        ref = all_cells.get((null, wl))
        if ref is None or not ref.mps:
            return None
        return cell.mps / ref.mps, null, False
    if not (wl.startswith(("produce", "consume", "latency"))):
        return None
    for source, from_baseline in ((all_cells, False), (baseline, True)):
        peers = [source[(p, wl)] for p in PEERS if (p, wl) in source]
        if not peers:
            continue
        if wl.startswith("latency"):
            with_p99 = [(c.p99, c.system) for c in peers if c.p99]
            if not with_p99 or not cell.p99:
                return None
            best_p99, name = min(with_p99)
            return best_p99 / cell.p99, name, from_baseline
        best = max(peers, key=lambda c: c.mps)
        if not best.mps:
            return None
        return cell.mps / best.mps, best.system, from_baseline
    return None


# --------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------


def _f(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _ms(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.2f}" if x < 100 else f"{x:,.0f}"


def _notes(c: Cell) -> str:
    notes: list[str] = []
    rs = c.rows
    if any(r["extra"].get("capped_by_time") for r in rs):
        msgs = [r["messages"] for r in rs]
        notes.append(f"capped by time ({min(msgs):,}-{max(msgs):,} msgs done)")
    elif any(r["extra"].get("unread", 0) > 0 for r in rs):
        notes.append(f"unread left: up to {max(r['extra'].get('unread', 0) for r in rs):,}")
    if any(r["extra"].get("failed", 0) > 0 for r in rs):
        notes.append(f"not acked: up to {max(r['extra'].get('failed', 0) for r in rs):,}")
    if any(r["extra"].get("duplicates", 0) > 0 for r in rs):
        notes.append(
            f"read twice in rebalance: up to {max(r['extra']['duplicates'] for r in rs):,}"
        )
    recon = max((r["extra"].get("reconnects", 0) for r in rs), default=0)
    if recon:
        notes.append(f"reader reconnected (up to {recon}x)")
    stalls = sum(1 for r in rs if r["extra"].get("stalled_readers"))
    if stalls:
        notes.append(f"reader stalled (no data for 5 s) in {stalls} rep(s)")
    if c.saturated:
        notes.append("could not sustain the rate: latencies are lower bounds")
    fs = c.extras("fsyncs_per_s")
    if fs:
        notes.append(f"fsyncs/s {_f(median(fs))} ({_f(min(fs))}-{_f(max(fs))})")
        mpc = c.extras("msgs_per_commit")
        if mpc:
            notes.append(f"{_f(median(mpc))} msgs/fsync")
        mc = c.extras("mean_commit_ms")
        if mc:
            p99 = c.extras("commit_p99_ms_le")
            tail = f", p99 ≤ {median(p99):g} ms" if p99 else ""
            notes.append(f"group commit mean {median(mc):.1f} ms{tail}")
        grew = c.extras("file_grew_mb")
        if grew and max(grew) >= 1:
            per = "/".join(f"{g:,.0f}" for g in grew)
            notes.append(f"data file grew {per} MB")
    ccpu = c.extras("consumers_cpu_us_per_msg")
    if ccpu:
        notes.append(f"consumers' CPU {median(ccpu):,.2f} µs/msg")
    req = c.extras("last_request_cpu_ms")
    if req:
        ranges = max(int(r["extra"].get("last_request_ranges", 0)) for r in rs)
        bursts = [f"{r['extra']['burst_commits']}" for r in rs if "burst_commits" in r["extra"]]
        notes.append(
            f"{median(req):,.2f} ms CPU per ack request of 100 at {ranges:,} acked ranges; "
            f"a burst of 50 requests took {'/'.join(bursts)} group commit(s)"
        )
    cpu = c.extras("server_cpu_us_per_msg")
    if cpu:
        notes.append(f"server CPU {median(cpu):,.2f} µs/msg")
    return "; ".join(notes)


def table(rows: Rows, baseline_rows: Rows | None = None) -> str:
    """One Markdown table: median (min-max) over repetitions per (workload, system)."""
    all_cells = cells(rows)
    base = cells(baseline_rows or [])
    lines = [
        "| workload | system | msgs/s (median) | min-max (spread) | MB/s | p50 ms | p99 ms (min-max) "
        "| fsync before ack | ratio to best peer | reps | notes |",
        "|---|---|---:|---:|---:|---:|---:|:---:|---:|---:|---|",
    ]
    for (system, wl), c in all_cells.items():
        mps = c.values("msgs_per_s")
        spread = (max(mps) - min(mps)) / c.mps * 100 if c.mps else 0.0
        p50, p99 = c.values("p50_ms"), c.values("p99_ms")
        ge = "≥" if c.saturated else ""
        ref = reference(c, all_cells, base)
        ratio = "-"
        if ref is not None:
            val, name, from_base = ref
            ratio = f"{val:,.2f}x {name}{' †' if from_base else ''}"
        fsync = "n/a" if system in NULL_OF.values() else ("yes" if c.fsync else "no")
        lines.append(
            f"| {wl} | {system} | {_f(c.mps)} | {_f(min(mps))}-{_f(max(mps))} ({spread:.0f}%) "
            f"| {_f(c.mbps, 1)} | {ge + _ms(median(p50)) if p50 else '-'} "
            f"| {(ge + _ms(median(p99)) + f' ({_ms(min(p99))}-{_ms(max(p99))})') if p99 else '-'} "
            f"| {fsync} | {ratio} | {len(c.rows)} | {_notes(c)} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------
# goals
# --------------------------------------------------------------------------


@dataclass
class Goal:
    """One goal of issue 6 and what this run measured for it."""

    name: str
    target: str
    measured: str
    met: bool | None  # None: not measured in this run
    workloads: tuple[str, ...] = ()


def _rng(c: Cell, key: str, scale: float = 1.0, digits: int = 0) -> str:
    v = [x * scale for x in c.values(key)]
    return f"{_f(median(v), digits)} ({_f(min(v), digits)}-{_f(max(v), digits)})"


def goals(rows: Rows) -> list[Goal]:
    """Each goal against weir's medians (the best variant where the goal allows several)."""
    cs = cells(rows)
    out: list[Goal] = []

    def best(prefix: str, size: str, key: str) -> tuple[list[str], float | None, str]:
        found = [
            c
            for (s, wl), c in cs.items()
            if s in (WEIR, WEIR_TCP)
            and wl.startswith(prefix)
            and wl.endswith(" " + size)
            and "txn" not in wl  # the transactional rows and their plain baselines
        ]
        if not found:
            return [], None, "not measured"
        tcp = " (TCP)"
        parts = [
            f"{c.workload.split()[1]}{tcp if c.system == WEIR_TCP else ''}: {_rng(c, key)}"
            for c in found
        ]
        top = max(median(c.values(key)) for c in found)
        return [c.workload for c in found], top, "; ".join(parts)

    wls, top, text = best("produce", "100B", "msgs_per_s")
    out.append(
        Goal(
            "Produce 100 B messages",
            "≥ 500,000 msgs/s",
            text,
            None if top is None else top >= 500_000,
            tuple(wls),
        )
    )
    wls, top, text = best("produce", "10KB", "mb_per_s")
    out.append(
        Goal(
            "Produce 10 KB messages",
            "≥ 750 MB/s",
            text + (" MB/s" if top is not None else ""),
            None if top is None else top >= 750,
            tuple(wls),
        )
    )
    wls, top, text = best("consume", "100B", "msgs_per_s")
    out.append(
        Goal(
            "Consume 100 B messages",
            "≥ 1,000,000 msgs/s",
            text,
            None if top is None else top >= 1_000_000,
            tuple(wls),
        )
    )
    subs = next(
        (c for (sy, wl), c in cs.items() if sy == WEIR and wl == "subscription shared C=4 100B"),
        None,
    )
    if subs is not None:
        out.append(
            Goal(
                "Shared subscription, 4 consumers, every 100 B message acked individually",
                "≥ 300,000 msgs/s",
                f"{_rng(subs, 'msgs_per_s')} msgs/s",
                subs.mps >= 300_000,
                (subs.workload,),
            )
        )
    for kind, limit in (("ack", 1.0), ("e2e", 2.0)):
        found = [
            c
            for (s, wl), c in cs.items()
            if s in (WEIR, WEIR_TCP) and wl.startswith(f"latency-{kind}") and c.p99 is not None
        ]
        if not found:
            out.append(Goal(f"Latency {kind} p99 at 5,000 msgs/s", f"< {limit:g} ms", "-", None))
            continue
        out.append(
            Goal(
                f"Latency {kind} p99 at 5,000 msgs/s",
                f"< {limit:g} ms",
                "; ".join(
                    (f"{c.system}: " if len(found) > 1 else "")
                    + f"p99 {_rng(c, 'p99_ms', digits=2)} ms, p50 {_rng(c, 'p50_ms', digits=2)} ms"
                    + (" (could not sustain the rate)" if c.saturated else "")
                    for c in found
                ),
                any(c.p99 is not None and c.p99 < limit and not c.saturated for c in found),
                tuple(c.workload for c in found),
            )
        )
    for (s, wl), c in cs.items():
        if s != WEIR_YDB or not wl.startswith("ydb produce"):
            continue
        null = cs.get((YDB_NULL, wl))
        if null is None:
            continue
        paired = _paired_ratios(c.rows, null.rows)
        ratio = c.mps / null.mps if null.mps else 0.0
        rng = f", per repetition {min(paired):.2f}-{max(paired):.2f}" if paired else ""
        out.append(
            Goal(
                f"YDB front, {wl.split('100B ', 1)[-1]}: weir / null server",
                "≥ 0.80",
                f"{ratio:.2f} ({_f(c.mps)} vs {_f(null.mps)} msgs/s{rng})",
                ratio >= 0.8,
                (wl,),
            )
        )
    for (s, wl), c in cs.items():
        if s != WEIR_PULSAR or not wl.startswith("pulsar "):
            continue
        null = cs.get((PULSAR_NULL, wl))
        if null is None:
            continue
        paired = _paired_ratios(c.rows, null.rows)
        ratio = c.mps / null.mps if null.mps else 0.0
        rng = f", per repetition {min(paired):.2f}-{max(paired):.2f}" if paired else ""
        cpu = c.extras("server_cpu_us_per_msg")
        out.append(
            Goal(
                f"Pulsar front, {wl.split(' ', 1)[1]}: weir / null server",
                "≥ 0.80",
                f"{ratio:.2f} ({_f(c.mps)} vs {_f(null.mps)} msgs/s{rng}"
                + (f"; weir server CPU {median(cpu):.1f} µs/msg" if cpu else "")
                + ")",
                ratio >= 0.8,
                (wl,),
            )
        )
    for (s, wl), c in cs.items():
        if s != WEIR_KAFKA or not wl.startswith("kafka produce"):
            continue
        if wl == "kafka produce P=1 100B acks=all":
            out.append(
                Goal(
                    "Kafka front: one confluent-kafka producer, 100 B, acks=all",
                    "≥ 300,000 msgs/s",
                    f"{_rng(c, 'msgs_per_s')}",
                    c.mps >= 300_000,
                    (wl,),
                )
            )
        null = cs.get((KAFKA_NULL, wl))
        if null is None:
            continue
        paired = _paired_ratios(c.rows, null.rows)
        ratio = c.mps / null.mps if null.mps else 0.0
        rng = f", per repetition {min(paired):.2f}-{max(paired):.2f}" if paired else ""
        out.append(
            Goal(
                f"Kafka front, {wl.split('P=1 ', 1)[-1]}: weir / null server",
                "≥ 0.80",
                f"{ratio:.2f} ({_f(c.mps)} vs {_f(null.mps)} msgs/s{rng})"
                + _floor(c, cs.get((KAFKA_NULL_FSYNC, wl)), null),
                ratio >= 0.8,
                (wl,),
            )
        )
    parts = [
        c
        for (s, wl), c in cs.items()
        if s == WEIR and wl.startswith("partitions=") and c.extras("fsyncs_per_s")
    ]
    if len(parts) > 1:
        fs = [median(c.extras("fsyncs_per_s")) for c in parts]
        count = [int(c.rows[0]["extra"]["partitions"]) for c in parts]
        text = "; ".join(
            f"{n:,}: {_f(f)} fsyncs/s, {_f(c.mps)} msgs/s"
            for n, f, c in zip(count, fs, parts, strict=True)
        )
        out.append(
            Goal(
                "Many partitions: group commit keeps fsyncs/s flat",
                f"fsyncs/s at {count[-1]:,} partitions ≤ 2x the most at {count[0]:,}-{count[1]:,}",
                text,
                fs[-1] <= 2 * max(fs[0], fs[1]),
                tuple(c.workload for c in parts),
            )
        )
    return out


def _floor(c: Cell, floor: Cell | None, null: Cell) -> str:
    """What the durable floor (null server + fdatasync) says about a weir / null ratio:
    weir's share of it, and the floor's own share of the null server (a floor below 0.80
    means no server that fsyncs before it acks reaches the goal on this disk)."""
    if floor is None or not floor.mps:
        return ""
    paired = _paired_ratios(c.rows, floor.rows)
    rng = f", per repetition {min(paired):.2f}-{max(paired):.2f}" if paired else ""
    share = floor.mps / null.mps if null.mps else 0.0
    return (
        f"; weir / null+fdatasync {c.mps / floor.mps:.2f} ({_f(floor.mps)} msgs/s{rng}), "
        f"null+fdatasync / null {share:.2f}"
    )


def _paired_ratios(a: Rows, b: Rows) -> list[float]:
    """weir/null per repetition (they ran back to back, so noise partly cancels)."""
    by_rep = {r["rep"]: r["msgs_per_s"] for r in b}
    return [r["msgs_per_s"] / by_rep[r["rep"]] for r in a if by_rep.get(r["rep"])]


def goals_table(gs: list[Goal]) -> str:
    lines = ["| goal | target | measured: median (min-max) | met |", "|---|---|---|:---:|"]
    for g in gs:
        met = "not measured" if g.met is None else ("**yes**" if g.met else "**no**")
        lines.append(f"| {g.name} | {g.target} | {g.measured} | {met} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# the whole document
# --------------------------------------------------------------------------


def header(rows: Rows, meta: dict[str, Any]) -> str:
    loads = [r["loadavg_1m"] for r in ok_rows(rows) if r.get("loadavg_1m") is not None]
    versions = sorted({(r["system"], r.get("version", "")) for r in ok_rows(rows)})
    errors = [r for r in rows if "error" in r]
    lines = [
        f"# weir benchmark, {meta.get('mode', '?')} mode, {meta.get('run', '?')}",
        "",
        f"host {meta.get('host', '?')}, {meta.get('cpus', '?')} CPUs, "
        f"{meta.get('reps', '?')} repetitions, {meta.get('seconds', 0):.0f} s total; "
        + (f"1-min load average median {median(loads):.1f}, max {max(loads):.1f}" if loads else ""),
        "",
        f"sizes {meta.get('sizes', '')}, cap {meta.get('max_seconds', '?')} s per phase; "
        f"command: `{meta.get('command', '')}`; weir at commit {meta.get('weir_commit', '?')}",
        "",
        "Systems: " + "; ".join(f"{s}: {v}" for s, v in versions if v),
    ]
    if errors:
        lines += ["", f"**{len(errors)} measurement(s) failed** (see the JSONL `error` rows):"]
        for r in errors[:10]:
            last = r["error"].strip().splitlines()[-1][:200] if r["error"].strip() else "?"
            lines.append(f"* {r['system']} rep {r.get('rep')} {r['workload']}: {last}")
    return "\n".join(lines)


def document(
    rows: Rows,
    meta: dict[str, Any],
    baseline_rows: Rows | None = None,
    baseline_name: str = "",
    charts: Sequence[Path] = (),
    profile_text: str = "",
) -> str:
    parts = [
        header(rows, meta),
        "",
        "## Goals (weir, acks after fsync)",
        "",
        goals_table(goals(rows)),
    ]
    parts += ["", "## All measurements", "", table(rows, baseline_rows)]
    if baseline_rows:
        parts += [
            "",
            f"† peer numbers from the earlier run `{baseline_name}` (no peer ran in this one).",
        ]
    parts += [
        "",
        "Ratio to best peer: higher is better for the row; throughput = row / best broker's "
        "median, latency = best broker's p99 / row's p99, ydb rows = row / ydb-null.  "
        "Brokers: NATS JetStream (both), Redis Streams, RabbitMQ streams.",
    ]
    from bench import cluster_bench

    ctable = cluster_bench.table(rows)
    if ctable:
        parts += [
            "",
            "## Cluster beside embedded (bench/cluster_bench.py)",
            "",
            "Every process (3 brokers, 3 bookies, ZooKeeper, the embedded server and the "
            "clients) shares this machine's cores and disk; CPU per message is what the "
            "capacity model of docs/cluster.md is built from.",
            "",
            ctable,
        ]
    if charts:
        parts += ["", "## Charts", ""] + [f"![{p.stem}]({p.name})" for p in charts]
    if profile_text:
        parts += [
            "",
            "## Server profile (py-spy, separate unmeasured pass)",
            "",
            "```",
            profile_text.strip(),
            "```",
        ]
    return "\n".join(parts) + "\n"


def find_baseline(dirs: Sequence[Path], exclude: Path) -> tuple[Rows, str]:
    """Peer rows of the latest earlier run that has them (for the ratio column of weir-only runs)."""
    files = sorted(
        (p for d in dirs if d.exists() for p in d.glob("*.jsonl") if p != exclude),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for p in files:
        try:
            rows, _ = load(p)
        except (OSError, ValueError):
            continue
        peers = [r for r in ok_rows(rows) if r.get("system") in PEERS]
        if peers:
            return peers, p.name
    return [], ""


def main(argv: list[str] | None = None) -> int:
    from bench import plots

    args = argv if argv is not None else sys.argv[1:]
    for arg in args:
        path = Path(arg)
        rows, meta = load(path)
        base: Rows = []
        base_name = ""
        if not any(r.get("system") in PEERS for r in rows):
            here = Path(__file__).resolve().parent
            base, base_name = find_baseline([path.parent, here / "peers" / "results"], path)
        charts = plots.make_all(rows, path.with_suffix(""))
        prof = path.with_name(path.stem + "-profile.txt")
        md = path.with_suffix(".md")
        md.write_text(
            document(
                rows,
                meta,
                base,
                base_name,
                charts=charts,
                profile_text=prof.read_text() if prof.exists() else "",
            )
        )
        print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
