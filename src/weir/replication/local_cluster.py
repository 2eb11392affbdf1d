"""Bookies and a ZooKeeper as child processes on loopback: for tests, benchmarks and development.

`LocalCluster` starts one standalone ZooKeeper and N bookies, each in its own
directory under ``workdir``, and stops them by PID. Not for production: every
process binds 127.0.0.1.
"""

from __future__ import annotations

import os
import random
import re
import socket
import sys
from pathlib import Path

from weir.listening_process import ListeningProcess
from weir.replication.registry import DEFAULT_ROOT
from weir.replication.zkserver import ZooKeeperServer

_LISTEN = re.compile(r"bookie listening on (\S+):(\d+)")


def stable_port(host: str = "127.0.0.1") -> int:
    """A free port below the kernel's ephemeral range. A bookie restarts on its port (the
    port is its id), and a port from that range, given up by a killed bookie, may be
    handed meanwhile to another process's outgoing connection."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(10_000, max(10_001, ephemeral_low))
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    return 0  # let the kernel choose: a restart may then find its port taken


class BookieProcess(ListeningProcess):
    """``python -m weir.replication.bookie`` as a child process; SIGTERM or SIGKILL by PID.

    A restart reuses the data directory and the port, so the bookie keeps its id
    (``host:port``) and the ensembles that name it stay valid.
    """

    def __init__(self, data_dir: Path, zk_hosts: str, zk_root: str, *extra: str) -> None:
        super().__init__("bookie", _LISTEN)
        self.data_dir = data_dir
        self.extra = list(extra)  # more options of the bookie command
        self.zk_hosts = zk_hosts
        self.zk_root = zk_root
        self.port = stable_port()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
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
