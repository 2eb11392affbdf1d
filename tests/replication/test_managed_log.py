"""The managed log on a real ZooKeeper and real bookie processes.

One ZooKeeper root and three bookies serve the whole module (each test uses logs
of its own names); the tests that stop bookies restart them before they end.
Safety claims are judged on what each owner saw acknowledged: every
acknowledged append is in the log at its offset with its bytes, and an owner
replaced by another acknowledges nothing the new owner does not find.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from weir.errors import CommitFailedError, WeirError
from weir.replication.errors import (
    ManagedLogFencedError,
    NoSuchLedgerError,
    StaleClaimError,
)
from weir.replication.ledger import LedgerClient
from weir.replication.local_cluster import BookieProcess
from weir.replication.managed_log import (
    LogEntry,
    ManagedLog,
    ManagedLogConfig,
    Position,
)
from weir.replication.managed_log.metadata import ManagedLogStore
from weir.replication.zkserver import ZooKeeperServer

SMALL = ManagedLogConfig(max_entries_per_ledger=5)
_names = itertools.count()


@pytest.fixture
def client(shared_client: LedgerClient) -> LedgerClient:
    return shared_client


@pytest.fixture
def name() -> str:
    return f"tenant/ns/topic-{next(_names)}/0"


async def second_client(zookeeper: ZooKeeperServer, root: str) -> LedgerClient:
    return await LedgerClient(zookeeper.hosts, root=root, request_timeout=5.0).start()


def payloads(entries: list[LogEntry]) -> list[bytes]:
    return [bytes(e.payload) for e in entries]


async def read_all(mlog: ManagedLog, start: int = 0) -> dict[int, bytes]:
    """Offset -> payload of every entry from ``start`` (entries of one offset each)."""
    out: dict[int, bytes] = {}
    offset = start
    while offset < mlog.end_offset:
        entries = await mlog.read(offset, 1 << 16)
        for e in entries:
            for o in range(e.first_offset, e.end_offset):
                out[o] = bytes(e.payload)
        offset = entries[-1].end_offset
    return out


async def test_appends_roll_over_and_read_across_ledgers(client: LedgerClient, name: str) -> None:
    mlog = await ManagedLog.open(client, name, SMALL)
    assert (mlog.start_offset, mlog.end_offset, mlog.generation) == (0, 0, 1)
    # entries of 3 offsets, and a state entry (count 0) every fourth
    results = []
    for i in range(23):
        count = 0 if i % 4 == 3 else 3
        results.append(await mlog.append(b"e%d" % i, count))
    assert [r.first_offset for r in results[:5]] == [0, 3, 6, 9, 9]
    assert mlog.end_offset == 3 * 18
    assert len(mlog.ledgers) == 5  # 5 entries per ledger: 4 closed + the open one
    assert [li.first_offset for li in mlog.ledgers] == [0, 12, 24, 36, 45]
    assert [r.position.entry for r in results[:7]] == [0, 1, 2, 3, 4, 0, 1]
    # reads by offset skip the state entries; a read inside an entry returns that entry
    got = await mlog.read(4, 1 << 20)
    assert payloads(got)[:3] == [b"e1", b"e2", b"e4"]
    assert got[0].first_offset == 3
    assert [e.first_offset for e in got] == [3 * k for k in range(1, 18)]
    assert payloads(await mlog.read(50, 1 << 20)) == [b"e21", b"e22"]
    assert await mlog.read(54, 1 << 20) == []
    assert payloads(await mlog.read(0, 1, to_offset=3)) == [b"e0"]  # at least one entry
    # a scan replays every entry, state entries included, from a position on
    scanned = [e async for e in mlog.scan(results[6].position)]
    assert payloads(scanned) == [b"e%d" % i for i in range(7, 23)]
    await mlog.close()
    # a reader opening later reads the same through the bookies (no cache)
    other = await ManagedLog.open(client, name, SMALL)
    assert other.recovered_ledgers == 0  # closed cleanly: nothing to recover
    assert other.generation == 2 and other.end_offset == 54
    got = await other.read(20, 1 << 20)
    assert payloads(got)[0] == b"e8" and got[0].first_offset == 18
    assert other.cache.misses > 0
    await other.close()


async def test_a_clean_handover_continues_at_the_end(client: LedgerClient, name: str) -> None:
    first = await ManagedLog.open(client, name, SMALL, owner="a")
    for i in range(7):
        await first.append(b"a%d" % i, 1)
    await first.close()
    with pytest.raises(WeirError):
        await first.append(b"late", 1)
    second = await ManagedLog.open(client, name, SMALL, owner="b")
    assert second.end_offset == 7 and second.generation == 2
    assert (await second.append(b"b0", 1)).first_offset == 7
    assert await read_all(second) == {**{i: b"a%d" % i for i in range(7)}, 7: b"b0"}
    await second.close()


async def test_a_crashed_owner_is_recovered_at_what_it_acknowledged(
    client: LedgerClient, name: str
) -> None:
    first = await ManagedLog.open(client, name, SMALL)
    acked = [await first.append(b"x%d" % i, 2) for i in range(8)]
    await first.abandon()  # no close: the last ledger is left open, as after kill -9
    second = await ManagedLog.open(client, name, SMALL)
    assert second.recovered_ledgers == 1
    assert second.end_offset == acked[-1].first_offset + 2 == 16
    data = await read_all(second)
    assert [data[2 * i] for i in range(8)] == [b"x%d" % i for i in range(8)]
    assert second.ledgers[-2].size > 0  # the recovered ledger's size, from its last entry
    await second.close()


async def test_an_opener_with_a_superseded_claim_is_refused_and_fences_nothing(
    client: LedgerClient, name: str, zookeeper: ZooKeeperServer, shared_root: str
) -> None:
    """Ownership claims (broker/cluster) order the openers: a broker still holding claim 1
    that opens the log late cannot fence the owner of claim 2; claim 3 can."""
    owner2 = await ManagedLog.open(client, name, SMALL, owner="b", claim=2)
    await owner2.append(b"b0", 1)
    other = await second_client(zookeeper, shared_root)
    try:
        with pytest.raises(StaleClaimError):
            await ManagedLog.open(other, name, SMALL, owner="a", claim=1)
        assert (await owner2.append(b"b1", 1)).first_offset == 1  # still the owner
        got = await ManagedLogStore(client.zk, client.root).read(name)
        assert got is not None and (got[0].claim, got[0].owner) == (2, "b")
        owner3 = await ManagedLog.open(other, name, SMALL, owner="c", claim=3)
        with pytest.raises(ManagedLogFencedError):
            await owner2.append(b"late", 1)
        assert await read_all(owner3) == {0: b"b0", 1: b"b1"}
        await owner3.close()
    finally:
        await owner2.abandon()
        await other.close()


async def test_an_empty_open_ledger_is_dropped_at_recovery(client: LedgerClient, name: str) -> None:
    first = await ManagedLog.open(client, name, SMALL)
    await first.append(b"one", 1)
    await first.abandon()
    second = await ManagedLog.open(client, name, SMALL)
    await second.abandon()  # its ledger stays empty and open
    third = await ManagedLog.open(client, name, SMALL)
    ids = [li.ledger_id for li in third.ledgers]
    assert len(ids) == 2 and third.end_offset == 1  # the first one's and its own
    assert await read_all(third) == {0: b"one"}
    await third.close()


class Owner:
    """Appends with a window in flight and records each acknowledgement."""

    def __init__(self, mlog: ManagedLog, tag: str) -> None:
        self.mlog = mlog
        self.tag = tag
        self.acked: dict[int, bytes] = {}
        self.errors: list[BaseException] = []
        self.sent = 0

    async def run(self, count: int, window: int = 16) -> None:
        in_flight: set[asyncio.Future[object]] = set()
        for n in range(count):
            data = b"%s:%d" % (self.tag.encode(), n)
            try:
                fut = self.mlog.append_async(data, 1)
            except WeirError as exc:
                self.errors.append(exc)
                break
            self.sent += 1
            fut.add_done_callback(lambda f, d=data: self._done(f, d))
            in_flight.add(fut)  # type: ignore[arg-type]
            if len(in_flight) >= window:
                _, in_flight = await asyncio.wait(in_flight, return_when="FIRST_COMPLETED")
            if self.errors:
                break
        await asyncio.gather(*in_flight, return_exceptions=True)

    def _done(self, f: asyncio.Future[object], data: bytes) -> None:
        if f.cancelled():
            return
        exc = f.exception()
        if exc is not None:
            self.errors.append(exc)
        else:
            self.acked[f.result().first_offset] = data  # type: ignore[attr-defined]


@pytest.mark.parametrize("pause_bookie", [False, True], ids=["bookies-up", "bookie-paused"])
async def test_two_owners_racing_the_old_one_acknowledges_nothing_after_the_handover(
    client: LedgerClient,
    zookeeper: ZooKeeperServer,
    shared_root: str,
    shared_bookies: list[BookieProcess],
    name: str,
    pause_bookie: bool,
    tmp_path: Path,
) -> None:
    cfg = ManagedLogConfig(max_entries_per_ledger=50)
    spare = None
    if pause_bookie:  # with one paused (its registration may expire), new ledgers need a 4th
        spare = BookieProcess(tmp_path / "spare", zookeeper.hosts, shared_root).start()
    old = await ManagedLog.open(client, name, cfg)
    writer = Owner(old, "old")
    task = asyncio.create_task(writer.run(2000))
    while len(writer.acked) < 120:  # a few ledgers in
        await old.wait_for_end(old.end_offset, 10)
    if pause_bookie:
        shared_bookies[1].pause()
    other = await second_client(zookeeper, shared_root)
    try:
        new = await ManagedLog.open(other, name, cfg)
        handover_end = new.end_offset
        taker = Owner(new, "new")
        await taker.run(60)
        await asyncio.wait_for(task, 60)
        if pause_bookie:
            shared_bookies[1].resume()
        assert any(isinstance(e, ManagedLogFencedError) for e in writer.errors), writer.errors
        assert not taker.errors
        # nothing the old owner acknowledged is missing, and none of it lies past the end
        # the new owner found: after the handover it acknowledged nothing
        final = await read_all(new)
        assert all(o < handover_end for o in writer.acked), max(writer.acked)
        assert {o: final[o] for o in writer.acked} == writer.acked
        assert {o: final[o] for o in taker.acked} == taker.acked
        assert sorted(taker.acked) == list(range(handover_end, handover_end + 60))
        assert len(final) == new.end_offset  # dense
        # the fenced owner cannot change the metadata either
        with pytest.raises(ManagedLogFencedError):
            await old.trim(10)
        await new.close()
    finally:
        if pause_bookie:
            shared_bookies[1].resume()
        await other.close()
        if spare is not None:
            spare.stop()


def test_a_paused_owner_acknowledges_nothing_after_it_resumes(
    zookeeper: ZooKeeperServer, shared_root: str, shared_bookies: list[BookieProcess], name: str
) -> None:
    """The owner in a process of its own, SIGSTOPped while a new owner takes the log over."""

    async def all_registered() -> None:
        # an earlier test paused a bookie past its session: it registers again on its own
        async with LedgerClient(zookeeper.hosts, root=shared_root) as c:
            for _ in range(600):
                if len(await c.available_bookies()) >= len(shared_bookies):
                    return
                await asyncio.sleep(0.05)
        raise AssertionError("the module's bookies did not all register again")

    asyncio.run(all_registered())
    script = Path(__file__).with_name("managed_log_owner.py")
    proc = subprocess.Popen(
        [sys.executable, str(script), zookeeper.hosts, shared_root, name, "old", "100000"],
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    enough = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.split())
            if len(lines) > 150:
                enough.set()
        enough.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert enough.wait(60), lines
        proc.send_signal(19)  # SIGSTOP
        acked_before = sum(1 for ln in lines if ln[0] == "ack")

        async def take_over() -> tuple[int, dict[int, bytes], dict[int, bytes]]:
            async with LedgerClient(zookeeper.hosts, root=shared_root) as c:
                new = await ManagedLog.open(c, name, ManagedLogConfig(max_entries_per_ledger=40))
                end = new.end_offset
                for i in range(20):
                    await new.append(b"new:%d" % i, 1)
                proc.send_signal(18)  # SIGCONT
                await asyncio.to_thread(proc.wait, 60)
                final = await read_all(new)
                mine = {end + i: b"new:%d" % i for i in range(20)}
                await new.close()
                return end, final, mine

        end, final, mine = asyncio.run(take_over())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3, lines[-5:]
    assert lines[-1] == ["error", "MANAGED_LOG_FENCED"], lines[-5:]
    acked = {int(ln[1]): ln[2].encode() for ln in lines if ln[0] == "ack"}
    assert len(acked) >= acked_before > 100
    assert all(o < end for o in acked), (end, max(acked))
    assert {o: final[o] for o in acked} == acked
    assert {o: final[o] for o in mine} == mine


async def test_trim_drops_whole_ledgers_and_never_past_the_snapshot(
    client: LedgerClient, name: str, kazoo: KazooClient
) -> None:
    mlog = await ManagedLog.open(client, name, SMALL)
    results = [await mlog.append(b"t%d" % i, 1) for i in range(17)]
    ids = [li.ledger_id for li in mlog.ledgers]
    assert len(ids) == 4
    snap = await mlog.save_snapshot(b"state", results[6].position)  # covers ledger 1, entry 1
    assert await mlog.trim(12) == 1  # ledger 1 (0..4) is covered; ledger 2 (5..9) is not
    assert mlog.start_offset == 5 and [li.ledger_id for li in mlog.ledgers] == ids[1:]
    with pytest.raises(NoSuchLedgerError):
        await client.open_ledger(ids[0])
    got = await mlog.read(0, 1 << 20)
    assert got[0].first_offset == 5  # reads below the start begin at the start
    await mlog.save_snapshot(b"state 2", results[16].position)
    with pytest.raises(NoSuchLedgerError):
        await client.open_ledger(snap.ledger_id)  # the old snapshot's ledger is gone
    assert await mlog.trim(100) == 2  # never the open ledger
    assert mlog.start_offset == 15
    await mlog.close()
    reopened = await ManagedLog.open(client, name, SMALL)
    assert (reopened.start_offset, reopened.end_offset) == (15, 17)
    loaded = await reopened.load_snapshot()
    assert loaded is not None and loaded[1] == b"state 2"
    assert loaded[0].covers == results[16].position
    await reopened.close()


async def test_snapshots_larger_than_an_entry_and_replay_after_them(
    client: LedgerClient, name: str
) -> None:
    cfg = ManagedLogConfig(max_entries_per_ledger=5, snapshot_chunk_bytes=1000)
    mlog = await ManagedLog.open(client, name, cfg)
    assert await mlog.load_snapshot() is None
    results = [await mlog.append(b"s%d" % i, 1) for i in range(9)]
    state = bytes(range(256)) * 20  # 5120 bytes: 6 entries
    await mlog.save_snapshot(state, results[3].position)
    await mlog.abandon()
    new = await ManagedLog.open(client, name, cfg)
    loaded = await new.load_snapshot()
    assert loaded is not None
    info, data = loaded
    assert data == state and info.entries == 6
    assert payloads([e async for e in new.scan(info.covers)]) == [b"s%d" % i for i in range(4, 9)]
    await new.close()


async def test_tailing_readers_are_served_from_the_cache(client: LedgerClient, name: str) -> None:
    mlog = await ManagedLog.open(client, name, SMALL)
    seen: list[bytes] = []

    async def tail() -> None:
        offset = 0
        while offset < 30:
            await mlog.wait_for_end(offset, 10)
            for e in await mlog.read(offset, 1 << 20):
                seen.append(bytes(e.payload))
                offset = e.end_offset

    reader = asyncio.create_task(tail())
    for i in range(30):
        await mlog.append(b"c%d" % i, 1)
    await asyncio.wait_for(reader, 30)
    assert seen == [b"c%d" % i for i in range(30)]
    assert mlog.cache.misses == 0 and mlog.cache.hits >= 30
    await mlog.close()


async def test_a_failed_append_is_not_written_and_the_log_goes_on(
    client: LedgerClient, name: str, shared_bookies: list[BookieProcess]
) -> None:
    """Two bookies of three killed: appends fail (no quorum, no replacement); the failed
    ledger is closed before them, so they are known not written, and once the bookies are
    back the next append goes to a new ledger at the same offset."""
    mlog = await ManagedLog.open(client, name, SMALL)
    for i in range(3):
        await mlog.append(b"ok%d" % i, 1)
    shared_bookies[0].kill()
    shared_bookies[1].kill()
    try:
        with pytest.raises(CommitFailedError):
            await mlog.append(b"lost", 1)
        assert mlog.end_offset == 3 and mlog.next_offset == 3
    finally:
        shared_bookies[0].start()
        shared_bookies[1].start()
    res = await mlog.append(b"ok3", 1)
    assert res.first_offset == 3 and res.position.entry == 0
    assert await read_all(mlog) == {0: b"ok0", 1: b"ok1", 2: b"ok2", 3: b"ok3"}
    await mlog.abandon()
    again = await ManagedLog.open(client, name, SMALL)
    assert await read_all(again) == {0: b"ok0", 1: b"ok1", 2: b"ok2", 3: b"ok3"}
    await again.close()


async def test_metadata_lists_logs_and_positions_order(client: LedgerClient, name: str) -> None:
    mlog = await ManagedLog.open(client, name, SMALL)
    store = ManagedLogStore(client.zk, client.root)
    assert name in await store.list()
    assert Position(3, 9) < Position(4, 0)
    await mlog.close()
