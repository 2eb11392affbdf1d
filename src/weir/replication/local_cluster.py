"""Bookies and a ZooKeeper as child processes on loopback: for tests, benchmarks and development.

`LocalCluster` starts one standalone ZooKeeper and N bookies, each in its own
directory under ``workdir``, and stops them by PID. Not for production: every
process binds 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from weir.replication.registry import DEFAULT_ROOT
from weir.replication.zkserver import ZooKeeperServer

_LISTEN = re.compile(r"bookie listening on (\S+):(\d+)")


class BookieProcess:
    """``python -m weir.replication.bookie`` as a child process; SIGTERM or SIGKILL by PID.

    A restart reuses the data directory and the port, so the bookie keeps its id
    (``host:port``) and the ensembles that name it stay valid.
    """

    def __init__(self, data_dir: Path, zk_hosts: str, zk_root: str, *extra: str) -> None:
        self.data_dir = data_dir
        self.extra = list(extra)  # more options of the bookie command
        self.zk_hosts = zk_hosts
        self.zk_root = zk_root
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.log: list[str] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> BookieProcess:
        cmd = [
            sys.executable,
            "-m",
            "weir.replication.bookie",
            "--data-dir",
            str(self.data_dir),
            "--listen",
            f"127.0.0.1:{self.port}",
            "--zk",
            self.zk_hosts,
            "--zk-root",
            self.zk_root,
            *self.extra,
        ]
        self.proc = subprocess.Popen(
            cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
        )
        ready = threading.Event()
        proc = self.proc

        def pump() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self.log.append(line)
                m = _LISTEN.search(line)
                if m and not ready.is_set():
                    self.port = int(m.group(2))
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(timeout) or self.proc.poll() is not None:
            self.kill()
            raise RuntimeError("bookie did not start:\n" + "".join(self.log[-30:]))
        return self

    def stop(self, timeout: float = 30) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)  # a paused bookie must run to handle SIGTERM
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout)

    def pause(self) -> None:
        """SIGSTOP: the process holds its connections but answers nothing."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)


class LocalCluster:
    """A ZooKeeper and ``bookies`` bookie processes under ``workdir``."""

    def __init__(
        self, workdir: str | os.PathLike[str], bookies: int = 3, root: str = DEFAULT_ROOT
    ) -> None:
        self.workdir = Path(workdir)
        self.root = root
        self.zookeeper = ZooKeeperServer(self.workdir / "zookeeper")
        self.bookies: list[BookieProcess] = []
        self.count = bookies

    def start(self) -> LocalCluster:
        try:
            self.zookeeper.start()
            for i in range(self.count):
                b = BookieProcess(self.workdir / f"bookie-{i}", self.zookeeper.hosts, self.root)
                self.bookies.append(b)
                b.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for b in self.bookies:
            b.stop()
        self.zookeeper.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
