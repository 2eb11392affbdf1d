"""What the web console costs producers and consumers: nothing when nobody looks.

    python bench/console_bench.py [--messages 300000] [--reps 3] [--before-src DIR] [--auth]

Starts `weir serve` (a child process, fresh data directory, ephemeral ports) in each of
these set-ups, in turn and ``--reps`` times, and runs the same load on each: one SDK
producer writes N messages of 100 B, then one consumer reads them back.

- ``no http``: no HTTP endpoint at all (the default);
- ``console idle``: the HTTP endpoint with the console on, nobody looking;
- ``console open``: the same, with a client loading the Overview's live panel and rates
  and the Topics, Consumers, Subscriptions and one Subscription page once a second (five
  times what one open tab does);
- ``before, http`` (with ``--before-src``, e.g. a checkout of main): the HTTP endpoint
  of that source, i.e. before the console existed.

With ``--auth`` every server runs with authentication on (a superuser, anonymous access
off): the producer and consumer log in, and the viewer logs in to the console once and
sends its session cookie, so every page view pays the session and grant checks. Every
set-up has a subscription ``watch`` on the topic (from the start), so its pages show one.

Prints the median write and read rates and the server's CPU seconds per million
messages for each. On a busy machine these move by tens of percent from run to run, so
the bench first measures, in process and without that noise, the one thing the console
adds while nobody looks, the time of one sample of the rate history (every 5 s), and
what an open page adds, the time to build and render the Topics, Consumers and
Subscriptions pages, on a broker with ``--topics`` topics of 4 partitions and 2
consumers each.
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
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import weir

ROOT = Path(__file__).resolve().parents[1]
SIZE = 100
USER, PASSWORD = "bench", "bench-password"
AUTH_ENV = {
    "WEIR_AUTH_USERS": f"{USER}:{PASSWORD}",
    "WEIR_AUTH_ALLOW_ANONYMOUS": "false",
    "WEIR_AUTH_SUPERUSERS": USER,
}


@dataclass
class Result:
    setup: str
    write_per_s: float
    read_per_s: float
    server_cpu_per_m: float
    page_views: int  # pages the viewer was served (200) during the run


class Server:
    """`weir serve` from ``src`` (its PYTHONPATH) with ``extra`` arguments."""

    def __init__(self, data_dir: Path, src: Path, extra: list[str], auth: bool) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": str(src),
            # the other fronts off, so set-ups differ only by the HTTP port and its console
            "WEIR_KAFKA_ENABLED": "false",
            "WEIR_PULSAR_ENABLED": "false",
            "WEIR_HTTP_ENABLED": "false",
            **(AUTH_ENV if auth else {}),
        }
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


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def login(console: str) -> str:
    """The session cookie of a console login ("" when the console has no login)."""
    form = urllib.parse.urlencode({"user": USER, "password": PASSWORD}).encode()
    try:
        urllib.request.build_opener(_NoRedirect).open(console + "/login", form, timeout=30)
    except urllib.error.HTTPError as err:  # the 303 after a login
        return (err.headers.get("Set-Cookie") or "").split(";", 1)[0]
    return ""


def look(console: str, stop: threading.Event, auth: bool, served: list[int]) -> None:
    """An operator with the console open, refreshing five times as often as the page."""
    cookie = login(console) if auth else ""
    paths = [
        "/live",
        "/rates",
        "/topics",
        "/consumers",
        "/subscriptions",
        "/subscription?topic=bench&name=watch",
    ]
    while not stop.is_set():
        for path in paths:
            req = urllib.request.Request(console + path, headers={"Cookie": cookie})
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    resp.read()
                    if "/login" not in resp.geturl():  # not sent to the login page
                        served.append(resp.status)
            except urllib.error.HTTPError as err:
                if err.code == 404:  # a page an older console does not have
                    continue
                return  # the server is stopping (503)
            except OSError:  # gone
                return
        stop.wait(1.0)


def run_once(
    setup: str, src: Path, extra: list[str], messages: int, viewer: bool, auth: bool
) -> Result:
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        server = Server(Path(tmp), src, extra, auth)
        stop = threading.Event()
        served: list[int] = []
        try:
            client = weir.Client(server.endpoint, credentials=(USER, PASSWORD) if auth else None)
            client.create_topic("bench", 1)
            client.create_subscription("bench", "watch", initial_position="earliest")
            if viewer:
                threading.Thread(
                    target=look, args=(server.console, stop, auth, served), daemon=True
                ).start()
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
    return Result(
        setup, messages / (t1 - t0), messages / (t2 - t1), cpu / messages * 1e6, len(served)
    )


async def sample_cost(topics: int) -> tuple[float, float, float, float, dict[str, float]]:
    """Seconds one sample of the console's history takes: its rates, its lags, and the
    event loop's wait for one step of the lags (median and longest); and the seconds to
    build and render each listed page (what one open tab costs every 5 s)."""
    from prometheus_client import CollectorRegistry

    from weir.broker.broker import Broker
    from weir.broker.config import BrokerConfig
    from weir.broker.topics import ConsumerConfig
    from weir.console import subscription_views, views
    from weir.console.app import PREFIX, Console
    from weir.metrics import PrometheusObserver, ServerMetrics
    from weir.storage.batch_encoding import encode_batch
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

            def build(name: str) -> tuple[str, dict[str, Any]]:
                if name == "topics":
                    rows = views.topic_rows(broker)
                    sparks = {r.name: views.sparkline([]) for r in rows}
                    return "topics.html", {
                        "rows": rows,
                        "sparks": sparks,
                        "q": "",
                        "may_create": True,
                    }
                if name == "consumers":
                    return "consumers.html", {"rows": views.all_consumers(broker)}
                rows_s = subscription_views.subscription_rows(broker, None, bool)
                return "subscriptions.html", {"rows": rows_s, "topic": ""}

            console = Console(metrics)
            page_s = {}
            for name in ("topics", "consumers", "subscriptions"):
                t0 = time.perf_counter()
                for _ in range(5):
                    template, values = build(name)
                    console.templates.get_template(template).render(
                        prefix=PREFIX, user="", csrf="", note="", page=name, **values
                    )
                page_s[name] = (time.perf_counter() - t0) / 5
            return (
                rates / rounds,
                lag_total / rounds,
                statistics.median(steps),
                max(steps),
                page_s,
            )
        finally:
            await broker.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--before-src", type=Path, help="a source tree from before the console")
    ap.add_argument("--topics", type=int, default=250)
    ap.add_argument("--auth", action="store_true", help="authentication on, the viewer logged in")
    args = ap.parse_args()
    print(f"load average before: {Path('/proc/loadavg').read_text().strip()}")
    rates, lags, step, longest, pages = asyncio.run(sample_cost(args.topics))
    print(
        f"console sample every 5 s, {args.topics} topics x 4 partitions x 2 consumers: "
        f"rates {rates * 1e3:.2f} ms, lags {lags * 1e3:.2f} ms "
        f"({(rates + lags) / 5 * 100:.2f}% of one core); the loop waits "
        f"{step * 1e3:.2f} ms per step of the lags (longest {longest * 1e3:.2f} ms)"
    )
    print(
        "one page view (built and rendered): "
        + ", ".join(f"{name} {s * 1e3:.1f} ms" for name, s in pages.items())
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
            results[name].append(run_once(name, src, extra, args.messages, viewer, args.auth))
    auth = ", authentication on" if args.auth else ""
    print(f"{args.messages:,} messages of {SIZE} B, median of {args.reps}{auth}")
    print(f"load average after: {Path('/proc/loadavg').read_text().strip()}")
    print(
        f"{'set-up':<14} {'write msg/s':>12} {'read msg/s':>12} {'server CPU s/M msgs':>20} "
        f"{'pages served':>12}"
    )
    for name, rows in results.items():
        print(
            f"{name:<14} {statistics.median(r.write_per_s for r in rows):>12,.0f} "
            f"{statistics.median(r.read_per_s for r in rows):>12,.0f} "
            f"{statistics.median(r.server_cpu_per_m for r in rows):>20.2f} "
            f"{sum(r.page_views for r in rows):>12}"
        )


if __name__ == "__main__":
    main()
