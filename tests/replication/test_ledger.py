"""The ledger client on a real ZooKeeper and three bookie processes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from weir.errors import BadRequestError
from weir.replication.bookie.garbage_collector import deleted_ledgers
from weir.replication.bookie.ledger_storage import LmdbLedgerStorage
from weir.replication.errors import (
    LedgerClosedError,
    LedgerFencedError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    ReadBeyondLastConfirmedError,
)
from weir.replication.ledger import LedgerClient, LedgerState
from weir.replication.ledger.bookie_client import BookieClient
from weir.replication.local_cluster import BookieProcess
from weir.replication.zkserver import ZooKeeperServer


@pytest.fixture
async def client(
    zookeeper: ZooKeeperServer, zk_root: str, bookies: list[BookieProcess]
) -> AsyncIterator[LedgerClient]:
    async with LedgerClient(zookeeper.hosts, root=zk_root) as c:
        yield c


def stored_entries(bookie: BookieProcess, ledger: int) -> list[int]:
    """Entry ids a (stopped) bookie holds for a ledger, read straight from its LMDB."""
    storage = LmdbLedgerStorage(bookie.data_dir)
    try:
        return storage.entry_ids(ledger)
    finally:
        storage.close()


async def test_write_close_read(client: LedgerClient) -> None:
    lh = await client.create_ledger(3, 3, 2)
    ids = await asyncio.gather(*(lh.add_async(b"entry-%d" % i) for i in range(100)))
    assert ids == list(range(100))
    assert lh.last_add_confirmed == 99
    await lh.close()
    with pytest.raises(LedgerClosedError):
        await lh.add(b"after close")
    rh = await client.open_ledger(lh.ledger_id)
    assert rh.closed and rh.last_add_confirmed == 99
    assert await rh.read_range(0, 99) == [b"entry-%d" % i for i in range(100)]
    with pytest.raises(ReadBeyondLastConfirmedError, match="past the last add confirmed"):
        await rh.read(100)
    md, _ = await client.store.read(lh.ledger_id)
    assert md.state == LedgerState.CLOSED and md.last_entry_id == 99
    assert lh.ledger_id in await client.list_ledgers()


async def test_reads_of_an_open_ledger_stop_at_the_lac(client: LedgerClient) -> None:
    lh = await client.create_ledger(3, 3, 2)
    for i in range(5):
        await lh.add(b"%d" % i)
    rh = await client.open_ledger(lh.ledger_id)
    # bookies know the LAC the last add carried: entry 3 (entry 4's own ack came after)
    assert rh.last_add_confirmed == 3
    assert await rh.read(3) == b"3"
    with pytest.raises(ReadBeyondLastConfirmedError):
        await rh.read(4)
    await lh.add(b"5")
    assert await rh.read(4) == b"4"  # a read past the LAC asks the bookies again


async def test_striping_when_the_ensemble_is_wider_than_the_write_quorum(
    client: LedgerClient, bookies: list[BookieProcess]
) -> None:
    lh = await client.create_ledger(3, 2, 2)
    for i in range(9):
        await lh.add(b"%d" % i)
    await lh.close()
    ensemble = lh.metadata.ensembles[0].bookies
    for b in bookies:
        b.stop()
    for pos, address in enumerate(ensemble):
        b = next(b for b in bookies if b.address == address)
        # entry e is on bookies e % 3 and (e + 1) % 3 of the ensemble
        expected = [e for e in range(9) if pos in (e % 3, (e + 1) % 3)]
        assert stored_entries(b, lh.ledger_id) == expected


async def test_bad_quorums_unknown_ledgers_and_too_few_bookies(client: LedgerClient) -> None:
    with pytest.raises(BadRequestError, match="E >= WQ >= AQ"):
        await client.create_ledger(2, 3, 2)
    with pytest.raises(NotEnoughBookiesError, match="needs as many available bookies"):
        await client.create_ledger(4, 3, 2)
    with pytest.raises(NoSuchLedgerError):
        await client.open_ledger(987654)
    with pytest.raises(NoSuchLedgerError):
        await client.open_ledger(987654, recover=True)
    lh = await client.create_ledger(3, 3, 2)
    with pytest.raises(BadRequestError, match="close or recover"):
        await client.delete_ledger(lh.ledger_id)
    await lh.close()
    await client.delete_ledger(lh.ledger_id)
    with pytest.raises(NoSuchLedgerError):
        await client.open_ledger(lh.ledger_id)


async def test_recovery_closes_at_the_last_acknowledged_entry_and_fences_the_writer(
    client: LedgerClient, zookeeper: ZooKeeperServer, zk_root: str
) -> None:
    lh = await client.create_ledger(3, 3, 2)
    for i in range(20):
        await lh.add(b"%d" % i)
    async with LedgerClient(zookeeper.hosts, root=zk_root) as other:
        rh = await other.open_ledger(lh.ledger_id, recover=True)
        assert rh.closed and rh.last_add_confirmed == 19  # entry 19: acked, LAC on bookies 18
        assert await rh.read(19) == b"19"
    with pytest.raises(LedgerFencedError, match="fenced"):
        await lh.add(b"too late")
    with pytest.raises(LedgerFencedError):
        await lh.close()
    assert lh.last_add_confirmed == 19
    # recovering a closed ledger changes nothing
    md = await client.recover(lh.ledger_id)
    assert md.state == LedgerState.CLOSED and md.last_entry_id == 19


async def test_an_empty_ledger_recovers_empty(client: LedgerClient) -> None:
    lh = await client.create_ledger(3, 2, 2)
    md = await client.recover(lh.ledger_id)
    assert md.state == LedgerState.CLOSED and md.last_entry_id == -1
    with pytest.raises(LedgerFencedError):
        await lh.add(b"x")


async def test_a_tailing_reader_long_polls_the_lac(client: LedgerClient) -> None:
    lh = await client.create_ledger(3, 2, 2)
    await lh.add(b"0")
    rh = await client.open_ledger(lh.ledger_id)
    assert rh.last_add_confirmed == -1
    tail = asyncio.ensure_future(rh.wait_lac(after=-1, timeout=30))
    await lh.add(b"1")  # carries LAC 0
    assert await tail == 0
    assert await rh.read(0) == b"0"
    assert await rh.wait_lac(after=0, timeout=0.05) == 0  # nothing new: the timeout
    await lh.close()


def test_which_ledgers_a_listing_proves_deleted() -> None:
    assert deleted_ledgers([1, 2, 3, 7, 9], {2, 7}) == [1, 3]  # 9: maybe newer than the listing
    assert deleted_ledgers([1, 2], set()) == []  # nothing listed proves nothing


@pytest.mark.parametrize("bookie_args", [("--gc-interval", "0.1")], indirect=True)
async def test_bookies_garbage_collect_deleted_ledgers(
    client: LedgerClient, bookies: list[BookieProcess]
) -> None:
    handles = [await client.create_ledger(3, 3, 2) for _ in range(3)]
    for lh in handles:
        for i in range(10):
            await lh.add(b"%d" % i)
        await lh.close()
    doomed, kept = handles[0].ledger_id, handles[1].ledger_id
    await client.delete_ledger(doomed)
    for b in bookies:
        bc = BookieClient(b.address)
        try:
            for _ in range(400):  # a collection every 0.1 s
                try:
                    await bc.read_lac(doomed)
                except NoSuchLedgerError:
                    break
                await asyncio.sleep(0.05)
            with pytest.raises(NoSuchLedgerError):
                await bc.read(doomed, 0)
            assert (await bc.read(kept, 9)).payload == b"9"
        finally:
            await bc.close()
    for b in bookies:
        b.stop()
        assert stored_entries(b, doomed) == []
        assert stored_entries(b, kept) == list(range(10))
