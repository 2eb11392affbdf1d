"""The ZooKeeper the replication tests run on: a real server, started and stopped by PID."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError

from weir.errors import UnavailableError
from weir.replication.zkserver import ZooKeeperServer


def test_versioned_compare_and_set(kazoo: KazooClient, zk_root: str) -> None:
    """Ledger metadata relies on it: a write naming an old version is refused."""
    kazoo.create(f"{zk_root}/meta", b"v0", makepath=True)
    _, stat = kazoo.get(f"{zk_root}/meta")
    kazoo.set(f"{zk_root}/meta", b"v1", version=stat.version)
    with pytest.raises(BadVersionError):
        kazoo.set(f"{zk_root}/meta", b"v2", version=stat.version)
    assert kazoo.get(f"{zk_root}/meta")[0] == b"v1"


def test_ephemeral_node_goes_with_its_session(
    zookeeper: ZooKeeperServer, kazoo: KazooClient, zk_root: str
) -> None:
    """Bookies register as ephemeral nodes: a closed session removes them."""
    other = KazooClient(hosts=zookeeper.hosts)
    other.start(timeout=30)
    other.create(f"{zk_root}/available/b1", b"", ephemeral=True, makepath=True)
    assert kazoo.get_children(f"{zk_root}/available") == ["b1"]
    other.stop()
    other.close()
    assert kazoo.get_children(f"{zk_root}/available") == []


def test_own_server_starts_and_stops_by_pid(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path / "zk").start()
    assert server.proc is not None
    pid = server.proc.pid
    client = KazooClient(hosts=server.hosts)
    client.start(timeout=30)
    client.create("/x", b"1")
    client.stop()
    client.close()
    server.stop()
    assert server.proc is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    # restarted on its port and data dir, it still has the data
    server.start()
    client = KazooClient(hosts=server.hosts)
    client.start(timeout=30)
    assert client.get("/x")[0] == b"1"
    client.stop()
    client.close()
    server.stop()


def test_missing_java_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UnavailableError, match="java is not on PATH"):
        ZooKeeperServer(tmp_path / "zk").start()
