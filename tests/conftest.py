"""Shared fixtures: a real weir server in a child process on an ephemeral loopback port."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from weir.listening_process import ListeningProcess

ROOT = Path(__file__).resolve().parents[1]
_LISTEN = re.compile(r"weir listening on (\S+):(\d+)")
_PULSAR = re.compile(r"weir Pulsar protocol on (pulsar(?:\+ssl)?://\S+)")
_ADMIN = re.compile(r"weir Pulsar admin REST on (\S+)/admin/v2")

# Every server a test starts listens for Pulsar clients and HTTP on ports of its own
# (by default they would share 6650 and 8080); a test that needs a fixed one says so.
os.environ.setdefault("WEIR_PULSAR_LISTEN", "127.0.0.1:0")
os.environ.setdefault("WEIR_HTTP_LISTEN", "127.0.0.1:0")


class ServerProcess(ListeningProcess):
    """`weir serve` as a child process; stop it by PID (SIGTERM), or kill -9 it."""

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


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for tests that do not restart it (each uses its own topics)."""
    srv = ServerProcess(tmp_path_factory.mktemp("shared-server"))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server of the test's own, for tests that restart or kill it."""
    srv = ServerProcess(tmp_path / "data")
    srv.start()
    yield srv
    if os.environ.get("COVERAGE_PROCESS_CONFIG"):
        srv.stop()  # under `make coverage`: a killed server would not save its coverage data
    else:
        srv.kill()


_topic_counter = iter(range(1, 10**9))


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)[:60]
    return f"{base}_{next(_topic_counter)}"
