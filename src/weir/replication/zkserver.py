"""A standalone ZooKeeper on loopback, for development and tests (not for production).

Runs Debian's ZooKeeper jar (``/usr/share/java/zookeeper.jar``, Java from PATH)
with its own ``zoo.cfg`` and data directory, and stops it by PID. ZooKeeper cannot
bind port 0, so a free port is picked first and the start is retried on a clash.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from weir.errors import UnavailableError
from weir.listening_process import detached_popen_args, kill_process, terminate_process

ZOOKEEPER_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ruok(port: int) -> bool:
    """ZooKeeper's own health probe: ``ruok`` answered by ``imok``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


class ZooKeeperServer:
    """One ZooKeeper process in ``workdir`` (zoo.cfg, data/, zookeeper.log)."""

    def __init__(
        self, workdir: str | os.PathLike[str], *, tick_ms: int = 200, port: int = 0
    ) -> None:
        self.workdir = Path(workdir)
        self.tick_ms = tick_ms
        self.port = port  # 0: a free one
        self.fixed_port = port != 0  # a given port: a start that cannot bind it fails
        self.detach = False  # see weir.listening_process.detached_popen_args
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        """The connect string for a client (kazoo ``hosts``)."""
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60, attempts: int = 5) -> ZooKeeperServer:
        java = shutil.which("java")
        if java is None:
            raise UnavailableError("java is not on PATH: ZooKeeper needs Java 17")
        missing = [j for j in ZOOKEEPER_JARS[:1] if not Path(j).exists()]
        if missing:
            raise UnavailableError(f"{missing[0]} not found: install Debian's zookeeper package")
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.fixed_port:
            attempts = 1
        for _ in range(attempts):
            port = self.port or _free_port()
            if self._start_on(java, port, timeout):
                self.port = port
                return self
            if self.fixed_port:
                raise UnavailableError(
                    f"ZooKeeper did not start on 127.0.0.1:{port}; "
                    f"see {self.workdir / 'zookeeper.log'}"
                )
            self.port = 0  # the port was taken meanwhile: pick another
        raise UnavailableError(f"ZooKeeper did not start; see {self.workdir / 'zookeeper.log'}")

    def _start_on(self, java: str, port: int, timeout: float) -> bool:
        cfg = self.workdir / "zoo.cfg"
        cfg.write_text(
            f"tickTime={self.tick_ms}\n"
            f"dataDir={self.workdir / 'data'}\n"
            f"clientPort={port}\n"
            "clientPortAddress=127.0.0.1\n"
            "maxClientCnxns=0\n"
            # the session timeout a client may ask for: 2..20 ticks
            f"minSessionTimeout={2 * self.tick_ms}\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr\n"
        )
        classpath = ":".join(j for j in ZOOKEEPER_JARS if Path(j).exists())
        with open(self.workdir / "zookeeper.log", "ab") as log:
            self.proc = subprocess.Popen(
                [java, "-Xmx256m", "-cp", classpath, MAIN_CLASS, str(cfg)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                **detached_popen_args(self.detach),
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.proc = None
                return False
            if _ruok(port):
                return True
            time.sleep(0.05)  # polling the readiness probe, not synchronising on time
        self.kill()
        return False

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM by PID, then SIGKILL if it does not go."""
        proc, self.proc = self.proc, None
        if proc is not None:
            terminate_process(proc, timeout)

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            kill_process(proc)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
