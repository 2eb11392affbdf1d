"""`weir cluster up`: a whole development cluster on loopback as child processes.

A ZooKeeper (or the one ``--zookeeper`` names), N bookies and N brokers (``weir serve``
in replicated mode), each with its own directory under ``--data-dir``. The ports are
given to every child (from ``--base-port``, or free ones picked once and kept in
``DIR/cluster.json`` so a restart in the same directory finds its bookies and brokers
at the same addresses). The supervisor waits until every broker has joined, prints
the endpoints, reports a child that dies, and on SIGTERM / Ctrl-C stops every child
it started, by PID: brokers, then bookies, then ZooKeeper. Children run in sessions
of their own (Ctrl-C reaches only the supervisor, which stops them in order) and get
SIGTERM if the supervisor itself dies. Not for production: everything binds 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from weir.broker_process import BrokerPorts, BrokerProcess
from weir.cli.common import CliError
from weir.errors import WeirError
from weir.replication.local_cluster import BookieProcess, stable_port
from weir.replication.zkserver import ZooKeeperServer

PORTS_FILE = "cluster.json"
JOIN_TIMEOUT = 120.0  # seconds for every broker to register with all its fronts
STOP_TIMEOUT = 30.0  # seconds a child has to stop on SIGTERM before SIGKILL

P = TypeVar("P", BookieProcess, BrokerProcess)


@dataclass
class Ports:
    """Every loopback port of the cluster (zookeeper 0: an external one)."""

    zookeeper: int
    bookies: list[int]
    brokers: list[BrokerPorts]

    def named(self) -> Iterator[tuple[str, int]]:
        if self.zookeeper:
            yield "zookeeper", self.zookeeper
        for i, p in enumerate(self.bookies):
            yield f"bookie-{i}", p
        for i, bp in enumerate(self.brokers):
            for front, p in bp.all().items():
                yield f"broker-{i} {front}", p

    def to_json(self) -> dict[str, Any]:
        return {
            "zookeeper": self.zookeeper,
            "bookies": self.bookies,
            "brokers": [b.all() for b in self.brokers],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Ports:
        return cls(
            int(data["zookeeper"]),
            [int(p) for p in data["bookies"]],
            [BrokerPorts(**b) for b in data["brokers"]],
        )


def plan_ports(
    data_dir: Path, brokers: int, bookies: int, base_port: int, own_zookeeper: bool
) -> Ports:
    """The cluster's ports: consecutive from ``base_port``; else those this directory's
    last run used (same counts); else free ones."""
    if base_port:
        it = iter(range(base_port, 65536))
        try:
            zk = next(it) if own_zookeeper else 0
            bk = [next(it) for _ in range(bookies)]
            br = [BrokerPorts(next(it), next(it), next(it), next(it)) for _ in range(brokers)]
        except StopIteration:
            raise CliError(f"--base-port {base_port} leaves too few ports below 65536", 2) from None
        return Ports(zk, bk, br)
    saved = data_dir / PORTS_FILE
    if saved.exists():
        try:
            ports = Ports.from_json(json.loads(saved.read_text()))
        except (ValueError, KeyError, TypeError) as err:
            raise CliError(f"{saved} is not readable ({err}): remove it", 2) from None
        if (bool(ports.zookeeper), len(ports.bookies), len(ports.brokers)) == (
            own_zookeeper,
            bookies,
            brokers,
        ):
            return ports
    chosen: set[int] = set()

    def free() -> int:
        while True:
            p = stable_port()
            if p and p not in chosen:
                chosen.add(p)
                return p

    return Ports(
        free() if own_zookeeper else 0,
        [free() for _ in range(bookies)],
        [BrokerPorts(free(), free(), free(), free()) for _ in range(brokers)],
    )


def check_free(ports: Ports) -> None:
    """CliError naming the first port another process holds (nothing is started yet).
    SO_REUSEADDR, as the servers bind: a port left in TIME_WAIT by the last run is free."""
    for name, port in ports.named():
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError as err:
                raise CliError(
                    f"port {port} ({name}) on 127.0.0.1 is taken ({err.strerror}): stop what "
                    "holds it, or choose other ports with --base-port"
                ) from None


class _Interrupted(Exception):
    """SIGTERM / SIGINT while the cluster was starting."""


@dataclass
class Child:
    """A started child: its name, its process and where its log is."""

    name: str
    proc: subprocess.Popen[Any]
    log: Path


@dataclass
class Supervisor:
    """Starts the children, watches them, stops them by PID."""

    data_dir: Path
    brokers: int
    bookies: int
    root: str
    zookeeper: str  # hosts of an external ZooKeeper, or "" to start one
    ports: Ports
    children: list[Child] = field(default_factory=list)
    zk_hosts: str = ""
    bookie_addresses: list[str] = field(default_factory=list)
    broker_procs: list[BrokerProcess] = field(default_factory=list)

    def say(self, line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def start(self) -> None:
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        zk_hosts = self.zookeeper
        if not zk_hosts:
            zk = ZooKeeperServer(self.data_dir / "zookeeper", port=self.ports.zookeeper)
            zk.detach = True
            try:
                zk.start()
            finally:
                if zk.proc is not None:
                    self.children.append(Child("zookeeper", zk.proc, zk.workdir / "zookeeper.log"))
            zk_hosts = zk.hosts
        self.zk_hosts = zk_hosts
        bookies = []
        for i, port in enumerate(self.ports.bookies):
            b = BookieProcess(self.data_dir / f"bookie-{i}", zk_hosts, self.root)
            b.port = port
            bookies.append(self._launch(f"bookie-{i}", b, logs))
        for b in bookies:
            self._ready(b)
        self.bookie_addresses = [b.address for b in bookies]
        quorum = min(3, self.bookies)
        cluster_env = {
            "WEIR_CLUSTER_ZOOKEEPER": zk_hosts,
            "WEIR_CLUSTER_ROOT": self.root,
            "WEIR_CLUSTER_ENSEMBLE_SIZE": str(quorum),
            "WEIR_CLUSTER_WRITE_QUORUM": str(quorum),
            "WEIR_CLUSTER_ACK_QUORUM": str(min(2, quorum)),
        }
        for i, bp in enumerate(self.ports.brokers):
            broker = BrokerProcess(
                f"broker-{i}", self.data_dir / f"broker-{i}", bp, cluster_env=cluster_env
            )
            self.broker_procs.append(self._launch(f"broker-{i}", broker, logs))
        for br in self.broker_procs:
            self._ready(br)
        self._await_joined()

    def _launch(self, name: str, p: P, logs: Path) -> P:
        p.log_file = logs / f"{name}.log"
        p.detach = True
        p.launch()  # from this (the main) thread: see detached_popen_args
        assert p.proc is not None
        self.children.append(Child(name, p.proc, p.log_file))
        return p

    def _ready(self, p: BookieProcess | BrokerProcess) -> None:
        try:
            p.wait_ready(JOIN_TIMEOUT)
        except RuntimeError:
            tail = "".join(p.log[-5:]).rstrip()
            raise CliError(
                f"{p.name} did not start (log {p.log_file}):\n{tail}"
                if tail
                else f"{p.name} did not start (log {p.log_file})"
            ) from None

    def _await_joined(self) -> None:
        """Every broker registered in ZooKeeper with its native, Kafka and Pulsar
        endpoints published (a broker publishes the last two once those fronts listen)."""
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError

        from weir.broker.cluster.claims import brokers_path

        client = KazooClient(hosts=self.zk_hosts, timeout=10)
        client.start(timeout=30)
        try:
            base = brokers_path(self.root)
            want = {f"broker-{i}" for i in range(self.brokers)}
            deadline = time.monotonic() + JOIN_TIMEOUT
            while True:
                joined = set()
                for b in want:
                    try:
                        data, _ = client.get(f"{base}/{b}")
                    except NoNodeError:
                        continue
                    endpoints = json.loads(data or b"{}").get("endpoints", {})
                    if {"native", "kafka", "pulsar"} <= set(endpoints):
                        joined.add(b)
                if joined == want:
                    return
                dead = self.dead()
                if dead:
                    raise CliError(self._death(dead[0]))
                if time.monotonic() > deadline:
                    raise CliError(
                        f"{', '.join(sorted(want - joined))} did not join the cluster in "
                        f"{JOIN_TIMEOUT:.0f} s (logs in {self.data_dir / 'logs'})"
                    )
                time.sleep(0.2)  # polling ZooKeeper to a deadline
        finally:
            client.stop()
            client.close()

    def dead(self) -> list[Child]:
        return [c for c in self.children if c.proc.poll() is not None]

    def _death(self, c: Child) -> str:
        code = c.proc.returncode
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited ({code})"
        return f"{c.name} (pid {c.proc.pid}) {how}; its log: {c.log}"

    def banner(self) -> None:
        self.say(
            f"cluster up: zookeeper {self.zk_hosts}, root {self.root}, bookies "
            + " ".join(self.bookie_addresses)
        )
        for b in self.broker_procs:
            e = b.endpoints
            self.say(
                f"{b.broker_id}: native {e['native']}  kafka {e['kafka']}  "
                f"pulsar {e['pulsar']}  http {e['http']}"
            )
        self.say(
            "pids: "
            + ", ".join(f"{c.name} {c.proc.pid}" for c in self.children)
            + f"; data and logs in {self.data_dir}"
        )
        if self.broker_procs:
            first = self.broker_procs[0].endpoints["native"]
            self.say(
                f"try: weir topic create demo --partitions 3 --endpoint {first}; "
                f"weir.Client('{first}') (any broker: clients follow each partition's owner)"
            )

    def watch(self, stop_requested: Any) -> int:
        """Until a stop is asked: report each child that dies (the others keep running;
        without ZooKeeper nothing can, so its death stops the cluster). Returns the
        exit status."""
        reported: set[str] = set()
        while not stop_requested():
            for c in self.dead():
                if c.name in reported:
                    continue
                reported.add(c.name)
                if c.name == "zookeeper":
                    self.say(f"cluster up: {self._death(c)}: stopping the cluster")
                    return 1
                self.say(f"cluster up: {self._death(c)}; the others keep running")
            time.sleep(0.2)  # polling the children's state
        return 0

    def stop(self) -> None:
        """SIGTERM by PID (brokers, then bookies, then ZooKeeper; each group at once),
        SIGKILL for whatever outlives STOP_TIMEOUT."""
        for group in ("broker-", "bookie-", "zookeeper"):
            procs = [c.proc for c in self.children if c.name.startswith(group)]
            for p in procs:
                if p.poll() is None:
                    os.kill(p.pid, signal.SIGCONT)
                    os.kill(p.pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT
            for p in procs:
                try:
                    p.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait(STOP_TIMEOUT)


@contextmanager
def _signals(stop: list[bool], starting: list[bool]) -> Iterator[None]:
    """SIGTERM / SIGINT: abort a start in progress (_Interrupted), else ask the watch to
    stop; the previous handlers come back afterwards."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop[0] = True
        if starting[0]:
            starting[0] = False  # one interruption; the cleanup itself is not interrupted
            raise _Interrupted(signal.Signals(signum).name)

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def cluster_up(
    data_dir: Path, brokers: int, bookies: int, root: str, zookeeper: str, base_port: int
) -> int:
    """Run the cluster until SIGTERM / Ctrl-C; the exit status."""
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    ports = plan_ports(data_dir, brokers, bookies, base_port, own_zookeeper=not zookeeper)
    check_free(ports)
    (data_dir / PORTS_FILE).write_text(json.dumps(ports.to_json(), indent=1) + "\n")
    sup = Supervisor(data_dir, brokers, bookies, root, zookeeper, ports)
    stop, starting = [False], [True]
    status = 0
    with _signals(stop, starting):
        try:
            try:
                sup.start()
                starting[0] = False
            except WeirError as err:
                raise CliError(err.message) from None
            sup.banner()
            status = sup.watch(lambda: stop[0])
        except _Interrupted:
            sup.say("cluster up: interrupted while starting")
            status = 130
        finally:
            starting[0] = False
            sup.stop()
            if sup.children:
                sup.say("cluster stopped")
    return status
