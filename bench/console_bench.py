"""What the web console costs producers and consumers: nothing when nobody looks.

    python bench/console_bench.py [--messages 300000] [--reps 3] [--before-src DIR]

Starts `weir serve` (a child process, fresh data directory, ephemeral ports) in each of
these set-ups, in turn and ``--reps`` times, and runs the same load on each: one SDK
producer writes N messages of 100 B, then one consumer reads them back.

- ``no http``: no HTTP endpoint at all (the default);
- ``console idle``: the HTTP endpoint with the console on, nobody looking;
- ``console open``: the same, with a client loading the Overview's live panel and rates
  and the Topics and Consumers pages once a second (five times what one open tab does);
- ``before, http`` (with ``--before-src``, e.g. a checkout of main): the HTTP endpoint
  of that source, i.e. before the console existed.

Prints the median write and read rates and the server's CPU seconds per million
messages for each. On a busy machine these move by tens of percent from run to run, so
the bench first measures the one thing the console adds while nobody looks, in process
and without noise: the time of one sample of the rate history (every 5 s), on a broker
with ``--topics`` topics of 4 partitions and 2 consumers each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import weir

ROOT = Path(__file__).resolve().parents[1]
SIZE = 100


@dataclass
class Result:
    setup: str
    write_per_s: float
    read_per_s: float
    server_cpu_per_m: float


class Server:
    """`weir serve` from ``src`` (its PYTHONPATH) with ``extra`` arguments."""

    def __init__(self, data_dir: Path, src: Path, extra: list[str]) -> None:
        env = {**os.environ, "PYTHONPATH": str(src)}
        cmd = [sys.executable, "-m", "weir.cli", "serve", "--data-dir", str(data_dir)]
        self.proc = subprocess.Popen(
            [*cmd, "--listen", "127.0.0.1:0", *extra],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
            env=env,
        )
        self.endpoint = self.console = ""
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if m := re.search(r"weir console on (\S+)", line):
                self.console = m.group(1)
            if m := re.search(r"weir listening on ([^,\s]+)", line):
                self.endpoint = m.group(1)
                break
        if not self.endpoint:
            raise RuntimeError("server did not start")
        stderr = self.proc.stderr
        threading.Thread(target=lambda: [None for _ in stderr], daemon=True).start()

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def look(console: str, stop: threading.Event) -> None:
    """An operator with the console open, refreshing five times as often as the page."""
    paths = ["/live", "/rates", "/topics", "/consumers"]
    while not stop.wait(1.0):
        for path in paths:
            try:
                with urllib.request.urlopen(console + path, timeout=10) as resp:
                    resp.read()
            except OSError:  # the server is stopping (503) or gone
                return


def run_once(setup: str, src: Path, extra: list[str], messages: int, viewer: bool) -> Result:
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        server = Server(Path(tmp), src, extra)
        stop = threading.Event()
        try:
            client = weir.Client(server.endpoint)
            client.create_topic("bench", 1)
            if viewer:
                threading.Thread(target=look, args=(server.console, stop), daemon=True).start()
            cpu0 = server.cpu_seconds()
            payload = os.urandom(SIZE)
            t0 = time.perf_counter()
            with client.writer("bench", producer_id="bench") as w:
                for _ in range(messages):
                    w.write(payload)
            t1 = time.perf_counter()
            got = 0
            for chunk in client.read_range("bench", 0, 0, messages):
                got = chunk.next_offset
            t2 = time.perf_counter()
            cpu = server.cpu_seconds() - cpu0
            assert got >= messages, got
            client.close()
        finally:
            stop.set()
            server.stop()
    return Result(setup, messages / (t1 - t0), messages / (t2 - t1), cpu / messages * 1e6)


async def sample_cost(topics: int) -> tuple[float, float, float, float]:
    """Seconds one sample of the console's history takes: its rates, its lags, and the
    event loop's wait for one step of the lags (median and longest)."""
    from prometheus_client import CollectorRegistry

    from weir.broker.broker import Broker
    from weir.broker.config import BrokerConfig
    from weir.broker.topics import ConsumerConfig
    from weir.console.app import Console
    from weir.metrics import PrometheusObserver, ServerMetrics
    from weir.storage.batch import encode_batch
    from weir.storage.incoming import validate_incoming

    metrics = ServerMetrics()
    metrics.observer = PrometheusObserver(CollectorRegistry())
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        broker = await Broker.open(
            BrokerConfig(data_dir=Path(tmp), retention_interval_s=3600),
            observer=metrics.observer,
        )
        try:
            batch = validate_incoming([encode_batch([b"x" * SIZE])])
            for t in range(topics):
                consumers = [ConsumerConfig("a"), ConsumerConfig("b")]
                await broker.create_topic(f"t{t}", partitions=4, consumers=consumers)
                for p in range(4):
                    await broker.write(f"t{t}", p, batch)
            metrics.broker, metrics.ready = broker, True
            history = Console(metrics).history
            history.sample()
            steps: list[float] = []
            lags = history.lags
            assert lags is not None

            async def timed_lags() -> dict[tuple[str, str], int]:
                # the time between the loop's turns: sleep(0) is where it serves others
                real_sleep = asyncio.sleep
                last = time.perf_counter()

                async def sleep(delay: float) -> None:
                    nonlocal last
                    steps.append(time.perf_counter() - last)
                    await real_sleep(delay)
                    last = time.perf_counter()

                asyncio.sleep = sleep  # type: ignore[assignment]
                try:
                    return await lags()
                finally:
                    asyncio.sleep = real_sleep
                    steps.append(time.perf_counter() - last)

            history.lags = timed_lags
            rounds = 50
            rates = lag_total = 0.0
            for _ in range(rounds):
                t0 = time.perf_counter()
                history.sample()
                t1 = time.perf_counter()
                await history.sample_lags()
                rates += t1 - t0
                lag_total += time.perf_counter() - t1
            return rates / rounds, lag_total / rounds, statistics.median(steps), max(steps)
        finally:
            await broker.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--before-src", type=Path, help="a source tree from before the console")
    ap.add_argument("--topics", type=int, default=250)
    args = ap.parse_args()
    rates, lags, step, longest = asyncio.run(sample_cost(args.topics))
    print(
        f"console sample every 5 s, {args.topics} topics x 4 partitions x 2 consumers: "
        f"rates {rates * 1e3:.2f} ms, lags {lags * 1e3:.2f} ms "
        f"({(rates + lags) / 5 * 100:.2f}% of one core); the loop waits "
        f"{step * 1e3:.2f} ms per step of the lags (longest {longest * 1e3:.2f} ms)"
    )
    here = ROOT / "src"
    http = ["--metrics-listen", "127.0.0.1:0"]
    setups: list[tuple[str, Path, list[str], bool]] = [
        ("no http", here, [], False),
        ("console idle", here, http, False),
        ("console open", here, http, True),
    ]
    if args.before_src:
        setups.append(("before, http", args.before_src, http, False))
    results: dict[str, list[Result]] = {s[0]: [] for s in setups}
    for _ in range(args.reps):  # interleaved, so a noisy neighbour hits every set-up alike
        for name, src, extra, viewer in setups:
            results[name].append(run_once(name, src, extra, args.messages, viewer))
    print(f"{args.messages:,} messages of {SIZE} B, median of {args.reps}")
    print(f"{'set-up':<14} {'write msg/s':>12} {'read msg/s':>12} {'server CPU s/M msgs':>20}")
    for name, rows in results.items():
        print(
            f"{name:<14} {statistics.median(r.write_per_s for r in rows):>12,.0f} "
            f"{statistics.median(r.read_per_s for r in rows):>12,.0f} "
            f"{statistics.median(r.server_cpu_per_m for r in rows):>20.2f}"
        )


if __name__ == "__main__":
    main()
