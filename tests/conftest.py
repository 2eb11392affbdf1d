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


class ServerProcess(ListeningProcess):
    """`weir serve` as a child process; stop it by PID (SIGTERM), or kill -9 it."""

    def __init__(self, data_dir: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        super().__init__("weir server", _LISTEN, env=env or {}, cwd=ROOT)
        self.data_dir = data_dir
        self.extra = list(extra)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

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
