"""gRPC against the native TCP port for weir's write stream, alternately, on one server.

    python -m bench.transport_bench                 # 3 pairs, ~1 min
    python -m bench.transport_bench --pairs 5 --latency-msgs 5000

One ``weir serve`` (native_tcp.enabled) in a child process; for each pair the two
transports run one after the other, the first one alternating (A B, B A, ...), so drifts
of this shared machine's load hit both alike. Each run is:

* latency: one message in flight, paced at ``--rate`` (5,000/s; slower when an ack takes
  longer than the period): ``await write_with_result`` on `weir.aio`, ack time per message,
  a gRPC writer and a TCP writer taking turns message by message (A B B A), so that both
  meet the same load; then a shorter run of each alone for its CPU per ack;
* produce: ``--produce-msgs`` 100 B messages, one ``write()`` each on the sync client,
  then ``flush()``: acknowledged msgs/s.

Server CPU seconds per run come from /proc, the client's from ``time.process_time`` (the
bench process: the sync client's loop thread included); the load average is printed beside
every row. ``--no-fsync`` runs the server without fsync (test-only switch), so what is
left of an ack is the transport and the server's Python path.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import weir_workloads as weir_wl
from bench.peers import servers
from bench.throughput import cpu_seconds


def _load() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 1)[0]


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _client_kw(h: Any, transport: str) -> dict[str, Any]:
    tcp = f"{h.host}:{h.ports['native_tcp']}"
    return {"transport": transport, "tcp_endpoint": tcp if transport == "tcp" else None}


async def _latency(h: Any, transport: str, topic: str, n: int, rate: float) -> list[float]:
    import weir.aio

    async with weir.aio.Client(f"{h.host}:{h.port}", **_client_kw(h, transport)) as c:
        w = c.writer(topic, partition=0)
        await w.wait_init()
        for _ in range(200):  # warm up
            await w.write_with_result(b"w" * 100)
        period = 1.0 / rate
        out: list[float] = []
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        for _ in range(n):
            t0 = time.perf_counter()
            await w.write_with_result(b"x" * 100)
            out.append((time.perf_counter() - t0) * 1e3)
            next_at += period
            delay = next_at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                next_at = loop.time()
        await w.close()
        return out


async def _interleaved(h: Any, topic: str, n: int, rate: float) -> dict[str, list[float]]:
    """Both transports at once, one message in flight in all: a gRPC writer and a TCP
    writer take turns message by message (A B B A ...), paced at ``rate`` overall, so
    both see the same moment of this machine's load."""
    import weir.aio

    clients = {
        t: weir.aio.Client(f"{h.host}:{h.port}", **_client_kw(h, t)) for t in ("grpc", "tcp")
    }
    writers = {t: c.writer(topic, partition=0) for t, c in clients.items()}
    for w in writers.values():
        await w.wait_init()
        for _ in range(200):  # warm up
            await w.write_with_result(b"w" * 100)
    out: dict[str, list[float]] = {"grpc": [], "tcp": []}
    loop = asyncio.get_running_loop()
    period, next_at = 1.0 / rate, loop.time()
    for i in range(2 * n):
        t = ("grpc", "tcp")[(i + i // 2) % 2]
        t0 = time.perf_counter()
        await writers[t].write_with_result(b"x" * 100)
        out[t].append((time.perf_counter() - t0) * 1e3)
        next_at += period
        delay = next_at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            next_at = loop.time()
    for w in writers.values():
        await w.close()
    for c in clients.values():
        await c.close()
    return out


def _produce(h: Any, transport: str, topic: str, n: int) -> float:
    import weir

    with weir.Client(f"{h.host}:{h.port}", **_client_kw(h, transport)) as c:
        w = c.writer(topic, partition=1)
        w.wait_init()
        payload = b"p" * 100
        t0 = time.perf_counter()
        for _ in range(n):
            w.write(payload)
        w.flush()
        dt = time.perf_counter() - t0
        w.close()
        return n / dt


def _run(h: Any, transport: str, args: argparse.Namespace, lat: list[float]) -> dict[str, float]:
    """A latency run and a produce run of ``transport``, for their CPU per message; the
    latency percentiles are those of ``lat`` (the interleaved run)."""
    cpu0, own0 = cpu_seconds(h.pid), time.process_time()
    n = max(500, args.latency_msgs // 4)
    asyncio.run(_latency(h, transport, "transport-bench", n - 200, args.rate))
    cpu1, own1 = cpu_seconds(h.pid), time.process_time()
    rate = _produce(h, transport, "transport-bench", args.produce_msgs)
    cpu2, own2 = cpu_seconds(h.pid), time.process_time()
    m = args.produce_msgs
    return {
        "p50": _pct(lat, 0.5),
        "p99": _pct(lat, 0.99),
        "p999": _pct(lat, 0.999),
        "lat_srv_us": (cpu1 - cpu0) / n * 1e6,
        "lat_cli_us": (own1 - own0) / n * 1e6,
        "rate": rate,
        "prod_srv_us": (cpu2 - cpu1) / m * 1e6,
        "prod_cli_us": (own2 - own1) / m * 1e6,
    }


COLUMNS = (
    ("p50", "ack p50 ms", 3),
    ("p99", "p99 ms", 3),
    ("p999", "p99.9 ms", 3),
    ("lat_srv_us", "srv CPU us/ack", 0),
    ("lat_cli_us", "cli CPU us/ack", 0),
    ("rate", "100 B msg/s", 0),
    ("prod_srv_us", "srv CPU us/msg", 2),
    ("prod_cli_us", "cli CPU us/msg", 2),
)


def _row(label: str, r: dict[str, float], load: str) -> str:
    cells = [f"{r[k]:,.{d}f}" for k, _, d in COLUMNS]
    return f"| {label} | " + " | ".join(cells) + f" | {load} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--latency-msgs", type=int, default=3000)
    ap.add_argument("--rate", type=float, default=5000.0)
    ap.add_argument("--produce-msgs", type=int, default=200_000)
    ap.add_argument(
        "--no-fsync",
        action="store_true",
        help="the server without fsync (WEIR_UNSAFE_NO_FSYNC): the transports' cost alone",
    )
    args = ap.parse_args()
    import weir

    with tempfile.TemporaryDirectory(prefix="weir-transport-") as d:
        (tport,) = servers.free_ports(1)
        h = weir_wl.start_server(
            Path(d),
            env={
                "WEIR_NATIVE_TCP_ENABLED": "true",
                "WEIR_NATIVE_TCP_LISTEN": f"{servers.LOOPBACK}:{tport}",
                "WEIR_KAFKA_ENABLED": "false",
                **({"WEIR_UNSAFE_NO_FSYNC": "1"} if args.no_fsync else {}),
            },
        )
        h.ports["native_tcp"] = tport
        try:
            with weir.Client(f"{h.host}:{h.port}") as c:
                c.create_topic("transport-bench", partitions=2)
            rows: dict[str, list[dict[str, float]]] = {"grpc": [], "tcp": []}
            print("| run | " + " | ".join(t for _, t, _ in COLUMNS) + " | load |")
            print("|---|" + "---:|" * len(COLUMNS) + "---:|")
            for pair in range(args.pairs):
                lat = asyncio.run(_interleaved(h, "transport-bench", args.latency_msgs, args.rate))
                order = ["grpc", "tcp"] if pair % 2 == 0 else ["tcp", "grpc"]
                for transport in order:
                    r = _run(h, transport, args, lat[transport])
                    rows[transport].append(r)
                    print(_row(f"{pair} {transport}", r, _load()), flush=True)
            for transport, rs in rows.items():
                med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
                print(_row(f"median {transport}", med, _load()))
        finally:
            h.stop()


if __name__ == "__main__":
    main()
