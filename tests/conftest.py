"""Shared fixtures: a real weir server in a child process on an ephemeral loopback port."""

from __future__ import annotations

import os
import random
import re
import signal
import sys
import tempfile
from collections.abc import Generator, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests import parallel
from weir.listening_process import ListeningProcess
from weir.replication.zkserver import ZooKeeperServer

ROOT = Path(__file__).resolve().parents[1]
_LISTEN = re.compile(r"weir listening on (\S+):(\d+)")
_PULSAR = re.compile(r"weir Pulsar protocol on (pulsar(?:\+ssl)?://\S+)")
_ADMIN = re.compile(r"weir Pulsar admin REST on (\S+)/admin/v2")
_KAFKA = re.compile(r"weir kafka listening on (\S+:\d+)")
_NATIVE_TCP = re.compile(r"weir native TCP on (\S+:\d+)")

# Every server a test starts listens for Pulsar clients and HTTP on ports of its own
# (by default they would share 6650 and 8080); a test that needs a fixed one says so.
os.environ.setdefault("WEIR_PULSAR_LISTEN", "127.0.0.1:0")
os.environ.setdefault("WEIR_HTTP_LISTEN", "127.0.0.1:0")
os.environ.setdefault("WEIR_KAFKA_LISTEN", "127.0.0.1:0")  # and for Kafka (9092)
os.environ.setdefault("WEIR_NATIVE_TCP_LISTEN", "127.0.0.1:0")  # native TCP (2137), when on

# The Python processes the tests start (servers, `weir` commands, Spark's workers, crash
# children: hundreds of them) start from bytecode. With PYTHONDONTWRITEBYTECODE set (some
# shells set it to keep source trees clean) each compiled weir from source again, 0.2-0.5 s
# a process; the bytecode goes to a cache of its own outside the tree instead.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
    os.environ.setdefault(
        "PYTHONPYCACHEPREFIX", str(Path(tempfile.gettempdir()) / "weir-test-pycache")
    )

# One chaos seed for the whole run, drawn here (before xdist starts its workers, which
# inherit it), printed at the end, replayed with WEIR_CHAOS_SEED=... (tests/reliability).
CHAOS_SEED_ENV = "WEIR_CHAOS_SEED"
os.environ[CHAOS_SEED_ENV] = os.environ.get(CHAOS_SEED_ENV) or str(
    random.SystemRandom().randrange(1, 2**31)
)


class ServerProcess(ListeningProcess):
    """`weir serve` as a child process; stop it by PID (SIGTERM), or kill -9 it."""

    stack_dump_signal = signal.SIGUSR1  # `weir serve` prints its stacks on it

    def __init__(self, data_dir: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        super().__init__("weir server", _LISTEN, env=env or {}, cwd=ROOT)
        self.data_dir = data_dir
        self.extra = list(extra)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _found(self, pattern: re.Pattern[str]) -> str:
        for line in reversed(self.log):
            m = pattern.search(line)
            if m:
                return m.group(1)
        raise RuntimeError("the server did not announce it:\n" + "".join(self.log[-10:]))

    @property
    def pulsar_url(self) -> str:
        """The Pulsar service URL of this run of the server."""
        return self._found(_PULSAR)

    @property
    def http_url(self) -> str:
        """The HTTP port's base URL (admin REST, /metrics) of this run of the server."""
        return self._found(_ADMIN)

    @property
    def kafka(self) -> str:
        """bootstrap.servers of this run of the server's Kafka listener."""
        return self._found(_KAFKA)

    @property
    def native_tcp(self) -> str:
        """HOST:PORT of this run of the server's native TCP port (native_tcp.enabled)."""
        return self._found(_NATIVE_TCP)

    @property
    def kafka_port(self) -> int:
        return int(self.kafka.rpartition(":")[2])

    def command(self) -> list[str]:
        listen = f"127.0.0.1:{self.port}"  # the same port again after a restart
        return [
            sys.executable,
            "-m",
            "weir.cli",
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--listen",
            listen,
            *self.extra,
        ]

    def restart(self) -> ServerProcess:
        self.stop()
        return self.start()


@contextmanager
def cluster_servers(
    names: Iterable[str],
    zookeeper_hosts: str,
    root: str,
    tmp_path_factory: pytest.TempPathFactory,
    prefix: str = "broker",
    env: dict[str, str] | None = None,
    broker_env: Mapping[str, Mapping[str, str]] | None = None,
) -> Iterator[dict[str, ServerProcess]]:
    """`weir serve` processes in replicated mode, one per broker id, joined to one cluster
    (a 4 s ZooKeeper session, so a killed broker's partitions move within seconds); every
    one started is stopped at the end. ``env``: more settings for every broker;
    ``broker_env``: more for each broker id (they win over both)."""
    out: dict[str, ServerProcess] = {}
    try:
        for name in names:
            srv = ServerProcess(
                tmp_path_factory.mktemp(f"{prefix}-{name}"),
                env={
                    "WEIR_STORAGE_MODE": "replicated",
                    "WEIR_CLUSTER_ZOOKEEPER": zookeeper_hosts,
                    "WEIR_CLUSTER_ROOT": root,
                    "WEIR_CLUSTER_BROKER_ID": name,
                    "WEIR_CLUSTER_SESSION_TIMEOUT_S": "4",
                    **(env or {}),
                    **(broker_env or {}).get(name, {}),
                },
            )
            out[name] = srv
            srv.start()
        yield out
    finally:
        for srv in out.values():
            srv.stop()


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for tests that do not restart it (each uses its own topics)."""
    srv = ServerProcess(tmp_path_factory.mktemp("shared-server"))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """A server of the test's own, for tests that restart or kill it. When the test
    fails, the report shows the server's stderr over all its restarts (the end of it)."""
    srv = ServerProcess(tmp_path / "data")
    srv.start()
    yield srv
    if went_wrong(request):
        sys.stderr.write(f"--- {srv.name} stderr (last 300 lines, every restart) ---\n")
        sys.stderr.writelines(srv.log[-300:])
    if os.environ.get("COVERAGE_PROCESS_CONFIG"):
        srv.stop()  # under `make coverage`: a killed server would not save its coverage data
    else:
        srv.kill()


_topic_counter = iter(range(1, 10**9))


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)[:60]
    return f"{base}_{next(_topic_counter)}"


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A standalone ZooKeeper on an ephemeral loopback port, shared by the session's tests
    (replication and cluster tests use roots of their own)."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    yield server
    server.stop()


_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Keeps each phase's report of a test, so a fixture's teardown can tell it failed."""
    report = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


def went_wrong(request: pytest.FixtureRequest) -> bool:
    """Whether the test using this fixture (or a fixture after it) failed so far: asked in
    the fixture's teardown."""
    reports = request.node.stash.get(_REPORTS, {})
    return any(r.failed for r in reports.values())


# ------------------------------------------------------------------ parallel runs (xdist)
# `make test` runs pytest-xdist workers; tests/parallel.py says which tests run together.


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` (soaks, GB-sized runs) run only with WEIR_SOAK=1 (`make soak`);
    the Spark tests stay in one xdist group, so do the ZooKeeper ones; the order is tests/parallel.py's."""
    soak = os.environ.get("WEIR_SOAK") == "1"
    skip = pytest.mark.skip(reason="long mode: run with `make soak` (WEIR_SOAK=1)")
    for item in items:
        if not soak and "slow" in item.keywords:
            item.add_marker(skip)
        if (
            "spark" in getattr(item, "fixturenames", ())
            and parallel.group_of(item.nodeid) != "spark"
        ):
            raise pytest.UsageError(
                f"{item.nodeid} uses the SparkSession but is not in the spark group of "
                "tests/parallel.py: two workers would start two sessions"
            )
        if (
            "zookeeper" in getattr(item, "fixturenames", ())
            and parallel.group_of(item.nodeid) != "replication"
        ):
            raise pytest.UsageError(
                f"{item.nodeid} uses the session's ZooKeeper but is not in the replication "
                "group of tests/parallel.py: two workers would start two ZooKeepers"
            )
    items.sort(key=lambda item: parallel.rank(item.nodeid))  # stable: file order otherwise


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") not in ("loadscope", "loadgroup"):
        return None  # another --dist asked for: xdist's own
    return parallel.make_scheduler(config, log)


# ------------------------------------------------------------------ the chaos summary
_CHAOS: list[tuple[str, dict[str, str]]] = []
# seconds per xdist group (setup + call + teardown) and per worker: the run's critical path
_GROUP_S: dict[str, float] = {}
_WORKER_S: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Chaos columns (tests/reliability/conftest.py record_chaos), from this process or
    from an xdist worker; the time of each group and worker."""
    if report.when == "call":
        _CHAOS.extend(value for name, value in report.user_properties if name == "chaos")
    group = parallel.group_of(report.nodeid)
    _GROUP_S[group] = _GROUP_S.get(group, 0.0) + report.duration
    node = getattr(report, "node", None)  # xdist: the worker that ran it
    worker = getattr(getattr(node, "gateway", None), "id", "main")
    _WORKER_S[worker] = _WORKER_S.get(worker, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if len(_WORKER_S) > 1:  # a parallel run: where its wall time went
        terminalreporter.section("time per worker and the longest groups (tests/parallel.py)")
        terminalreporter.write_line(
            "workers: " + ", ".join(f"{w} {s:.0f} s" for w, s in sorted(_WORKER_S.items()))
        )
        longest = sorted(_GROUP_S.items(), key=lambda gs: -gs[1])[:12]
        for group, seconds in longest:
            terminalreporter.write_line(f"{seconds:8.1f} s  {group}")
    if not _CHAOS:
        return
    from tests.reliability.chaos import summary_table

    seed = os.environ[CHAOS_SEED_ENV]
    terminalreporter.section("chaos")
    terminalreporter.write_line(f"chaos seed {seed} (replay: {CHAOS_SEED_ENV}={seed})")
    terminalreporter.write_line(summary_table(_CHAOS))
