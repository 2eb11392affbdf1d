"""Durable subscriptions: Shared consume with individual acks, and the cursor's cost.

    python bench/subscription_bench.py [--messages 50000] [--consumers 1,4] [--sparse 20000]

1. Starts `weir serve` (a fresh data directory, as sdk_bench.py does), writes
   --messages of 100 B over 4 partitions, then for each count in --consumers lets
   that many Shared consumers (each its own process and client) take everything of a
   new subscription, acknowledging every message individually (one ack request per
   received batch, up to 8 in flight: `acknowledge_future`): messages acknowledged
   (durably: the answer came back) per second, and the server's CPU.
2. In process, on a broker over a fresh directory: acks every other offset of
   --sparse delivered messages (the worst case for the range set: one range per ack)
   in requests of 100, and reports per ack request as the ranges grow: CPU, wall time,
   the cursor's stored size and the group commits it took; then a burst of 50 ack
   requests at once (they share group commits: not one fsync per ack).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import weir

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sdk_bench import ROOT, Server, cpu_seconds
from server_profile import Profiler, top_functions


def _consumer_process(
    endpoint: str,
    topic: str,
    sub: str,
    n: int,
    acked: Any,
    requests: Any,
    ready: Any,
    go: Any,
    cpu: Any,
) -> None:
    with weir.Client(endpoint) as client:
        c = client.subscribe(topic, sub, type="shared", receiver_queue_size=2000)
        c.wait_connected()
        ready.release()
        go.wait()
        c0 = time.process_time()
        inflight: list[tuple[concurrent.futures.Future[None], int]] = []
        while acked.value < n:
            msgs = c.receive_batch(1000, timeout=0.2)
            if msgs:
                inflight.append((c.acknowledge_future(msgs), len(msgs)))
                with requests.get_lock():
                    requests.value += 1
            while inflight and (inflight[0][0].done() or len(inflight) > 8 or not msgs):
                fut, k = inflight.pop(0)
                fut.result()
                with acked.get_lock():
                    acked.value += k
        for fut, _ in inflight:  # the others finished first: this one's acks still count
            fut.result()
        with cpu.get_lock():
            cpu.value += time.process_time() - c0  # the loop thread's too: one process
        c.close()


def shared_consume(
    endpoint: str, topic: str, n: int, consumers: int, profile: Path | None = None
) -> tuple[float, int, float, float]:
    """``consumers`` processes (each its own client) take everything of a new Shared
    subscription; a message counts once its ack's answer is back. Returns seconds, ack
    requests, acked messages/s and the consumers' CPU seconds."""
    sub = f"bench-{consumers}-{time.monotonic_ns()}"
    with weir.Client(endpoint) as admin:
        admin.create_subscription(topic, sub, type="shared", initial_position="earliest")
    ctx = mp.get_context("spawn")
    acked, requests, cpu = ctx.Value("q", 0), ctx.Value("q", 0), ctx.Value("d", 0.0)
    ready, go = ctx.Semaphore(0), ctx.Event()
    procs = [
        ctx.Process(
            target=_consumer_process,
            args=(endpoint, topic, sub, n, acked, requests, ready, go, cpu),
        )
        for _ in range(consumers)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire(timeout=60)
    prof = (
        Profiler(procs[0].pid or 0, profile / f"consumer-{consumers}.raw")
        if profile
        else contextlib.nullcontext()
    )
    with prof:
        t0 = time.perf_counter()
        go.set()
        for p in procs:
            p.join(300)
        dt = time.perf_counter() - t0
    if isinstance(prof, Profiler):
        print("one consumer process:\n" + (prof.error or top_functions(prof.out, 25)))
    return dt, requests.value, acked.value / dt, cpu.value


def shared_rows(endpoint: str, n: int, consumers: list[int], server_pid: int) -> list[Any]:
    """`make bench` rows: a topic of ``n`` x 100 B over 4 partitions, then for each count
    of consumers a new Shared subscription taken and individually acknowledged."""
    from bench.peers.workloads import Result

    topic = f"subs-{time.monotonic_ns()}"
    with weir.Client(endpoint) as client:
        client.create_topic(topic, partitions=4)
        with client.writer(topic, producer_id="bench") as w:
            payload = os.urandom(100)
            for _ in range(n):
                w.write(payload)
    rows = []
    try:
        for k in consumers:
            s0 = cpu_seconds(server_pid)
            dt, reqs, _rate, ccpu = shared_consume(endpoint, topic, n, k)
            cpu = cpu_seconds(server_pid) - s0
            rows.append(
                Result(
                    "weir-native",
                    f"subscription shared C={k} 100B",
                    n,
                    n * 100,
                    dt,
                    True,
                    None,
                    None,
                    dict(
                        consumers=k,
                        ack_requests=reqs,
                        server_cpu_us_per_msg=cpu * 1e6 / n,
                        consumers_cpu_us_per_msg=ccpu * 1e6 / n,
                        how="Shared subscription, every message acknowledged individually "
                        "(durably: counted once the ack's answer is back)",
                    ),
                )
            )
    finally:
        with weir.Client(endpoint) as client:
            client.drop_topic(topic)
    return rows


def sparse_row(n: int) -> Any:
    """`make bench` row: scattered acks (a range each) in requests of 100, as many as
    ``n`` delivered messages allow; the cursor's CPU, size and commits per request."""
    from bench.peers.workloads import Result

    t0 = time.perf_counter()
    lines, summary = asyncio.run(sparse_acks(n))
    dt = time.perf_counter() - t0
    return Result(
        "weir-native",
        f"subscription sparse acks {n // 2:,}",
        n // 2,
        0,
        dt,
        True,
        None,
        None,
        dict(lines=lines, **summary, how="every other offset acknowledged, 100 per request"),
    )


async def sparse_acks(n: int) -> tuple[list[str], dict[str, Any]]:
    """Ack every other offset of ``n`` delivered messages in requests of 100 (the worst
    case for the range set: one range per ack), then a burst of 50 such requests at once:
    per request the CPU (process time, the commit thread's included), the cursor's size
    and the group commits (fsyncs) it took."""
    from weir.broker.broker import Broker
    from weir.broker.config import BrokerConfig
    from weir.broker.subscriptions import Delivery
    from weir.errors import WeirError
    from weir.storage.batch_encoding import encode_batch
    from weir.storage.incoming import validate_incoming

    class Sink:
        def deliver(self, d: Delivery) -> None:
            pass

        def close(self, err: WeirError) -> None:
            pass

    out: list[str] = []
    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        b = await Broker.open(BrokerConfig(data_dir=Path(tmp), retention_interval_s=3600))
        try:
            await b.create_topic("t", partitions=1)
            for i in range(0, n + 1000, 1000):
                batch = encode_batch([b"x" * 100] * 1000, producer_id="p", first_seq_no=i + 1)
                await b.write("t", 0, validate_incoming([batch]))
            s, c = await b.subscribe("t", "s", "exclusive", "earliest", Sink())
            s.flow(c.consumer_id, n + 1000)
            while s.parts[0].read_pos < n:
                await asyncio.sleep(0.01)
            stats = b.store.committer.stats
            evens = list(range(0, n, 2))
            step = max(100, len(evens) // 5 // 100 * 100)
            for k in range(0, len(evens), 100):
                c0, w0, f0 = time.process_time(), time.perf_counter(), stats.commits
                await s.acknowledge([(0, o, o + 1) for o in evens[k : k + 100]])
                cpu_ms = (time.process_time() - c0) * 1e3
                summary["last_request_cpu_ms"] = cpu_ms
                summary["last_request_ranges"] = len(s.parts[0].cursor.acked)
                if k % step == 0:
                    cur = s.parts[0].cursor
                    out.append(
                        f"sparse acks: {len(cur.acked):,} acked ranges ({len(cur.snapshot_op().value or b''):,} B "  # type: ignore[arg-type]
                        f"cursor): {cpu_ms:.2f} ms CPU, "
                        f"{(time.perf_counter() - w0) * 1e3:.2f} ms wall, "
                        f"{stats.commits - f0} group commit(s) per ack request of 100"
                    )
            # a burst: 50 requests of 100 scattered acks each, all at once
            odds = list(range(1, n, 2))[: 50 * 100]
            c0, w0, f0 = time.process_time(), time.perf_counter(), stats.commits
            await asyncio.gather(
                *(
                    s.acknowledge([(0, o, o + 1) for o in odds[k : k + 100]])
                    for k in range(0, len(odds), 100)
                )
            )
            summary["burst_requests"] = len(odds) // 100
            summary["burst_commits"] = stats.commits - f0
            out.append(
                f"burst of {len(odds) // 100} ack requests of 100: {stats.commits - f0} group "
                f"commit(s), {(time.process_time() - c0) * 1e3 / (len(odds) // 100):.2f} ms CPU "
                f"per request, {(time.perf_counter() - w0) * 1e3:.1f} ms wall in all"
            )
        finally:
            await b.close()
    return out, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--consumers", default="1,4")
    ap.add_argument("--sparse", type=int, default=20_000)
    ap.add_argument("--profile", type=Path, help="py-spy the server into this directory")
    args = ap.parse_args()
    print(f"load average before: {Path('/proc/loadavg').read_text().split()[:3]}")
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        # the Pulsar and HTTP fronts on ports of their own (their defaults may be taken)
        server = Server(
            Path(tmp), env={"WEIR_PULSAR_LISTEN": "127.0.0.1:0", "WEIR_HTTP_LISTEN": "127.0.0.1:0"}
        )
        server.start()
        try:
            with weir.Client(server.endpoint) as client:
                client.create_topic("subs", partitions=4)
                with client.writer("subs", producer_id="bench") as w:
                    payload = os.urandom(100)
                    for _ in range(args.messages):
                        w.write(payload)
            assert server.proc is not None
            for k in map(int, args.consumers.split(",")):
                s0 = cpu_seconds(server.proc.pid)
                prof = (
                    Profiler(server.proc.pid, args.profile / f"server-{k}.raw")
                    if args.profile
                    else contextlib.nullcontext()
                )
                with prof:
                    dt, reqs, rate, ccpu = shared_consume(
                        server.endpoint, "subs", args.messages, k, args.profile
                    )
                cpu = cpu_seconds(server.proc.pid) - s0
                us = 1e6 / args.messages
                print(
                    f"shared, {k} consumer(s), individual acks: {args.messages:,} x 100 B in "
                    f"{dt:.2f} s = {rate:,.0f} acked msg/s; {reqs:,} ack requests; "
                    f"server CPU {cpu:.2f} s ({cpu * us:.2f} us/msg), consumers' CPU "
                    f"{ccpu:.2f} s ({ccpu * us:.2f} us/msg)"
                )
                if isinstance(prof, Profiler):
                    print("server:\n" + (prof.error or top_functions(prof.out, 25)))
        finally:
            server.stop()
    print(f"load average after: {Path('/proc/loadavg').read_text().split()[:3]}")
    if args.sparse:
        for line in asyncio.run(sparse_acks(args.sparse))[0]:
            print(line)


if __name__ == "__main__":
    main()
