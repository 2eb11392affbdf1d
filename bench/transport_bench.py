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
  then ``flush()``: acknowledged msgs/s. Over TCP the writer is the caller-driven one
  (`weir.client.direct_writer`); ``--loop-writer`` takes the loop thread's, as before.

Below the table, for each pair's latency run: how many garbage collections this (client)
process made, and how many of each transport's acks slower than its p99 overlapped one.

Server CPU seconds per run come from /proc, the client's from ``time.process_time`` (the
bench process: the sync client's loop thread included); the load average is printed beside
every row. ``--no-fsync`` runs the server without fsync (test-only switch), so what is
left of an ack is the transport and the server's Python path.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
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


class GcPauses:
    """This process's garbage collections (a `gc.callbacks` entry): start, end, generation."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float, int]] = []
        self._t = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            self.spans.append((self._t, time.perf_counter(), int(info["generation"])))

    def tail_note(self, samples: dict[str, list[tuple[float, float]]]) -> str:
        """How many of each transport's acks slower than its p99 overlapped a collection."""
        big = [s for s in self.spans if s[1] - s[0] > 1e-3]
        worst = max((b - a for a, b, _ in self.spans), default=0.0) * 1e3
        parts = [
            f"client GC: {len(self.spans)} collections, {len(big)} over 1 ms, "
            f"longest {worst:.2f} ms"
        ]
        for t, xs in samples.items():
            cut = _pct([b - a for a, b in xs], 0.99)
            tail = [(a, b) for a, b in xs if b - a > cut]
            hit = sum(1 for a, b in tail if any(ga < b and gb > a for ga, gb, _ in self.spans))
            parts.append(f"{t}: {hit} of {len(tail)} acks above p99 overlapped one")
        return "; ".join(parts)


NOTES: list[str] = []


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
    spans: dict[str, list[tuple[float, float]]] = {"grpc": [], "tcp": []}
    loop = asyncio.get_running_loop()
    period, next_at = 1.0 / rate, loop.time()
    pauses = GcPauses()
    gc.callbacks.append(pauses)
    for i in range(2 * n):
        t = ("grpc", "tcp")[(i + i // 2) % 2]
        t0 = time.perf_counter()
        await writers[t].write_with_result(b"x" * 100)
        t1 = time.perf_counter()
        out[t].append((t1 - t0) * 1e3)
        spans[t].append((t0, t1))
        next_at += period
        delay = next_at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            next_at = loop.time()
    gc.callbacks.remove(pauses)
    NOTES.append(pauses.tail_note(spans))
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


def _produce_only(h: Any, args: argparse.Namespace) -> None:
    """The produce run alone, ``--pairs`` times: gRPC, TCP (the caller-driven sync writer)
    and TCP with the loop thread's writer, in turn, first one rotating."""
    import weir.client.sync

    systems = [("grpc", "grpc", True), ("tcp", "tcp", True), ("tcp loop writer", "tcp", False)]
    print("| run | 100 B msg/s | srv CPU us/msg | cli CPU us/msg | load |")
    print("|---|---:|---:|---:|---:|")
    rates: dict[str, list[float]] = {name: [] for name, _, _ in systems}
    for i in range(args.pairs):
        for name, transport, direct in systems[i % 3 :] + systems[: i % 3]:
            weir.client.sync.DIRECT_TCP_WRITERS = direct
            cpu0, own0 = cpu_seconds(h.pid), time.process_time()
            rate = _produce(h, transport, "transport-bench", args.produce_msgs)
            srv = (cpu_seconds(h.pid) - cpu0) / args.produce_msgs * 1e6
            cli = (time.process_time() - own0) / args.produce_msgs * 1e6
            rates[name].append(rate)
            print(f"| {i} {name} | {rate:,.0f} | {srv:.2f} | {cli:.2f} | {_load()} |", flush=True)
    for name, rs in rates.items():
        print(f"| median {name} | {statistics.median(rs):,.0f} | | | {_load()} |")


def _run(
    h: Any, transport: str, args: argparse.Namespace, lat: list[float], runner: asyncio.Runner
) -> dict[str, float]:
    """A latency run and a produce run of ``transport``, for their CPU per message; the
    latency percentiles are those of ``lat`` (the interleaved run)."""
    cpu0, own0 = cpu_seconds(h.pid), time.process_time()
    n = max(500, args.latency_msgs // 4)
    runner.run(_latency(h, transport, "transport-bench", n - 200, args.rate))
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
    ap.add_argument(
        "--loop-writer",
        action="store_true",
        help="produce over TCP with the sync writer of the client's loop thread (as before "
        "the caller-driven writer, weir.client.direct_writer)",
    )
    ap.add_argument(
        "--produce-only",
        action="store_true",
        help="only the produce runs, alternating gRPC, TCP, and TCP with the loop writer",
    )
    args = ap.parse_args()
    import weir
    import weir.client.sync

    if args.loop_writer:
        weir.client.sync.DIRECT_TCP_WRITERS = False

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
            stack = contextlib.ExitStack()
            with weir.Client(f"{h.host}:{h.port}") as c:
                c.create_topic("transport-bench", partitions=2)
            if args.produce_only:
                _produce_only(h, args)
                return
            rows: dict[str, list[dict[str, float]]] = {"grpc": [], "tcp": []}
            print("| run | " + " | ".join(t for _, t, _ in COLUMNS) + " | load |")
            print("|---|" + "---:|" * len(COLUMNS) + "---:|")
            # one event loop for every asyncio part: grpc.aio's poller outlives a loop that
            # asyncio.run closes, and said "Event loop is closed" into the table
            runner = stack.enter_context(asyncio.Runner())
            for pair in range(args.pairs):
                lat = runner.run(_interleaved(h, "transport-bench", args.latency_msgs, args.rate))
                order = ["grpc", "tcp"] if pair % 2 == 0 else ["tcp", "grpc"]
                for transport in order:
                    r = _run(h, transport, args, lat[transport], runner)
                    rows[transport].append(r)
                    print(_row(f"{pair} {transport}", r, _load()), flush=True)
            for transport, rs in rows.items():
                med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
                print(_row(f"median {transport}", med, _load()))
            for i, note in enumerate(NOTES):
                print(f"\npair {i} latency run: {note}")
        finally:
            stack.close()
            h.stop()


if __name__ == "__main__":
    main()
