"""`weir cluster up` run as a user runs it: a ZooKeeper, bookies and brokers as child
processes on loopback; the native SDK writes and reads through the endpoints it prints;
SIGTERM leaves no child behind; a missing Java or a taken port is one clear error line."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import weir
from weir.replication.local_cluster import stable_port

TOPIC = "public/default/up"


def cluster_up(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "weir.cli", "cluster", "up", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


class Lines:
    """The process's stderr lines, each awaited to a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.q: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []

        def pump() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self.q.put(line.rstrip("\n"))
            self.q.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def until(self, prefix: str, timeout: float = 180) -> str:
        deadline = time.monotonic() + timeout
        while True:
            line = self.q.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, f"stderr ended before {prefix!r}:\n" + "\n".join(self.seen)
            self.seen.append(line)
            if line.startswith(prefix):
                return line

    def rest(self, timeout: float = 30) -> list[str]:
        out = []
        while (line := self.q.get(timeout=timeout)) is not None:
            out.append(line)
        return out


def alive(pid: int, marker: str) -> bool:
    """Whether ``pid`` is still a (non-zombie) process started for this test (its command
    line names the test's directory; a PID reused by another process does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    state = stat.rpartition(")")[2].split()[0]
    return state != "Z" and marker.encode() in cmdline


def test_cluster_up_serves_clients_and_stops_every_child(tmp_path: Path) -> None:
    data = tmp_path / "cluster"
    proc = cluster_up("--brokers", "2", "--bookies", "3", "--data-dir", str(data))
    pids: dict[str, int] = {}
    try:
        lines = Lines(proc)
        head = lines.until("cluster up: zookeeper 127.0.0.1:")
        assert len(head.split(" bookies ")[1].split()) == 3
        natives = [
            re.search(r"native (\S+)", lines.until(f"broker-{i}: native ")).group(1)  # type: ignore[union-attr]
            for i in range(2)
        ]
        pid_line = lines.until("pids: ")
        for part in pid_line.removeprefix("pids: ").split(";")[0].split(", "):
            name, pid = part.split()
            pids[name] = int(pid)
        assert sorted(pids) == [
            "bookie-0",
            "bookie-1",
            "bookie-2",
            "broker-0",
            "broker-1",
            "zookeeper",
        ]
        assert all(alive(p, str(data)) for p in pids.values())
        hint = lines.until("try: ")
        assert natives[0] in hint

        # every broker joined: a topic made through one is written through the other
        # (which follows the owner) and read back through the first
        with weir.Client(natives[0]) as admin:
            admin.create_topic(TOPIC, partitions=1)
        with (
            weir.Client(natives[1]) as client,
            client.writer(TOPIC, producer_id="up", partition=0, delivery_timeout=60) as writer,
        ):
            for i in range(10):
                writer.write(b"m%d" % i)
            writer.flush(timeout=60)
        got: list[bytes] = []
        with weir.Client(natives[0]) as client:
            reader = client.reader(TOPIC)
            try:
                deadline = time.monotonic() + 60
                while len(got) < 10 and time.monotonic() < deadline:
                    msg = reader.receive_message(timeout=1.0)
                    if msg is not None:
                        got.append(msg.data)
            finally:
                reader.close()
        assert got == [b"m%d" % i for i in range(10)]

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 0
        assert lines.rest()[-1] == "cluster stopped"
        assert [name for name, p in pids.items() if alive(p, str(data))] == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        for pid in pids.values():  # only if the test failed midway: by PID, ours only
            if alive(pid, str(data)):
                os.kill(pid, signal.SIGKILL)


def _free_run(n: int) -> int:
    """A port P with P..P+n-1 all free now."""
    for _ in range(100):
        base = stable_port()
        if base + n > 65535:
            continue
        try:
            socks = []
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no run of free ports")


@pytest.mark.parametrize("fault", ["java missing", "port taken"])
def test_a_missing_zookeeper_or_a_taken_port_is_one_clear_error(tmp_path: Path, fault: str) -> None:
    data = tmp_path / "cluster"
    args = ["--brokers", "1", "--bookies", "1", "--data-dir", str(data)]
    held = socket.socket()
    try:
        if fault == "java missing":
            (tmp_path / "bin").mkdir()  # a PATH without java, so ZooKeeper cannot run
            proc = cluster_up(*args, env={"PATH": str(tmp_path / "bin")})
            expected = "error: java is not on PATH: ZooKeeper needs Java 17"
        else:
            # ports: zookeeper base, bookie-0 base+1, broker-0 native base+2, kafka base+3
            base = _free_run(6)
            held.bind(("127.0.0.1", base + 3))
            held.listen()
            proc = cluster_up(*args, "--base-port", str(base))
            expected = f"error: port {base + 3} (broker-0 kafka) on 127.0.0.1 is taken"
        _, err = proc.communicate(timeout=120)
    finally:
        held.close()
    assert proc.returncode == 1
    assert err.startswith(expected), err
    assert len(err.splitlines()) == 1, err  # one line
    pids = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]
    assert [p for p in pids if alive(p, str(data))] == []  # nothing was left running


def test_a_supervisor_killed_with_sigkill_leaves_no_orphan(tmp_path: Path) -> None:
    data = tmp_path / "cluster"
    proc = cluster_up("--brokers", "0", "--bookies", "1", "--data-dir", str(data))
    pids: list[int] = []
    try:
        lines = Lines(proc)
        pid_line = lines.until("pids: ")
        pids = [int(part.split()[1]) for part in pid_line[6:].split(";")[0].split(", ")]
        assert len(pids) == 2 and all(alive(p, str(data)) for p in pids)
        proc.kill()  # no chance to stop anything: the children learn it from the kernel
        proc.wait(30)
        deadline = time.monotonic() + 60
        while any(alive(p, str(data)) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)  # polling the process table to a deadline
        assert [p for p in pids if alive(p, str(data))] == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        for pid in pids:
            if alive(pid, str(data)):
                os.kill(pid, signal.SIGKILL)
