"""Produce / consume through the weir SDK against a real server on loopback.

    python bench/sdk_bench.py [--messages 1000000] [--size 100] [--big 100000] [--profile DIR]
                              [--live 200000] [--compaction 500000] [--keys 10000]
                              [--readers 1,4,10] [--shared-messages 100000]

Starts `weir serve` in a child process on an ephemeral port with a fresh data
directory (acks after fsync, as always), then measures from a single producer:
N messages of S bytes, M messages of 10 KB, and one consumer reading the N
messages back. With --profile, py-spy records the server during the run and
writes flame graphs (SVG) into DIR.

Then, beside those persistent rows: a live produce/consume row for a persistent and a
non-persistent topic (one reader connected before one producer writes --live
messages of S bytes; the non-persistent row reports what its bounded queue dropped),
and compaction throughput: --compaction messages over --keys keys written, then one
run, messages compacted per second (the run's own duration and the wall time of
`compact(wait=True)`).

With --readers, it then starts a server with the read cache off and one with it
on (storage.read_cache_bytes), writes --shared-messages of 1 KB to one
partition, and lets 1, 4, 10 consumers (each its own client and consumer name)
read all of it at the same time: total MB/s and the server's CPU per MB.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import weir

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Row:
    workload: str
    messages: int
    bytes: int
    seconds: float
    server_cpu: float = 0.0  # CPU seconds the server used (robust on a noisy machine)
    client_cpu: float = 0.0

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6


class Server:
    def __init__(self, data_dir: Path, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.env = env
        self.proc: subprocess.Popen[str] | None = None
        self.endpoint = ""

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "weir.cli",
                "serve",
                "--data-dir",
                str(self.data_dir),
                "--listen",
                "127.0.0.1:0",
            ],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
            # the Pulsar and HTTP ports on ephemeral ports too: 6650 / 8080 may be taken
            env={
                **os.environ,
                "WEIR_PULSAR_LISTEN": "127.0.0.1:0",
                "WEIR_HTTP_LISTEN": "127.0.0.1:0",
                **(self.env or {}),
            },
        )
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 60
        for line in self.proc.stderr:
            m = re.search(r"weir listening on (\S+)", line)
            if m:
                self.endpoint = m.group(1).split(",")[0]
                break
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start")
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()  # type: ignore[union-attr]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def produce(client: weir.Client, topic: str, n: int, size: int, label: str) -> Row:
    payload = os.urandom(size)
    w = client.writer(topic, producer_id=f"bench-{label}").wait_init()
    write = w.write
    t0 = time.perf_counter()
    for _ in range(n):
        write(payload)
    w.flush()
    dt = time.perf_counter() - t0
    w.close()
    return Row(f"produce {n:,} x {size} B, 1 producer", n, n * size, dt)


def consume(
    client: weir.Client, topic: str, n: int, size: int, consumer: str, columns: bool
) -> Row:
    """Read everything back: as Message objects, or as the batch's value column."""
    r = client.reader(topic, consumer=consumer).wait_connected()
    got = 0
    t0 = time.perf_counter()
    deadline = t0 + 300
    while got < n and time.perf_counter() < deadline:
        b = r.receive_batch(timeout=5)
        if b is None:
            break
        if columns:
            got += len(b.values)
        else:
            for _m in b.messages:
                got += 1
    dt = time.perf_counter() - t0
    r.close()
    how = "batch.values" if columns else "Message objects"
    return Row(f"consume {n:,} x {size} B, 1 consumer ({how})", got, got * size, dt)


def shared_readers(client: weir.Client, topic: str, n: int, readers: int) -> Row:
    """``readers`` consumers, each with a client of its own, read the same n messages at once."""
    got = [0] * readers
    ready = threading.Barrier(readers + 1)

    def run(i: int) -> None:
        c = weir.Client(client.endpoint)
        r = c.reader(topic, consumer=f"shared-{readers}-{i}").wait_connected()
        ready.wait()
        deadline = time.perf_counter() + 300
        while got[i] < n and time.perf_counter() < deadline:
            b = r.receive_batch(timeout=5)
            if b is None:
                break
            got[i] += len(b.values)
        r.close()
        c.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(readers)]
    for t in threads:
        t.start()
    ready.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    total = sum(got)
    who = f"{readers} consumer{'s' if readers > 1 else ''}"
    return Row(f"{who} of one partition", total, total * 1000, dt)


def live(client: weir.Client, topic: str, n: int, size: int) -> Row:
    """One reader connected first, then one producer writes n messages; the row ends when
    the reader has them all (persistent) or nothing more comes (non-persistent: drops)."""
    kind = client.describe_topic(topic).kind
    r = client.reader(topic, start="latest").wait_connected()
    got = [0]
    done = threading.Event()

    def read() -> None:
        quiet = 0
        while got[0] < n and quiet < 3:
            b = r.receive_batch(timeout=1)
            if b is None:
                quiet += 1
                continue
            quiet = 0
            got[0] += len(b.values)
        done.set()

    reader = threading.Thread(target=read)
    reader.start()
    payload = os.urandom(size)
    w = client.writer(topic, producer_id=f"bench-live-{topic}").wait_init()
    t0 = time.perf_counter()
    for _ in range(n):
        w.write(payload)
    w.flush()
    produced = time.perf_counter() - t0
    done.wait(300)
    dt = time.perf_counter() - t0
    reader.join()
    w.close()
    r.close()
    dropped = client.describe_topic(topic).dropped_messages
    extra = f", {dropped:,} dropped" if kind != "persistent" else ""
    row = Row(
        f"live {n:,} x {size} B, {kind}: produce {n / produced:,.0f} msg/s, "
        f"{got[0]:,} consumed{extra}",
        got[0],
        got[0] * size,
        dt,
    )
    return row


def compaction(client: weir.Client, n: int, keys: int, size: int) -> Row:
    """n messages over ``keys`` keys, then one compaction run: messages compacted per s."""
    topic = "compacted"
    client.create_topic(topic, partitions=1)
    payload = os.urandom(size)
    with client.writer(topic, producer_id="bench-compaction") as w:
        step = 10_000
        for i in range(0, n, step):
            m = min(step, n - i)
            w.write_many([payload] * m, keys=[b"key-%d" % ((i + j) % keys) for j in range(m)])
    t0 = time.perf_counter()
    info = client.compact(topic, wait=True, timeout=600)
    wall = time.perf_counter() - t0
    p = info.partitions[0]
    run_s = max(p.duration_ms, 1) / 1000
    return Row(
        f"compaction of {p.messages_before:,} messages over {keys:,} keys -> {p.messages_after:,} "
        f"(run {p.messages_before / run_s:,.0f} msg/s; wall {wall:.2f} s)",
        p.messages_before,
        p.bytes_before,
        wall,
    )


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(server: Server, fn: Callable[[], Row]) -> Row:
    assert server.proc is not None
    s0, c0 = cpu_seconds(server.proc.pid), time.process_time()
    row = fn()
    row.server_cpu = cpu_seconds(server.proc.pid) - s0
    row.client_cpu = time.process_time() - c0
    return row


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--big", type=int, default=100_000, help="number of 10 KB messages")
    ap.add_argument("--profile", default=None, help="write py-spy flame graphs of the server here")
    ap.add_argument("--json", default=None)
    ap.add_argument("--live", type=int, default=200_000, help="live produce/consume rows (0: none)")
    ap.add_argument("--compaction", type=int, default=500_000, help="messages compacted (0: none)")
    ap.add_argument("--keys", type=int, default=10_000, help="keys of the compacted messages")
    ap.add_argument("--readers", default="", help="e.g. 1,4,10: shared-partition reader rows")
    ap.add_argument("--shared-messages", type=int, default=100_000, help="1 KB messages read")
    args = ap.parse_args()
    if args.readers:
        shared_rows(args.shared_messages, [int(x) for x in args.readers.split(",")])
        return
    data = Path(tempfile.mkdtemp(prefix="weir-sdk-bench-"))
    server = Server(data / "data")
    server.start()
    spy = None
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
        assert server.proc is not None
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        spy = subprocess.Popen(
            [
                py_spy,
                "record",
                "-p",
                str(server.proc.pid),
                "-o",
                f"{args.profile}/server.txt",
                "--format",
                "raw",
                "--rate",
                "250",
                "--nonblocking",
                "--threads",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    rows: list[Row] = []
    try:
        client = weir.Client(server.endpoint)
        client.create_topic("small", partitions=1)
        client.create_topic("big", partitions=1)
        rows.append(
            measured(server, lambda: produce(client, "small", args.messages, args.size, "small"))
        )
        if args.big:
            rows.append(measured(server, lambda: produce(client, "big", args.big, 10_000, "big")))
        rows.append(
            measured(server, lambda: consume(client, "small", args.messages, args.size, "a", False))
        )
        rows.append(
            measured(server, lambda: consume(client, "small", args.messages, args.size, "b", True))
        )
        if args.live:
            client.create_topic("live-p", partitions=1)
            client.create_topic("live-np", partitions=1, kind="non-persistent")
            for t in ("live-p", "live-np"):
                rows.append(measured(server, lambda t=t: live(client, t, args.live, args.size)))
        if args.compaction:
            rows.append(
                measured(server, lambda: compaction(client, args.compaction, args.keys, args.size))
            )
        client.close()
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        server.stop()
        shutil.rmtree(data, ignore_errors=True)
    print("| workload | messages/s | MB/s | seconds | server CPU µs/msg | client CPU µs/msg |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r.workload} | {r.msgs_per_s:,.0f} | {r.mb_per_s:,.1f} | {r.seconds:.2f} | "
            f"{1e6 * r.server_cpu / max(1, r.messages):.2f} | {1e6 * r.client_cpu / max(1, r.messages):.2f} |"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                [{**asdict(r), "msgs_per_s": r.msgs_per_s, "mb_per_s": r.mb_per_s} for r in rows],
                indent=1,
            )
        )


def shared_rows(n: int, readers_list: list[int]) -> None:
    """The read cache over the wire: the same consumers with it off and on."""
    rows: list[tuple[str, Row]] = []
    for label, cache in (("off", "0"), ("on", "256MiB")):
        data = Path(tempfile.mkdtemp(prefix="weir-sdk-bench-"))
        server = Server(data / "data", env={"WEIR_STORAGE_READ_CACHE_BYTES": cache})
        server.start()
        try:
            client = weir.Client(server.endpoint)
            client.create_topic("shared", partitions=1)
            produce(client, "shared", n, 1000, "shared")
            for readers in readers_list:
                rows.append(
                    (
                        label,
                        measured(
                            server, lambda c=client, r=readers: shared_readers(c, "shared", n, r)
                        ),
                    )
                )
            client.close()
        finally:
            server.stop()
            shutil.rmtree(data, ignore_errors=True)
    print("| workload | read cache | messages/s | MB/s | seconds | server CPU ms per MB |")
    print("|---|---|---:|---:|---:|---:|")
    for label, r in rows:
        print(
            f"| {r.workload} | {label} | {r.msgs_per_s:,.0f} | {r.mb_per_s:,.1f} | "
            f"{r.seconds:.2f} | {1e3 * r.server_cpu / max(1e-9, r.bytes / 1e6):.2f} |"
        )


if __name__ == "__main__":
    main()
