"""Multi-process faults: SIGKILL of a bookie under load, a writer racing a recoverer.

Every test keeps a history (entry id -> payload of each add the writer saw
acknowledged, and of each add it attempted) and judges it at the end: no
acknowledged entry lost, nothing visible beyond what was acknowledged or
recovered (every entry readable is one the writer attempted, at its id), and
the same bytes on every bookie that holds an entry.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from weir.errors import WeirError
from weir.replication.errors import (
    BookieReadOnlyError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
)
from weir.replication.ledger import LedgerClient, LedgerHandle, LedgerState
from weir.replication.ledger.auditor import Auditor
from weir.replication.ledger.bookie_client import BookieClient
from weir.replication.local_cluster import BookieProcess
from weir.replication.registry import available_bookies
from weir.replication.zkserver import ZooKeeperServer

from .test_ledger import stored_entries

WINDOW = 32  # adds in flight at once


@pytest.fixture
async def client(
    zookeeper: ZooKeeperServer, zk_root: str, bookies: list[BookieProcess]
) -> AsyncIterator[LedgerClient]:
    async with LedgerClient(zookeeper.hosts, root=zk_root) as c:
        yield c


def payload(entry: int, size: int = 200) -> bytes:
    return b"entry-%06d|" % entry + b"x" * size


@dataclass
class History:
    attempted: dict[int, bytes] = field(default_factory=dict)
    acked: dict[int, bytes] = field(default_factory=dict)
    errors: list[WeirError] = field(default_factory=list)
    acked_after_error: list[int] = field(default_factory=list)


Trigger = tuple[Callable[[], bool], asyncio.Event]


async def write(
    lh: LedgerHandle,
    history: History,
    count: int,
    on_ack: asyncio.Event | None = None,
    fire_at: int = -1,
    triggers: Sequence[Trigger] = (),
    stop: Callable[[], bool] | None = None,
    size: int = 200,
) -> None:
    """Pipelined adds (WINDOW in flight), bounded by ``count``; stops at the first error,
    or once ``stop()`` says so."""
    in_flight: set[asyncio.Future[int]] = set()
    for n in range(count):
        if history.errors or (stop is not None and stop()):
            break
        data = payload(n, size)
        try:
            fut = lh.add_async(data)
        except WeirError as exc:
            # the handle failed since this task last ran: adds it completed before the
            # failure may still have their done callbacks queued behind this task's wake-up
            # (they were acked first, in order); let them run before the refusal counts
            await asyncio.sleep(0)
            history.errors.append(exc)
            break
        history.attempted[n] = data

        def done(f: asyncio.Future[int], data: bytes = data) -> None:
            exc = f.exception()
            if exc is not None:
                assert isinstance(exc, WeirError), exc
                history.errors.append(exc)
                return
            if history.errors:
                history.acked_after_error.append(f.result())
            history.acked[f.result()] = data
            if on_ack is not None and len(history.acked) >= fire_at:
                on_ack.set()
            for condition, event in triggers:
                if not event.is_set() and condition():
                    event.set()

        fut.add_done_callback(done)
        in_flight.add(fut)
        if len(in_flight) >= WINDOW:
            _, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
    if in_flight:
        await asyncio.wait(in_flight)


async def check_closed_ledger(
    client: LedgerClient, ledger_id: int, history: History, bookies: list[BookieProcess]
) -> int:
    """The ledger is closed, holds every acknowledged entry and only attempted ones, and every
    bookie holding an entry holds the same bytes. Returns the last entry id."""
    rh = await client.open_ledger(ledger_id)
    assert rh.closed
    last = rh.last_add_confirmed
    lost = [e for e in history.acked if e > last]
    assert not lost, f"acknowledged entries past the ledger's end: {lost[:10]}"
    for entry in range(last + 1):
        assert entry in history.attempted, f"entry {entry} was never written"
        assert await rh.read(entry) == history.attempted[entry]
    for b in bookies:
        bc = BookieClient(b.address)
        try:
            for entry in range(last + 2):
                if b.address not in rh.metadata.write_set(entry):
                    continue
                try:
                    got = (await bc.read(ledger_id, entry)).payload
                except (NoSuchEntryError, NoSuchLedgerError):
                    continue  # a bookie of the write set that never got it (failed, replaced)
                assert got == history.attempted[entry], f"bookie {b.address} differs at {entry}"
        finally:
            await bc.close()
    return last


@pytest.mark.parametrize(
    ("bookie_count", "quorums", "victim"),
    [(3, (3, 3, 2), 0), (3, (3, 3, 2), 1), (3, (3, 3, 2), 2), (5, (5, 3, 2), 0), (5, (5, 3, 2), 3)],
    indirect=["bookie_count"],
)
async def test_sigkill_of_one_bookie_under_load_loses_no_acknowledged_entry(
    client: LedgerClient, bookies: list[BookieProcess], quorums: tuple[int, int, int], victim: int
) -> None:
    lh = await client.create_ledger(*quorums)
    ensemble = lh.metadata.ensembles[0].bookies
    target = next(b for b in bookies if b.address == ensemble[victim])
    history = History()
    reached = asyncio.Event()
    writer = asyncio.create_task(write(lh, history, 1500, reached, fire_at=400))
    await reached.wait()
    target.kill()  # SIGKILL mid-stream: adds to it are in flight
    await writer
    assert not history.errors, history.errors[:3]
    assert len(history.acked) == 1500  # AQ=2 of the WQ=3 still answer every add
    await lh.close()
    target.start()  # back on its port with what it had fsync'd
    last = await check_closed_ledger(client, lh.ledger_id, history, bookies)
    assert last == 1499


async def test_recovery_with_a_bookie_down_after_the_writer_died(
    client: LedgerClient, bookies: list[BookieProcess]
) -> None:
    """The writer goes away mid-stream (never closes), a bookie is SIGKILLed: recovery still
    fences E - AQ + 1 = 2 bookies and finds every acknowledged entry."""
    lh = await client.create_ledger(3, 3, 2)
    history = History()
    await write(lh, history, 300)
    in_flight = [lh.add_async(payload(300 + i)) for i in range(WINDOW)]  # abandoned
    for i in range(WINDOW):
        history.attempted[300 + i] = payload(300 + i)
    bookies[1].kill()
    md = await client.recover(lh.ledger_id)
    assert md.state == LedgerState.CLOSED
    assert md.last_entry_id >= 299
    await asyncio.gather(*in_flight, return_exceptions=True)
    for f in in_flight:
        if not f.exception():
            history.acked[f.result()] = payload(f.result())
    bookies[1].start()
    await check_closed_ledger(client, lh.ledger_id, history, bookies)


@pytest.mark.parametrize("recover_after", [0, 1, 50, 400])
async def test_writer_and_recoverer_racing_never_both_succeed(
    client: LedgerClient,
    zookeeper: ZooKeeperServer,
    zk_root: str,
    bookies: list[BookieProcess],
    recover_after: int,
) -> None:
    lh = await client.create_ledger(3, 3, 2)
    history = History()
    reached = asyncio.Event()
    if recover_after == 0:
        reached.set()
    # bounded, but far more adds than a recovery takes: the fence lands mid-stream
    writer = asyncio.create_task(write(lh, history, 50_000, reached, fire_at=recover_after))
    await reached.wait()
    async with LedgerClient(zookeeper.hosts, root=zk_root) as recoverer:
        md = await recoverer.recover(lh.ledger_id)
    await writer
    # the writer was fenced out: its adds fail, and nothing is acknowledged after the error
    assert history.errors and all(isinstance(e, LedgerFencedError) for e in history.errors)
    assert not history.acked_after_error
    with pytest.raises(LedgerFencedError):
        await lh.close()
    assert md.state == LedgerState.CLOSED
    assert max(history.acked, default=-1) <= md.last_entry_id
    last = await check_closed_ledger(client, lh.ledger_id, history, bookies)
    assert last == md.last_entry_id


async def test_writer_closing_first_wins_and_recovery_agrees(
    client: LedgerClient, zookeeper: ZooKeeperServer, zk_root: str, bookies: list[BookieProcess]
) -> None:
    lh = await client.create_ledger(3, 3, 2)
    history = History()
    await write(lh, history, 100)
    await lh.close()
    async with LedgerClient(zookeeper.hosts, root=zk_root) as recoverer:
        md = await recoverer.recover(lh.ledger_id)
    assert md.last_entry_id == 99
    await check_closed_ledger(client, lh.ledger_id, history, bookies)


def by_address(bookies: list[BookieProcess], address: str) -> BookieProcess:
    return next(b for b in bookies if b.address == address)


@pytest.mark.parametrize("bookie_count", [5], indirect=True)
async def test_ensemble_change_under_load_survives_two_bookies_killed_in_turn(
    client: LedgerClient, bookies: list[BookieProcess]
) -> None:
    """E=WQ=3, AQ=2 on 5 bookies: a bookie of the ensemble is killed, the writer replaces it
    without stopping; then a second one of the new ensemble. Without ensemble change the
    second kill leaves one ack per entry and breaks the writer (next test)."""
    lh = await client.create_ledger(3, 3, 2)
    history = History()
    first_kill, second_kill = asyncio.Event(), asyncio.Event()
    triggers = [
        (lambda: len(history.acked) >= 300, first_kill),
        (lambda: lh.ensemble_changes >= 1 and len(history.acked) >= 700, second_kill),
    ]
    writer = asyncio.create_task(write(lh, history, 1200, triggers=triggers))
    await first_kill.wait()
    victim_1 = by_address(bookies, lh.metadata.ensembles[-1].bookies[0])
    victim_1.kill()
    await second_kill.wait()
    victim_2 = by_address(bookies, lh.metadata.ensembles[-1].bookies[1])
    victim_2.kill()
    await writer
    assert not history.errors, history.errors[:3]
    assert len(history.acked) == 1200
    assert lh.ensemble_changes == 2
    await lh.close()

    md = (await client.open_ledger(lh.ledger_id)).metadata
    assert len(md.ensembles) == 3
    assert [f.first_entry for f in md.ensembles] == sorted(f.first_entry for f in md.ensembles)
    last_ensemble = md.ensembles[-1].bookies
    assert victim_1.address not in last_ensemble and victim_2.address not in last_ensemble
    # every entry of the last fragment is on each of its three bookies
    first = md.ensembles[-1].first_entry
    for address in last_ensemble:
        b = by_address(bookies, address)
        b.stop()
        assert set(range(first, 1200)) <= set(stored_entries(b, lh.ledger_id))
        b.start()
    victim_1.start()
    victim_2.start()
    await check_closed_ledger(client, lh.ledger_id, history, bookies)


@pytest.mark.parametrize("bookie_count", [5], indirect=True)
async def test_without_ensemble_change_two_kills_break_the_writer_but_lose_nothing(
    client: LedgerClient, bookies: list[BookieProcess]
) -> None:
    lh = await client.create_ledger(3, 3, 2, ensemble_change=False)
    history = History()
    reached = asyncio.Event()
    writer = asyncio.create_task(write(lh, history, 1200, reached, fire_at=300))
    await reached.wait()
    for address in lh.metadata.ensembles[0].bookies[:2]:
        by_address(bookies, address).kill()
    await writer
    assert history.errors and all(isinstance(e, NotEnoughBookiesError) for e in history.errors)
    assert not history.acked_after_error
    for b in bookies:
        if b.proc is None:
            b.start()
    md = await client.recover(lh.ledger_id)
    assert md.last_entry_id >= max(history.acked)
    await check_closed_ledger(client, lh.ledger_id, history, bookies)


@pytest.mark.parametrize("bookie_count", [4], indirect=True)
async def test_a_paused_bookie_is_replaced_and_recovery_goes_on_without_it(
    zookeeper: ZooKeeperServer, zk_root: str, bookies: list[BookieProcess]
) -> None:
    """SIGSTOP: the bookie keeps its connections open and answers nothing. Its requests
    time out (request_timeout), the writer replaces it, a recoverer fences the others."""
    async with LedgerClient(zookeeper.hosts, root=zk_root, request_timeout=1.0) as client:
        lh = await client.create_ledger(3, 3, 2)
        history = History()
        reached = asyncio.Event()
        changed_at: list[int] = []

        def enough() -> bool:
            """200 adds acknowledged after the change: the writer goes on without it."""
            if lh.ensemble_changes and not changed_at:
                changed_at.append(len(history.acked))
            return bool(changed_at) and len(history.acked) >= changed_at[0] + 200

        # bounded; the paused bookie's first request times out after 1 s
        writer = asyncio.create_task(write(lh, history, 200_000, reached, fire_at=200, stop=enough))
        await reached.wait()
        paused = by_address(bookies, lh.metadata.ensembles[0].bookies[2])
        paused.pause()
        try:
            await writer
            assert not history.errors, history.errors[:3]
            assert lh.ensemble_changes == 1 and enough()
            assert paused.address not in lh.metadata.ensembles[-1].bookies
            # the writer goes away without closing; recovery does not wait for the paused one
            async with LedgerClient(
                zookeeper.hosts, root=zk_root, request_timeout=1.0
            ) as recoverer:
                md = await recoverer.recover(lh.ledger_id)
            assert md.last_entry_id == max(history.acked)
        finally:
            paused.resume()
        await check_closed_ledger(client, lh.ledger_id, history, bookies)


async def test_a_full_bookie_turns_read_only_and_the_writer_moves_on(
    client: LedgerClient,
    zookeeper: ZooKeeperServer,
    zk_root: str,
    bookies: list[BookieProcess],
    tmp_path: Path,
    kazoo: KazooClient,
) -> None:
    """A bookie whose data passes --max-data-bytes refuses adds with READ_ONLY, moves to
    readonly/ in ZooKeeper and keeps serving reads; the writer replaces it and loses nothing."""
    small = BookieProcess(
        tmp_path / "small", zookeeper.hosts, zk_root, "--max-data-bytes", str(2 << 20)
    ).start()
    try:
        others = [b.address for b in bookies]
        lh = await client.create_ledger(3, 3, 2, bookies=[small.address, *others[:2]])
        history = History()
        await write(lh, history, 1000, size=4096)  # 4 MB on each bookie of the write set
        assert not history.errors, history.errors[:3]
        assert lh.ensemble_changes == 1
        assert lh.metadata.ensembles[-1].bookies == (others[2], *others[:2])
        await lh.close()
        # the bookie moves its registration right after turning read-only (its own thread)
        for _ in range(200):
            if small.address in available_bookies(kazoo, zk_root, read_only=True):
                break
            await asyncio.sleep(0.05)
        assert small.address in available_bookies(kazoo, zk_root, read_only=True)
        assert small.address not in available_bookies(kazoo, zk_root)
        bc = BookieClient(small.address)
        try:
            assert (await bc.read(lh.ledger_id, 0)).payload == history.acked[0]  # reads go on
            with pytest.raises(BookieReadOnlyError, match="read-only: data"):
                await bc.add(lh.ledger_id + 1, 0, -1, b"x")
        finally:
            await bc.close()
        assert any("bookie read-only: data" in line for line in small.log)
        await check_closed_ledger(client, lh.ledger_id, history, [*bookies, small])
    finally:
        small.stop()


@pytest.mark.parametrize("bookie_count", [4], indirect=True)
async def test_the_auditor_restores_full_replication_after_a_bookie_is_lost_for_good(
    client: LedgerClient, bookies: list[BookieProcess], kazoo: KazooClient, zk_root: str
) -> None:
    """SIGKILL a bookie and never bring it back: once its ZooKeeper session expires it is
    lost; one audit copies its share of every closed ledger to the others."""
    histories: dict[int, History] = {}
    ensembles = [bookies[0:3], bookies[1:4], bookies[0:3]]
    quorums = [(3, 3, 2), (3, 2, 2), (3, 3, 2)]
    for members, q in zip(ensembles, quorums, strict=True):
        lh = await client.create_ledger(*q, bookies=[b.address for b in members])
        histories[lh.ledger_id] = History()
        await write(lh, histories[lh.ledger_id], 150)
        await lh.close()
    lost = bookies[1]
    lost.kill()
    for _ in range(600):  # its ephemeral node goes with its session (a few seconds)
        if lost.address not in available_bookies(kazoo, zk_root):
            break
        await asyncio.sleep(0.05)
    assert lost.address not in available_bookies(kazoo, zk_root)

    fixed = await Auditor(client).audit_once()
    assert fixed == {lid: [lost.address] for lid in histories}
    assert await Auditor(client).audit_once() == {}  # nothing left to do
    live = [b for b in bookies if b is not lost]
    for lid, history in histories.items():
        md = (await client.open_ledger(lid)).metadata
        assert all(lost.address not in f.bookies for f in md.ensembles)
        await check_closed_ledger(client, lid, history, live)
    # every entry is on each bookie of its write set again: WQ copies
    for b in live:
        b.stop()
    for lid in histories:
        md, _ = await client.store.read(lid)
        held = {b.address: set(stored_entries(b, lid)) for b in live}
        for entry in range(md.last_entry_id + 1):
            assert all(entry in held[b] for b in md.write_set(entry)), (lid, entry)
