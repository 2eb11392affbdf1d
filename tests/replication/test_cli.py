"""`weir bookie`, `weir ledger` and `weir cluster up`, run as a user runs them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from weir.replication.ledger import LedgerClient
from weir.replication.local_cluster import BookieProcess
from weir.replication.zkserver import ZooKeeperServer


def weir(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "weir.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


async def test_bookie_and_ledger_commands(
    zookeeper: ZooKeeperServer, zk_root: str, bookies: list[BookieProcess]
) -> None:
    zk = ["--zk", zookeeper.hosts, "--zk-root", zk_root]
    listed = weir("bookie", "list", *zk, "--json")
    assert listed.returncode == 0, listed.stderr
    assert sorted(b["bookie"] for b in json.loads(listed.stdout)) == sorted(
        b.address for b in bookies
    )

    async with LedgerClient(zookeeper.hosts, root=zk_root) as client:
        lh = await client.create_ledger(3, 3, 2)
        for i in range(5):
            await lh.add(b"%d" % i)
        # the writer stops here without closing: an operator recovers the ledger

        out = weir("ledger", "list", "--zk-root", zk_root, env={"WEIR_ZK": zookeeper.hosts})
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == [str(lh.ledger_id), "OPEN", "last", "entry", "-"]

        out = weir("ledger", "recover", str(lh.ledger_id), *zk)
        assert out.returncode == 0, out.stderr
        assert f"ledger {lh.ledger_id}: CLOSED, E=3 WQ=3 AQ=2, last entry 4" in out.stdout

        out = weir("ledger", "describe", str(lh.ledger_id), *zk, "--json")
        info = json.loads(out.stdout)
        assert (info["state"], info["last_entry_id"]) == ("CLOSED", 4)
        assert sorted(info["ensembles"][0]["bookies"]) == sorted(b.address for b in bookies)

    out = weir("cluster", "audit", *zk)  # every bookie is there: nothing to copy
    assert out.returncode == 0, out.stderr
    assert out.stdout == "every closed ledger has its bookies\n"

    out = weir("bookie", "decommission", bookies[0].address, *zk)
    assert out.returncode == 1
    assert out.stderr == f"error: bookie {bookies[0].address} is still registered: stop it first\n"

    out = weir("ledger", "describe", "424242", *zk)
    assert out.returncode == 1
    assert out.stderr == "error: no ledger 424242\n"


def _port_open(hosts: str) -> bool:
    host, _, port = hosts.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def test_cluster_up_starts_and_stops_everything(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "weir.cli",
            "cluster",
            "up",
            "--dir",
            str(tmp_path),
            "--bookies",
            "2",
            "--brokers",
            "0",
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("cluster up: zookeeper 127.0.0.1:"), line
        words = line.split()
        zk_hosts, bookie_addresses = words[3].rstrip(","), words[7:]
        assert len(bookie_addresses) == 2
        assert all(_port_open(a) for a in [zk_hosts, *bookie_addresses])
        listed = weir("bookie", "list", "--zk", zk_hosts)
        assert sorted(listed.stdout.split()) == sorted(bookie_addresses)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert "cluster stopped" in proc.stderr.read()
        assert not any(_port_open(a) for a in [zk_hosts, *bookie_addresses])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


@pytest.mark.parametrize(
    "command", [["bookie", "--help"], ["ledger", "--help"], ["cluster", "--help"]]
)
def test_help(command: list[str]) -> None:
    out = weir(*command)
    assert out.returncode == 0 and "Usage" in out.stdout


@pytest.mark.parametrize("bookie_count", [4], indirect=True)
async def test_decommission_moves_a_stopped_bookies_share(
    zookeeper: ZooKeeperServer, zk_root: str, bookies: list[BookieProcess]
) -> None:
    zk = ["--zk", zookeeper.hosts, "--zk-root", zk_root]
    async with LedgerClient(zookeeper.hosts, root=zk_root) as client:
        lh = await client.create_ledger(3, 3, 2, bookies=[b.address for b in bookies[:3]])
        for i in range(20):
            await lh.add(b"%d" % i)
        await lh.close()
        gone = bookies[0]
        gone.stop()  # a clean stop unregisters it at once
        out = weir("bookie", "decommission", gone.address, *zk)
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == [
            f"ledger {lh.ledger_id}: re-replicated the entries of {gone.address}",
            f"bookie {gone.address} decommissioned (1 ledger moved)",
        ]
        rh = await client.open_ledger(lh.ledger_id)
        assert set(rh.metadata.ensembles[0].bookies) == {b.address for b in bookies[1:]}
        assert await rh.read_range(0, 19) == [b"%d" % i for i in range(20)]
