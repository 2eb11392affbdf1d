"""The CPU one ``write()`` costs a 100 B producer, and what the consumer's ``Message`` loop costs.

    .venv/bin/python -m bench.write_cost                  # 3 runs, 300,000 messages each
    .venv/bin/python -m bench.write_cost --profile        # + cProfile of one produce run
    .venv/bin/python -m bench.write_cost --src /other/checkout/src   # the SDK of another tree
    WEIR_PURE_PYTHON_WRITE=1 .venv/bin/python -m bench.write_cost   # the Python write()

One ``weir serve`` child (native TCP on, fsync on) and, in this process, the sync client's
caller-driven TCP writer (`weir.client.direct_writer`, ``partition=0``). Each run writes
``--messages`` 100 B messages, one ``write()`` each, then ``flush()``, and reports:

* msgs/s: acknowledged messages per wall-clock second (noisy on a shared machine);
* write() CPU µs: the producing thread's CPU time (``time.thread_time``) over the write
  loop, per message: the Python of ``write()`` plus the sends it drives;
* client CPU µs: the whole process (``time.process_time``, the loop thread included)
  over the write loop and the flush, per message;
* quiet write() µs: the loop is timed 1,000 writes at a time; the 10th percentile of
  those: one ``write()`` when neither a send nor another process interrupted it.

Then the consumer: a reader iterating ``Message`` objects over what was written (``for m
in reader``-style: ``read_batch`` and a loop over its messages touching ``m.data``),
msgs/s and the process's CPU µs per message.

CPU time is what these figures are for: the machine is shared, so wall-clock rates swing
with the load of others, while the CPU a call costs moves much less. ``--src`` puts
another checkout's ``src`` first on ``sys.path`` (A/B of two versions in turn).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _load() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 1)[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--profile", action="store_true", help="cProfile one more produce run")
    ap.add_argument("--src", type=Path, default=None, help="import weir from this src dir")
    ap.add_argument("--no-read", action="store_true", help="skip the consumer rows")
    args = ap.parse_args(argv)
    if args.src is not None:
        sys.path.insert(0, str(args.src.resolve()))
    sys.path.insert(1, str(ROOT))
    import weir
    from bench import weir_workloads as weir_wl
    from bench.peers import servers

    print(f"weir from {Path(weir.__file__).parent}")
    payload = b"p" * args.size
    with tempfile.TemporaryDirectory(prefix="weir-write-cost-") as d:
        (tport,) = servers.free_ports(1)
        tcp = f"{servers.LOOPBACK}:{tport}"
        h = weir_wl.start_server(
            Path(d),
            env={
                "WEIR_NATIVE_TCP_ENABLED": "true",
                "WEIR_NATIVE_TCP_LISTEN": tcp,
                "WEIR_KAFKA_ENABLED": "false",
            },
        )
        try:
            with weir.Client(f"{h.host}:{h.port}", transport="tcp", tcp_endpoint=tcp) as c:
                c.create_topic("wc", partitions=1)
                _produce(c, args, payload)
                if not args.no_read:
                    _read(c, args.runs)
        finally:
            h.stop()
    return 0


def _produce(c: Any, args: argparse.Namespace, payload: bytes) -> None:
    print("| run | msgs/s | write() CPU µs/msg | client CPU µs/msg | quiet write() µs | load |")
    print("|---|---:|---:|---:|---:|---:|")
    rows: list[tuple[float, float, float, float]] = []
    for i in range(args.runs + (1 if args.profile else 0)):
        profile = args.profile and i == args.runs
        w = c.writer("wc", partition=0)
        w.wait_init()
        for _ in range(1000):  # warm up
            w.write(payload)
        w.flush()
        prof = None
        if profile:
            import cProfile

            prof = cProfile.Profile(time.thread_time_ns, 1e-9)
            prof.enable()
        n = args.messages
        write = w.write
        chunks = range(n // 1000)
        ks = range(1000)
        clock = time.perf_counter_ns
        per: list[int] = []
        p0, t0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
        for _ in chunks:
            c0 = clock()
            for _ in ks:
                write(payload)
            per.append(clock() - c0)
        t1 = time.thread_time()
        n = len(per) * 1000
        w.flush()
        w1, p1 = time.perf_counter(), time.process_time()
        w.close()
        if prof is not None:
            prof.disable()
            import pstats

            pstats.Stats(prof).sort_stats("tottime").print_stats(14)
            continue
        per.sort()
        quiet = per[len(per) // 10] / 1000 / 1000  # µs per write() in a quiet 1,000
        r = (n / (w1 - w0), (t1 - t0) / n * 1e6, (p1 - p0) / n * 1e6, quiet)
        rows.append(r)
        print(
            f"| {i} | {r[0]:,.0f} | {r[1]:.3f} | {r[2]:.3f} | {r[3]:.3f} | {_load()} |", flush=True
        )
    med = [statistics.median(x[k] for x in rows) for k in range(4)]
    print(f"| median | {med[0]:,.0f} | {med[1]:.3f} | {med[2]:.3f} | {med[3]:.3f} | {_load()} |")
    # the least CPU a run took: the least disturbed by other processes (cache, SMT)
    print(
        f"| best | {max(x[0] for x in rows):,.0f} | {min(x[1] for x in rows):.3f} | "
        f"{min(x[2] for x in rows):.3f} | {_load()} |"
    )


def _read(c: Any, runs: int) -> None:
    from weir.client.reader import Start

    print("\n| read run | Message msgs/s | client CPU µs/msg | load |")
    print("|---|---:|---:|---:|")
    rows = []
    for i in range(runs):
        r = c.reader("wc", start=Start.EARLIEST)
        n = 0
        total = 0
        p0, w0 = time.process_time(), time.perf_counter()
        while True:
            batch = r.receive_batch(timeout=1.0)
            if batch is None:
                break
            for m in batch:
                total += len(m.data)
                n += 1
        # the last wait (1 s of nothing) is not reading: take it off the wall clock
        w1, p1 = time.perf_counter() - 1.0, time.process_time()
        r.close()
        row = (n / (w1 - w0), (p1 - p0) / max(1, n) * 1e6)
        rows.append(row)
        print(f"| {i} ({n:,} msgs) | {row[0]:,.0f} | {row[1]:.3f} | {_load()} |", flush=True)
    med = [statistics.median(x[k] for x in rows) for k in range(2)]
    print(f"| median | {med[0]:,.0f} | {med[1]:.3f} | {_load()} |")


if __name__ == "__main__":
    raise SystemExit(main())
