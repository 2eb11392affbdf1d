"""Shared fixtures: a real weir server in a child process on an ephemeral loopback port."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_LISTEN = re.compile(r"weir listening on (\S+):(\d+)")
_KAFKA = re.compile(r"weir kafka listening on (\S+):(\d+)")


class ServerProcess:
    """`weir serve` as a child process; stop it by PID (SIGTERM), or kill -9 it."""

    def __init__(self, data_dir: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.extra = list(extra)
        self.env = env
        self.port = 0
        self.kafka_port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.log: list[str] = []

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def kafka(self) -> str:
        """bootstrap.servers of the server's Kafka listener."""
        return f"127.0.0.1:{self.kafka_port}"

    def start(self, timeout: float = 60) -> ServerProcess:
        listen = f"127.0.0.1:{self.port}"  # the same port again after a restart
        cmd = [
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
        # an ephemeral Kafka port (the same again after a restart), never the shared 9092
        kafka = {"WEIR_KAFKA_LISTEN": f"127.0.0.1:{self.kafka_port}"}
        env = {**os.environ, **kafka, **(self.env or {})}
        self.proc = subprocess.Popen(
            cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT, env=env
        )
        ready = threading.Event()
        proc = self.proc

        def pump() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self.log.append(line)
                k = _KAFKA.search(line)
                if k:
                    self.kafka_port = int(k.group(2))
                m = _LISTEN.search(line)
                if m and not ready.is_set():
                    self.port = int(m.group(2))
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(timeout) or self.proc.poll() is not None:
            self.kill()
            raise RuntimeError("weir server did not start:\n" + "".join(self.log[-30:]))
        return self

    def stop(self, timeout: float = 30) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        code = self.proc.returncode
        self.proc = None
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.proc = None

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


# Every `weir serve` a test starts (directly or through the README, the CLI tests...)
# takes an ephemeral Kafka port unless the test says otherwise: 9092 is shared by every
# test run on the machine.
os.environ.setdefault("WEIR_KAFKA_LISTEN", "127.0.0.1:0")

_topic_counter = iter(range(1, 10**9))


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)[:60]
    return f"{base}_{next(_topic_counter)}"
