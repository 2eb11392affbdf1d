#!/usr/bin/env python
"""The ``ydb`` SDK's sync writer against weir and against the null server, in one run.

    .venv/bin/python tests/ydb/writer_bench.py [--messages 100000] [--size 100]

For each pattern the same client code writes N messages of SIZE random bytes
with one producer to weir (fresh data directory) and to bench/ydb_null_server.py
(acks without storing: the ceiling), and prints messages/s and the ratio. The
servers run as child processes on ephemeral loopback ports and are stopped by
PID. Patterns: ``write(msg)`` per message (one WriteRequest each), and
``write([100 msgs])``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import ydb

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def child(cmd: list[str], pattern: str, stream: str) -> Iterator[tuple[int, int]]:
    """Run a server, yield (pid, port) once it printed its address; SIGTERM it by PID after."""
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE if stream == "stdout" else subprocess.DEVNULL,
        stderr=subprocess.PIPE if stream == "stderr" else subprocess.DEVNULL,
    )
    out = proc.stdout if stream == "stdout" else proc.stderr
    assert out is not None
    port = 0
    deadline = time.monotonic() + 30
    for line in out:
        m = re.search(pattern, line)
        if m:
            port = int(m.group(1))
            break
        if time.monotonic() > deadline:
            break
    if not port:
        proc.kill()
        raise RuntimeError(f"{cmd[2]} did not start")
    threading.Thread(target=lambda: [None for _ in out], daemon=True).start()  # drain
    try:
        yield proc.pid, port
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


def weir_server(data_dir: str) -> Iterator[tuple[int, int]]:
    cmd = [sys.executable, "-m", "weir.cli", "serve", "--data-dir", data_dir]
    cmd += ["--listen", "127.0.0.1:0", "--log-level", "warning"]
    return child(cmd, r"weir listening on \S+:(\d+)", "stderr")


def null_server() -> Iterator[tuple[int, int]]:
    cmd = [sys.executable, str(ROOT / "bench" / "ydb_null_server.py"), "--listen", "127.0.0.1:0"]
    cmd += ["--log-level", "WARNING"]
    return child(cmd, r"LISTENING \S+:(\d+)", "stdout")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_writer(port: int, topic: str, n: int, size: int, batch: int) -> float:
    """Messages/s of one sync writer: write in a loop (``batch`` per call), then flush."""
    payloads = [os.urandom(size) for _ in range(1000)]
    with ydb.Driver(endpoint=f"grpc://127.0.0.1:{port}", database="/local") as driver:
        driver.wait(timeout=10, fail_fast=True)
        with suppress(ydb.Error):  # exists from an earlier run
            driver.topic_client.create_topic(topic, min_active_partitions=1)
        writer = driver.topic_client.writer(topic, producer_id=f"bench-{topic}")
        writer.wait_init(timeout=10)
        start = time.perf_counter()
        if batch == 1:
            for i in range(n):
                writer.write(ydb.TopicWriterMessage(payloads[i % 1000]))
        else:
            for i in range(0, n, batch):
                writer.write(
                    [
                        ydb.TopicWriterMessage(payloads[j % 1000])
                        for j in range(i, min(n, i + batch))
                    ]
                )
        writer.flush(timeout=600)
        elapsed = time.perf_counter() - start
        writer.close()
    return n / elapsed


def measure(
    name: str, server: Callable[[], Iterator[tuple[int, int]]], n: int, size: int, batch: int
) -> dict[str, float]:
    with server() as (pid, port):  # type: ignore[attr-defined]
        cpu0 = cpu_seconds(pid)
        rate = run_writer(port, f"bench_{name}_{batch}", n, size, batch)
        cpu = cpu_seconds(pid) - cpu0
    return {"rate": rate, "server_cpu_s": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batches", default="1,100", help="messages per write() call")
    args = parser.parse_args()
    results = []
    for batch in (int(b) for b in args.batches.split(",")):
        with tempfile.TemporaryDirectory() as data:
            w = measure("weir", lambda: weir_server(data), args.messages, args.size, batch)
        z = measure("null", null_server, args.messages, args.size, batch)
        row = {
            "messages": args.messages,
            "size": args.size,
            "per_write_call": batch,
            "weir_msgs_s": round(w["rate"]),
            "null_msgs_s": round(z["rate"]),
            "ratio": round(w["rate"] / z["rate"], 3),
            "weir_server_cpu_s": round(w["server_cpu_s"], 2),
            "null_server_cpu_s": round(z["server_cpu_s"], 2),
        }
        results.append(row)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
