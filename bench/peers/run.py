"""Run every peer x workload, R times, and print one Markdown table.

Usage::

    python -m bench.peers.run --quick            # 100k x 100 B, 10k x 10 KB
    python -m bench.peers.run                    # full: 1M x 100 B, 100k x 10 KB
    python bench/peers/run.py --systems redis-aof-always,disk --reps 1

Each measurement is written as one JSON line (the :class:`Result` fields plus
run metadata) to ``--out``, so another harness can merge the peers' rows with
weir's own; the aggregated table (median and min-max over the repetitions) is
printed and saved next to it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

if __package__ in (None, ""):  # run as a script: make `bench.peers` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.peers import disk, servers, workloads
from bench.peers.workloads import Result, Target

SYSTEMS: dict[str, str] = {  # name -> client kind
    "nats-js-fsync": "nats",
    "nats-js-default": "nats",
    "redis-aof-always": "redis",
    "rabbitmq-stream": "rabbitmq",
}
ALL = [*SYSTEMS, "disk"]


@dataclass(frozen=True)
class Plan:
    """Counts and caps of one mode."""

    mode: str
    sizes: tuple[tuple[int, int], ...]  # (message size, message count)
    producers: tuple[int, ...]
    consumers: tuple[int, ...]
    max_seconds: float
    latency_rate: int
    latency_seconds: float


def make_plan(args: argparse.Namespace) -> Plan:
    if args.quick:
        sizes = ((100, args.small or 100_000), (10_240, args.large or 10_000))
        cap = args.max_seconds or 20.0
    else:
        sizes = ((100, args.small or 1_000_000), (10_240, args.large or 100_000))
        cap = args.max_seconds or 45.0
    return Plan(
        mode="quick" if args.quick else "full",
        sizes=sizes,
        producers=(1, 4),
        consumers=(1, 2),
        max_seconds=cap,
        latency_rate=args.latency_rate,
        latency_seconds=args.latency_seconds,
    )


class Sink:
    """Appends every row as JSON and keeps it for the summary table."""

    def __init__(self, fh: TextIO, meta: dict[str, Any]) -> None:
        self.fh = fh
        self.meta = meta
        self.rows: list[dict[str, Any]] = []

    def add(self, r: Result, rep: int, version: str) -> None:
        row = dict(
            r.to_dict(),
            rep=rep,
            version=version,
            **self.meta,
            ts=time.time(),
            loadavg_1m=os.getloadavg()[0],
        )  # the machine is shared: keep the noise visible
        self.rows.append(row)
        self.fh.write(json.dumps(row) + "\n")
        self.fh.flush()
        p = f" p50 {r.p50_ms:.2f} p99 {r.p99_ms:.2f} ms" if r.p50_ms is not None else ""
        capped = " (capped by time)" if r.extra.get("capped_by_time") else ""
        print(
            f"  [{r.system}] rep {rep} {r.workload}: {r.messages} msgs in {r.seconds:.2f}s = "
            f"{r.msgs_per_s:,.0f} msg/s {r.mb_per_s:.1f} MB/s{p}{capped}",
            flush=True,
        )

    def error(self, system: str, workload: str, rep: int, err: str) -> None:
        row = dict(
            system=system, workload=workload, rep=rep, error=err, **self.meta, ts=time.time()
        )
        self.fh.write(json.dumps(row) + "\n")
        self.fh.flush()
        print(f"  [{system}] rep {rep} {workload}: ERROR {err.splitlines()[-1]}", flush=True)


def run_peer(
    name: str, plan: Plan, reps: int, data_root: Path, sink: Sink, skip_latency: bool
) -> None:
    """Start one peer, run all workloads ``reps`` times, always stop it."""
    t = time.monotonic()
    with servers.running(name, data_root / name) as h:
        print(
            f"== {name}: {h.version}, pid {h.pid}, ports {h.ports}, ready in "
            f"{time.monotonic() - t:.1f}s ({h.notes})",
            flush=True,
        )
        target = Target(h.system, SYSTEMS[name], h.host, h.port, h.fsync_before_ack, h.version)
        for rep in range(reps):
            for size, n in plan.sizes:
                run_size(target, plan, size, n, rep, sink)
            if not skip_latency:
                try:
                    for r in workloads.latency(
                        target, plan.latency_rate, plan.latency_seconds, 100
                    ):
                        sink.add(r, rep, h.version)
                except Exception:
                    sink.error(name, "latency", rep, traceback.format_exc())
    print(f"== {name}: stopped (pid {h.pid})", flush=True)


def run_size(t: Target, plan: Plan, size: int, n: int, rep: int, sink: Sink) -> None:
    """Produce with P=1 and P=4 into fresh streams, consume the P=1 stream back."""
    keep: workloads.StreamRef | None = None
    available = 0
    for p in plan.producers:
        ref = None
        try:
            ref = workloads.prepare_stream(t, f"p{p}")
            r = workloads.produce(t, ref, n, size, p, plan.max_seconds)
            sink.add(r, rep, t.version)
            if keep is None:
                keep, available, ref = ref, r.messages, None
        except Exception:
            sink.error(t.system, f"produce P={p} {size}B", rep, traceback.format_exc())
        finally:
            if ref is not None:
                with contextlib.suppress(Exception):
                    workloads.drop_stream(t, ref)
    if keep is None:
        return
    try:
        for c in plan.consumers:
            try:
                sink.add(
                    workloads.consume(t, keep, available, size, c, plan.max_seconds), rep, t.version
                )
            except Exception:
                sink.error(t.system, f"consume C={c} {size}B", rep, traceback.format_exc())
    finally:
        with contextlib.suppress(Exception):
            workloads.drop_stream(t, keep)


def run_disk(reps: int, data_root: Path, sink: Sink) -> None:
    print("== disk: append + fdatasync", flush=True)
    for rep in range(reps):
        for r in disk.run_all(data_root / "disk"):
            sink.add(r, rep, "")


# --------------------------------------------------------------------------
# summary
# --------------------------------------------------------------------------


def _fmt(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "-"
    return f"{x:,.{digits}f}"


def summarize(rows: Iterable[dict[str, Any]]) -> str:
    """Markdown table: median and min-max over repetitions of each (system, workload)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if "error" in r:
            continue
        groups.setdefault((r["system"], r["workload"]), []).append(r)
    lines = [
        "| system | workload | msgs/s (median) | msgs/s min-max | MB/s | p50 ms | p99 ms | fsync before ack | reps | notes |",
        "|---|---|---:|---:|---:|---:|---:|:---:|---:|---|",
    ]
    for (system, wl), rs in groups.items():
        mps = [r["msgs_per_s"] for r in rs]
        mbs = [r["mb_per_s"] for r in rs]
        p50 = [r["p50_ms"] for r in rs if r["p50_ms"] is not None]
        p99 = [r["p99_ms"] for r in rs if r["p99_ms"] is not None]
        notes = []
        if any(r["extra"].get("capped_by_time") for r in rs):
            msgs = [r["messages"] for r in rs]
            notes.append(f"capped by time ({min(msgs):,}-{max(msgs):,} msgs done)")
        elif any(r["extra"].get("unread", 0) > 0 for r in rs):
            notes.append(f"unread left: {max(r['extra']['unread'] for r in rs):,}")
        if any(r["extra"].get("failed", 0) > 0 for r in rs):
            notes.append(f"not acked: up to {max(r['extra'].get('failed', 0) for r in rs):,}")
        sat = any(r["extra"].get("saturated") for r in rs)
        if sat:
            notes.append("could not sustain the rate: latencies are lower bounds")
        ge = "≥" if sat else ""
        lines.append(
            "| {} | {} | {} | {}-{} | {} | {} | {} | {} | {} | {} |".format(
                system,
                wl,
                _fmt(statistics.median(mps)),
                _fmt(min(mps)),
                _fmt(max(mps)),
                _fmt(statistics.median(mbs), 1),
                ge + _fmt(statistics.median(p50), 2) if p50 else "-",
                (
                    ge
                    + _fmt(statistics.median(p99), 2)
                    + f" ({_fmt(min(p99), 1)}-{_fmt(max(p99), 1)})"
                )
                if p99
                else "-",
                "yes" if rs[0]["fsync_before_ack"] else "no",
                len(rs),
                "; ".join(notes),
            )
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--quick", action="store_true", help="100k x 100 B and 10k x 10 KB (default: full)"
    )
    ap.add_argument(
        "--reps", type=int, default=3, help="repetitions of each measurement (default 3)"
    )
    ap.add_argument("--systems", default=",".join(ALL), help=f"comma list of {ALL}")
    ap.add_argument("--small", type=int, help="override the count of 100 B messages")
    ap.add_argument("--large", type=int, help="override the count of 10 KB messages")
    ap.add_argument(
        "--max-seconds", type=float, help="time cap per produce/consume phase (quick 20, full 45)"
    )
    ap.add_argument("--latency-rate", type=int, default=5000)
    ap.add_argument("--latency-seconds", type=float, default=10.0)
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    ap.add_argument(
        "--data-dir", type=Path, help="parent of the servers' temp dirs (default: $TMPDIR)"
    )
    ap.add_argument(
        "--keep-data", action="store_true", help="do not delete the servers' data afterwards"
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = make_plan(args)
    chosen = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(chosen) - set(ALL)
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)}; choose from {ALL}")
    # SIGTERM -> KeyboardInterrupt, so every `finally` stops its server
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    jsonl = args.out / f"peers-{plan.mode}-{stamp}.jsonl"
    data_root = Path(tempfile.mkdtemp(prefix="weir-peers-", dir=args.data_dir))
    meta = dict(mode=plan.mode, host=platform.node(), cpus=os.cpu_count(), run=stamp)
    print(
        f"mode {plan.mode}: sizes {plan.sizes}, cap {plan.max_seconds}s/phase, reps {args.reps}, "
        f"data in {data_root}, results -> {jsonl}",
        flush=True,
    )
    t0 = time.monotonic()
    try:
        with open(jsonl, "w") as fh:
            sink = Sink(fh, meta)
            for name in chosen:
                try:
                    if name == "disk":
                        run_disk(args.reps, data_root, sink)
                    else:
                        run_peer(name, plan, args.reps, data_root, sink, args.skip_latency)
                except KeyboardInterrupt:
                    raise
                except Exception:
                    sink.error(name, "server", -1, traceback.format_exc())
    finally:
        servers.stop_all()
        if not args.keep_data:
            shutil.rmtree(data_root, ignore_errors=True)
    table = summarize(sink.rows)
    md = args.out / f"peers-{plan.mode}-{stamp}.md"
    md.write_text(
        f"# weir peers, {plan.mode} mode, {stamp}\n\nsizes {plan.sizes}, cap {plan.max_seconds}s per phase, "
        f"{args.reps} reps, {time.monotonic() - t0:.0f}s total\n\n{table}\n"
    )
    print()
    print(table)
    print(f"\nrows: {jsonl}\ntable: {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
