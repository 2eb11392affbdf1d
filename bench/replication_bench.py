"""Replicated adds: a ledger on 3 local bookies (E=WQ=3, AQ=2) beside one bookie (E=WQ=AQ=1).

    python bench/replication_bench.py [--dir DIR] [--seconds 5] [--size 1024] [--window 1,64]
    python -m bench.run --workloads replication --systems weir-bookies   # the same, in the harness

Starts a ZooKeeper and 3 bookie processes on loopback (weir.replication.local_cluster),
then for each case writes entries of ``--size`` bytes for ``--seconds`` with
``window`` adds in flight (1: each add waits for the previous one, the latency of
one acknowledged write; 64: a pipelined writer). Reports entries/s, MB/s and the
p50 / p99 latency of an add (from the call to its acknowledgment). All bookies
share this machine's disk and cores, so the 3-bookie rows pay three fsyncs and
three processes' CPU on one machine: on three machines each bookie's disk and
CPU work in parallel and an add costs one network round trip plus the slower of
the two fastest fsyncs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from weir.replication.ledger import LedgerClient
from weir.replication.local_cluster import LocalCluster


@dataclass
class Row:
    case: str
    window: int
    size: int
    entries: int
    seconds: float
    entries_per_s: float
    mb_per_s: float
    p50_ms: float
    p99_ms: float


async def run_case(
    hosts: str,
    root: str,
    quorums: tuple[int, int, int],
    window: int,
    size: int,
    seconds: float,
    max_entries: int = 0,
) -> Row:
    """Adds for ``seconds``, or until ``max_entries`` were started (0: no cap)."""
    payload = b"x" * size
    latencies: list[float] = []
    async with LedgerClient(hosts, root=root) as client:
        lh = await client.create_ledger(*quorums)
        in_flight: set[asyncio.Future[int]] = set()
        t0 = time.perf_counter()
        deadline = t0 + seconds
        started_count = 0
        while time.perf_counter() < deadline and not (max_entries and started_count >= max_entries):
            started_count += 1
            started = time.perf_counter()
            fut = lh.add_async(payload)

            def acked(_f: asyncio.Future[int], s: float = started) -> None:
                latencies.append(time.perf_counter() - s)

            fut.add_done_callback(acked)
            in_flight.add(fut)
            if len(in_flight) >= window:
                _, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
        if in_flight:
            await asyncio.wait(in_flight)
        elapsed = time.perf_counter() - t0
        await lh.close()
    latencies.sort()
    n = len(latencies)
    e, wq, aq = quorums
    return Row(
        case=f"E={e} WQ={wq} AQ={aq}",
        window=window,
        size=size,
        entries=n,
        seconds=round(elapsed, 2),
        entries_per_s=round(n / elapsed),
        mb_per_s=round(n * size / elapsed / 1e6, 2),
        p50_ms=round(latencies[n // 2] * 1000, 2),
        p99_ms=round(latencies[min(n - 1, n * 99 // 100)] * 1000, 2),
    )


CASES = ((1, 1, 1), (3, 3, 2))  # one bookie (single-node storage), then E=WQ=3 AQ=2


def run_all(
    workdir: Path, seconds: float, size: int, windows: tuple[int, ...], max_entries: int = 0
) -> list[Row]:
    """Start a ZooKeeper and 3 bookies under ``workdir``, run every case, stop them."""
    rows: list[Row] = []
    with LocalCluster(workdir, bookies=3) as cluster:
        for quorums in CASES:
            for window in windows:
                row = asyncio.run(
                    run_case(
                        cluster.zookeeper.hosts,
                        cluster.root,
                        quorums,
                        window,
                        size,
                        seconds,
                        max_entries,
                    )
                )
                rows.append(row)
                print(
                    f"{row.case:16} window {row.window:3}  {row.entries_per_s:7} entries/s  "
                    f"{row.mb_per_s:6} MB/s  p50 {row.p50_ms} ms  p99 {row.p99_ms} ms",
                    flush=True,
                )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--dir", default=None)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--window", default="1,64")
    ap.add_argument("--entries", type=int, default=0, help="cap of adds per case (0: none)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="weir-repl-bench-"))
    ap_windows = tuple(int(w) for w in args.window.split(","))
    rows = run_all(workdir, args.seconds, args.size, ap_windows, args.entries)
    if args.json:
        Path(args.json).write_text("\n".join(json.dumps(asdict(r)) for r in rows) + "\n")


if __name__ == "__main__":
    main()
