"""`weir serve` as an operator runs it: config file, environment, signals, refusals to start."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.conftest import Weir, metrics_url, one_line_error
from tests.conftest import ROOT, ServerProcess
from weir.listening_process import ListeningProcess


def serve_once(
    *args: str, env: dict[str, str] | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """`weir serve` that is expected to refuse to start (it must exit by itself)."""
    return subprocess.run(
        [sys.executable, "-m", "weir.cli", "serve", *args],
        capture_output=True,
        text=True,
        env=Weir().env(env),
        cwd=ROOT,
        timeout=timeout,
    )


def test_sigterm_stops_cleanly_and_a_second_server_is_refused(
    server: ServerProcess, tmp_path: Path
) -> None:
    weir = Weir(server.endpoint)
    assert weir("topic", "create", "kept").code == 0
    assert weir("write", "kept", input="a\nb\n").code == 0
    assert server.proc is not None
    locked = serve_once("--data-dir", str(server.data_dir), "--listen", "127.0.0.1:0")
    assert locked.returncode == 1
    holder = f"in use by another weir server (pid {server.proc.pid})"
    assert holder in locked.stderr.splitlines()[-1]

    assert server.stop() == 0
    log = "".join(server.log)
    assert "SIGTERM received: shutting down" in log
    assert "broker closed" in log
    server.start()
    assert Weir(server.endpoint)("read", "kept").text == "a\nb\n"


def test_an_unusable_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    broken = serve_once("--data-dir", str(not_a_dir), "--listen", "127.0.0.1:0")
    assert broken.returncode == 1
    assert f"cannot open data directory {not_a_dir}" in broken.stderr.splitlines()[-1]


def test_bad_config_is_one_line_naming_the_key_and_exit_2(tmp_path: Path) -> None:
    def check(
        toml: str | None, mentioned: list[str], env: dict[str, str] | None = None, *args: str
    ) -> None:
        extra = list(args)
        if toml is not None:
            path = tmp_path / "weir.toml"
            path.write_text(toml)
            extra += ["--config", str(path)]
        result = serve_once("--data-dir", str(tmp_path / "data"), *extra, env=env)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: config: "), result.stderr
        for word in mentioned:
            assert word in lines[0], (word, lines[0])

    check('[storage]\nmap_size = "lots"\n', ["storage.map_size", '"lots"', "weir.toml"])
    check("[storage]\nmapsize = 1\n", ["storage.mapsize", "unknown key", "did you mean map_size"])
    check("[stroage]\n", ["stroage", "unknown section"])
    check("[server]\nlisten = 2136\n", ["server.listen", "2136"])
    check("[log\n", ["not valid TOML", "line 1"])
    check(None, ["log.level", '"loud"', "WEIR_LOG_LEVEL"], {"WEIR_LOG_LEVEL": "loud"})
    check(None, ["WEIR_STORAGE_MAPSIZE", "unknown"], {"WEIR_STORAGE_MAPSIZE": "1"})
    check(None, ["server.listen", "--listen"], None, "--listen", "nowhere")
    check('[storage]\nlow_watermark = "16MiB"\n', ["storage.low_watermark", "max_blob_size"])
    assert not (tmp_path / "data").exists()  # nothing was started


def test_config_file_env_and_json_logs(tmp_path: Path) -> None:
    config = tmp_path / "weir.toml"
    config.write_text(
        '[topics]\ndefault_partitions = 3\ndefault_retention_ms = "2h"\n'
        '[metrics]\nenabled = true\nlisten = "127.0.0.1:0"\n'
        "[log]\njson = false\n"
    )
    srv = ServerProcess(tmp_path / "data", "--config", str(config), env={"WEIR_LOG_JSON": "true"})
    srv.start()
    try:
        created = Weir(srv.endpoint)("topic", "create", "configured", "--json").json()
        assert (created["partitions"], created["retention_ms"]) == (3, 2 * 3600 * 1000)
        assert metrics_url(srv).startswith("http://127.0.0.1:")
    finally:
        assert srv.stop() == 0
    events = [json.loads(line) for line in srv.log]  # the environment beat the file: all JSON
    assert {"ts", "level", "logger", "msg"} <= events[0].keys()
    assert any(e["msg"].startswith("weir listening on ") for e in events)
    created = [e for e in events if e["msg"] == "topic created"]  # the creation, as an event
    assert [(e["topic"], e["partitions"]) for e in created] == [("configured", 3)]


def test_config_default_is_a_valid_file_and_check_reports_sources(tmp_path: Path) -> None:
    weir = Weir()
    default = weir("config", "default")
    assert default.code == 0
    path = tmp_path / "weir.toml"
    path.write_bytes(default.out)
    checked = weir(
        "config",
        "check",
        "--config",
        str(path),
        "--json",
        env={"WEIR_SERVER_LISTEN": "127.0.0.1:9999"},
    )
    doc = checked.json()
    assert doc["server.listen"] == {"value": "127.0.0.1:9999", "source": "WEIR_SERVER_LISTEN"}
    assert doc["storage.map_size"] == {"value": 1 << 40, "source": str(path)}
    assert doc["topics.default_retention_ms"]["value"] == 7 * 24 * 3600 * 1000
    bad = weir("config", "check", "--config", str(tmp_path / "missing.toml"))
    assert bad.code == 2
    assert "does not exist" in one_line_error(bad)


def test_a_taken_port_is_one_line_and_leaves_the_data_alone(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A start that cannot listen must not open the data (each open raises the generation)."""
    other = ServerProcess(tmp_path / "other", "--log-json")
    other.start()
    assert other.stop() == 0  # generation 1
    taken = f"127.0.0.1:{server.port}"
    for _ in range(2):
        refused = serve_once("--data-dir", str(other.data_dir), "--listen", taken)
        assert refused.returncode == 1
        # one line, no raw gRPC log lines (E1123 ... add_port.cc), no "broker open"
        assert refused.stderr.splitlines() == [
            f"error: cannot listen on {taken}: address already in use "
            "(is another server running there?)"
        ]
    fresh = tmp_path / "never-made"
    serve_once("--data-dir", str(fresh), "--listen", taken)
    assert not fresh.exists()
    other.log.clear()
    other.start()
    try:
        opened = [json.loads(x) for x in other.log if '"broker open"' in x]
        assert [e["generation"] for e in opened] == [2]  # not 4: the refused starts opened nothing
    finally:
        other.stop()


def _signalled(server: ServerProcess, sig: int, marker: str) -> str:
    """Send ``sig`` and return what the server wrote after it, once a line holds ``marker``
    (or 30 s passed)."""
    assert server.proc is not None
    before = len(server.log)
    os.kill(server.proc.pid, sig)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(marker in line for line in server.log[before:]):
        time.sleep(0.05)
    time.sleep(0.2)  # the rest of the dump's lines
    return "".join(server.log[before:])


def test_sigusr1_prints_every_threads_stack_and_the_server_keeps_serving(
    server: ServerProcess,
) -> None:
    """What an operator (or a test whose server hangs) sends to see where it is."""
    assert server.proc is not None
    weir = Weir(server.endpoint)
    dump = _signalled(server, signal.SIGUSR1, "Current thread")
    assert weir("topic", "create", "after-dump").code == 0  # still serving
    assert "Current thread" in dump or "Thread 0x" in dump
    assert 'File "' in dump
    tasks = _signalled(server, signal.SIGUSR2, "asyncio tasks")
    assert "asyncio tasks" in tasks and "Stack for <Task" in tasks
    assert weir("topic", "create", "after-tasks").code == 0  # still serving
    assert server.proc.poll() is None


class _NeverListens(ListeningProcess):
    """A child that starts, can dump its stacks, and never says it listens."""

    stack_dump_signal = signal.SIGUSR1

    def __init__(self) -> None:
        super().__init__("never-ready", re.compile(r"listening on (\S+):(\d+)"))

    def command(self) -> list[str]:
        code = (
            "import faulthandler, signal, sys, time\n"
            "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
            "print('starting', file=sys.stderr, flush=True)\n"
            "def stuck_opening_the_data():\n"
            "    time.sleep(600)\n"
            "stuck_opening_the_data()\n"
        )
        return [sys.executable, "-c", code]


def test_a_start_that_hangs_fails_with_the_stacks_of_the_hung_process() -> None:
    proc = _NeverListens()
    with pytest.raises(RuntimeError) as err:
        proc.start(timeout=3)
    assert "never-ready did not start" in str(err.value)
    assert "stuck_opening_the_data" in str(err.value)  # where it hung, from its stack dump
    assert proc.proc is None  # killed, not left behind


def test_starting_a_server_that_runs_already_is_refused_and_it_keeps_running(
    server: ServerProcess,
) -> None:
    """A second start would replace the process handle and leave the first process running
    with nobody to stop it (a cluster test's broker once outlived its run so)."""
    running = server.proc
    assert running is not None
    with pytest.raises(RuntimeError, match="running already"):
        server.start()
    assert server.proc is running and running.poll() is None
    assert Weir(server.endpoint)("topic", "create", "still-one").code == 0
