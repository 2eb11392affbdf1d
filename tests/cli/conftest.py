"""Run `weir` the way a person does: a child process, its exit status, stdout and stderr."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, ServerProcess
from weir.client.sync import Client

BIN = Path(sys.executable).parent
_METRICS = re.compile(r"weir metrics on (http://\S+?)/metrics")


@dataclass
class Result:
    code: int
    out: bytes
    err: str

    @property
    def text(self) -> str:
        return self.out.decode()

    def json(self) -> Any:
        assert self.code == 0, self.err
        return json.loads(self.out)

    def json_lines(self) -> list[Any]:
        return [json.loads(line) for line in self.out.splitlines()]


class Weir:
    """The `weir` command aimed at one server (through WEIR_ENDPOINT, as a user would set it).

    The timeouts only stop a command that hangs: on a loaded machine (several xdist workers,
    `make coverage`) a command that starts in 1 s may take 30.
    """

    def __init__(self, endpoint: str = "") -> None:
        self.endpoint = endpoint

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WEIR_")}
        # a server started here gets Pulsar and HTTP ports of its own, not 6650 / 8080
        env["WEIR_PULSAR_LISTEN"] = env["WEIR_HTTP_LISTEN"] = "127.0.0.1:0"
        env["WEIR_KAFKA_LISTEN"] = "127.0.0.1:0"  # never the machine's shared 9092
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        env["COLUMNS"] = "100"
        if self.endpoint:
            env["WEIR_ENDPOINT"] = self.endpoint
        return {**env, **(extra or {})}

    def __call__(
        self,
        *args: str,
        input: bytes | str | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 120,
    ) -> Result:
        data = input.encode() if isinstance(input, str) else input
        proc = subprocess.run(
            [sys.executable, "-m", "weir.cli", *args],
            input=data if data is not None else b"",
            capture_output=True,
            env=self.env(env),
            cwd=ROOT,
            timeout=timeout,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr.decode())

    def many(self, *commands: list[str], timeout: float = 180) -> list[Result]:
        """Several commands at once (independent ones: the test takes less time)."""
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "weir.cli", *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.env(),
                cwd=ROOT,
            )
            for args in commands
        ]
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            results.append(Result(proc.returncode, out, err.decode()))
        return results

    def shell(self, command: str, timeout: float = 120) -> Result:
        """A command line as typed at a bash prompt (pipes and quotes included)."""
        proc = subprocess.run(
            ["bash", "-c", command],
            capture_output=True,
            env=self.env(),
            cwd=ROOT,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr.decode())

    def popen(self, *args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "weir.cli", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env(),
            cwd=ROOT,
        )


def one_line_error(result: Result) -> str:
    """The error a failed command printed: exactly one line, starting with "error: "."""
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("error: "), result.err
    return lines[0]


def metrics_url(server: ServerProcess) -> str:
    for line in server.log:
        m = _METRICS.search(line)
        if m:
            return m.group(1)
    raise AssertionError("no metrics line in the server's log:\n" + "".join(server.log))


@pytest.fixture
def weir(shared_server: ServerProcess) -> Weir:
    return Weir(shared_server.endpoint)


@pytest.fixture(scope="session")
def sdk(shared_server: ServerProcess) -> Iterator[Client]:
    """The Python SDK on the shared server: quick setup for tests about something else."""
    client = Client(shared_server.endpoint)
    yield client
    client.close()


@pytest.fixture(scope="module")
def metrics_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server of its own with the metrics endpoint on an ephemeral loopback port."""
    srv = ServerProcess(tmp_path_factory.mktemp("metrics"), "--metrics-listen", "127.0.0.1:0")
    srv.start()
    yield srv
    srv.stop()
