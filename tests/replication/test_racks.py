"""Racks with real bookie processes: an ensemble change under load replaces a bookie with
one on a rack the rest of the ensemble does not use (`placement.choose_replacement`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from weir.replication.ledger import LedgerClient
from weir.replication.local_cluster import BookieProcess
from weir.replication.zkserver import ZooKeeperServer

from .conftest import running
from .test_faults import History, check_closed_ledger, write

RACKS = ("a", "b", "c", "a", "b")  # bookie i's rack


@pytest.fixture
def racked_bookies(
    zookeeper: ZooKeeperServer, zk_root: str, tmp_path: Path
) -> Iterator[list[BookieProcess]]:
    procs = [
        BookieProcess(tmp_path / f"bookie-{i}", zookeeper.hosts, zk_root, "--rack", rack)
        for i, rack in enumerate(RACKS)
    ]
    with running(procs):
        yield procs


async def test_an_ensemble_change_keeps_the_ensemble_on_distinct_racks(
    zookeeper: ZooKeeperServer, zk_root: str, racked_bookies: list[BookieProcess]
) -> None:
    """Ensemble (a, b, c) of bookies 0-2; bookie 1 (rack b) killed under load. Free are
    bookie 3 (rack a, which bookie 0 uses) and bookie 4 (rack b): the writer takes 4."""
    b = racked_bookies
    async with LedgerClient(zookeeper.hosts, root=zk_root) as client:
        lh = await client.create_ledger(3, 3, 2, bookies=[x.address for x in b[:3]])
        history = History()
        kill = asyncio.Event()
        writer = asyncio.create_task(
            write(lh, history, 400, triggers=[(lambda: len(history.acked) >= 100, kill)])
        )
        await kill.wait()
        b[1].kill()
        await writer
        assert not history.errors, history.errors[:3]
        await lh.close()
        md = (await client.open_ledger(lh.ledger_id)).metadata
        assert [f.bookies for f in md.ensembles] == [
            (b[0].address, b[1].address, b[2].address),
            (b[0].address, b[4].address, b[2].address),
        ]
        b[1].start()
        await check_closed_ledger(client, lh.ledger_id, history, b)
