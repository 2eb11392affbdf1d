"""Partition actors over replicated logs, owned through ZooKeeper (real ZooKeeper, real
bookies): the owner's actor writes and reads; the other broker refuses naming the owner;
after a move, and after kill -9 of the owner (a broker process of its own,
actor_broker.py), the new owner's actor has every acknowledged message exactly once
(the history checker), and dedup."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.exceptions import ConnectionLoss

from tests.reliability.checker import check
from tests.reliability.history import History, message_id
from weir.broker.cluster import Ownership, OwnershipConfig, ReplicatedLogHost, partition_key
from weir.broker.cluster.partitions import ClusterPartitions
from weir.broker.cluster.topic_drop import delete_managed_log
from weir.broker.partition_actor import PartitionActor
from weir.errors import BadRequestError, NotOwnerError, UnavailableError
from weir.replication.errors import ManagedLogFencedError
from weir.replication.ledger import LedgerClient
from weir.replication.ledger.metadata import ledger_path, ledgers_path
from weir.replication.local_cluster import BookieProcess
from weir.replication.managed_log import ManagedLogConfig
from weir.replication.managed_log.metadata import ManagedLogStore
from weir.replication.partition_log import ReplicatedPartitionLog, ReplicationConfig
from weir.replication.zkserver import ZooKeeperServer
from weir.storage.batch import decode_records, iter_batches
from weir.storage.batch_encoding import encode_batch
from weir.storage.incoming import validate_incoming
from weir.storage.partition import PartitionConfig

from .actor_broker import REP as KILL_REP
from .test_ownership import until

REP = ReplicationConfig(ManagedLogConfig(max_entries_per_ledger=8), snapshot_every=5)
FAST = OwnershipConfig(session_timeout=4.0, reconcile_interval=1.0)
TOPIC = "public/default/actors"


@dataclass
class Broker:
    id: str
    own: Ownership
    parts: ClusterPartitions


@pytest.fixture
async def brokers(
    zookeeper: ZooKeeperServer,
    shared_root: str,
    shared_bookies: list[BookieProcess],
    shared_client: LedgerClient,
) -> AsyncIterator[dict[str, Broker]]:
    out: dict[str, Broker] = {}
    try:
        for b in ("a", "b"):
            parts = ClusterPartitions(ReplicatedLogHost(shared_client, b, REP))
            own = Ownership(
                zookeeper.hosts,
                shared_root,
                b,
                parts,
                endpoints={"native": f"127.0.0.1:{b}"},
                config=FAST,
            )
            parts.attach(own)
            await own.start()
            out[b] = Broker(b, own, parts)
        yield out
    finally:
        for br in out.values():
            await br.own.stop()


def batch(seq: int) -> list[bytes]:
    return [encode_batch([b"m%d" % seq], producer_id="p", first_seq_no=seq)]


async def write(br: Broker, seq: int) -> tuple[int, int]:
    actor = await br.parts.actor(TOPIC, 0)
    res = await actor.write(validate_incoming(batch(seq)), 64)
    return res[0].offset, res[0].skipped


async def read_all(br: Broker) -> list[tuple[int, bytes]]:
    actor = await br.parts.actor(TOPIC, 0)
    out: list[tuple[int, bytes]] = []
    offset = actor.start_offset
    while offset < actor.end_offset:
        res = await actor.read_async(offset, 1 << 20)
        for chunk in res.chunks:
            for pos, _ in iter_batches(chunk):
                out.extend((r.offset, r.data) for r in decode_records(chunk, pos))
        offset = res.next_offset
    return out


async def test_the_owner_writes_the_other_names_it_and_a_move_keeps_everything(
    brokers: dict[str, Broker],
) -> None:
    key = partition_key(TOPIC, 0)
    await brokers["a"].own.add_partitions([key])
    await until(lambda: any(key in br.parts.actors for br in brokers.values()))
    owner = next(br for br in brokers.values() if key in br.parts.actors)
    other = next(br for br in brokers.values() if br is not owner)

    acked = [await write(owner, seq) for seq in range(1, 13)]  # past a ledger rollover
    assert acked == [(i, 0) for i in range(12)]
    with pytest.raises(UnavailableError) as err:
        await other.parts.actor(TOPIC, 0)
    assert f"owned by broker {owner.id}" in err.value.message
    assert f"127.0.0.1:{owner.id}" in err.value.message  # where to go
    await until(lambda: key in other.own.owners_seen)  # its reconcile saw the claim
    with pytest.raises(UnavailableError, match=f"owned by broker {owner.id}"):
        other.parts.actor_now(TOPIC, 0)
    assert owner.parts.actor_now(TOPIC, 0) is await owner.parts.actor(TOPIC, 0)
    actor = await owner.parts.actor(TOPIC, 0)
    with pytest.raises(BadRequestError, match="not supported on replicated storage"):
        actor.read(0, 1 << 20)  # the synchronous read is the embedded log's only
    assert await read_all(owner) == [(i, b"m%d" % (i + 1)) for i in range(12)]

    # an admin moves the partition: the old owner's actor closes, the new one has it all
    await owner.own.unload(key, to=other.id)
    await until(lambda: key in other.parts.actors and key not in owner.parts.actors)
    with pytest.raises(UnavailableError, match=f"owned by broker {other.id}"):
        await owner.parts.actor(TOPIC, 0)
    assert await read_all(other) == [(i, b"m%d" % (i + 1)) for i in range(12)]
    assert (await write(other, 12))[1] == 1  # a resend: dedup survived the move
    assert await write(other, 13) == (12, 0)


async def test_a_write_to_an_owner_whose_log_the_next_owner_fenced_is_told_not_owner(
    brokers: dict[str, Broker], shared_client: LedgerClient
) -> None:
    """The owner's log is fenced under it (the next owner's open: after its session
    expired, while it ran on): its writes fail, and the writer is told NOT_OWNER
    (retryable: the SDK looks the owner up and resends there), not the log's fatal
    error, which made the SDK's writer give up (found by tests/cluster/test_cluster_faults.py)."""
    key = partition_key(TOPIC + "-fenced", 0)
    await brokers["a"].own.add_partitions([key])
    await until(lambda: any(key in br.parts.actors for br in brokers.values()))
    owner = next(br for br in brokers.values() if key in br.parts.actors)
    actor = await owner.parts.actor(TOPIC + "-fenced", 0)
    res = await actor.write(validate_incoming(batch(1)), 64)
    assert res[0].offset == 0
    fencer = await ReplicatedPartitionLog.open(shared_client, key, replication=REP, claim=10**6)
    try:
        with pytest.raises(NotOwnerError, match="taken over by another broker") as err:
            await actor.write(validate_incoming(batch(2)), 64)
        assert err.value.retryable
        assert (err.value.topic, err.value.partition) == (TOPIC + "-fenced", 0)
        assert fencer.end_offset == 1  # the refused write was not stored
    finally:
        await fencer.close()


async def test_a_write_to_an_owner_whose_log_failed_is_told_not_owner_and_the_log_reopened(
    brokers: dict[str, Broker],
) -> None:
    """The owner's managed log lost track of its ledgers (a failed ledger's close could not
    be recorded: ZooKeeper unreachable at that moment): the write is told NOT_OWNER
    (retryable), not the log's error as an internal one, and the partition is given up
    and claimed again, its log reopened (recovered): the next write goes on from what
    was stored."""
    topic = TOPIC + "-failed"
    key = partition_key(topic, 0)
    await brokers["a"].own.add_partitions([key])
    await until(lambda: any(key in br.parts.actors for br in brokers.values()))
    owner = next(br for br in brokers.values() if key in br.parts.actors)
    actor = await owner.parts.actor(topic, 0)
    assert (await actor.write(validate_incoming(batch(1)), 64))[0].offset == 0
    # the state ManagedLog._broken leaves it in (bookies and ZooKeeper failing at once
    # are needed to get there for real)
    owner.parts.logs.log(key).mlog._broken(ConnectionLoss())
    with pytest.raises(NotOwnerError, match="being reopened") as err:
        await actor.write(validate_incoming(batch(2)), 64)
    assert err.value.retryable
    assert (err.value.topic, err.value.partition) == (topic, 0)

    async def serving() -> PartitionActor[ReplicatedPartitionLog] | None:
        for br in brokers.values():
            try:
                got = await br.parts.actor(topic, 0)
            except (UnavailableError, NotOwnerError):
                continue
            if got is not actor:
                return got
        return None

    again: PartitionActor[ReplicatedPartitionLog] | None = None
    for _ in range(600):  # to a deadline: the claim goes back and the log is reopened
        again = await serving()
        if again is not None:
            break
        await asyncio.sleep(0.05)
    assert again is not None, "the partition was not claimed again"
    res = await again.write(validate_incoming(batch(2)), 64)
    assert (res[0].offset, res[0].skipped) == (1, 0)  # the refused write was not stored


KILL_TOPIC = "public/default/actor-kill"
KEY = 0  # the history's partition key


def mid(n: int) -> str:
    return f"id:w:{n}"  # the id tests.reliability.history.make_data puts in the data


async def test_acknowledged_writes_survive_kill_9_of_the_owner_exactly_once(
    zookeeper: ZooKeeperServer,
    shared_root: str,
    shared_bookies: list[BookieProcess],
    shared_client: LedgerClient,
) -> None:
    script = Path(__file__).with_name("actor_broker.py")
    proc = subprocess.Popen(
        [sys.executable, str(script), zookeeper.hosts, shared_root, "a", KILL_TOPIC, "100000"],
        stdout=subprocess.PIPE,
        text=True,
    )
    history = History()
    acked: list[int] = []
    enough = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            match line.split():
                case ["try", n]:
                    history.attempted(mid(int(n)))
                case ["ack", n, off]:
                    history.acked(mid(int(n)), KEY, None if off == "-1" else int(off))
                    acked.append(int(n))
                    if len(acked) >= 25:
                        enough.set()
        enough.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    parts = ClusterPartitions(ReplicatedLogHost(shared_client, "b", KILL_REP))
    own = Ownership(
        zookeeper.hosts,
        shared_root,
        "b",
        parts,
        config=OwnershipConfig(session_timeout=4.0, reconcile_interval=1.0),
    )
    parts.attach(own)
    try:
        assert enough.wait(60), "broker a acknowledged too little"
        await own.start()  # b joins while a writes: a keeps the partition (it stays put)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        reader.join(10)
        key = partition_key(KILL_TOPIC, 0)
        await until(lambda: key in parts.actors, 60)  # a's session expired; b claimed
        actor = await parts.actor(KILL_TOPIC, 0)
        # the writer goes on at b: the message it had tried last first (it may or may not
        # be stored: dedup decides), then new ones
        start = max(acked) + 1
        for n in range(start, start + 10):
            history.attempted(mid(n))
            data = f"{mid(n)}|".encode() + b"." * 32
            batch = encode_batch([data], producer_id="w", first_seq_no=n + 1)
            res = (await actor.write(validate_incoming([batch]), 64))[0]
            history.acked(mid(n), KEY, None if res.skipped else res.offset)
        rows: list[tuple[int, str]] = []
        offset = actor.start_offset
        while offset < actor.end_offset:
            res = await actor.read_async(offset, 1 << 20)
            for chunk in res.chunks:
                for pos, _ in iter_batches(chunk):
                    rows.extend((r.offset, message_id(r.data)) for r in decode_records(chunk, pos))
            offset = res.next_offset
        report = check(history, {KEY: rows}, {KEY: 0})
        assert report.violations() == {}, report.violations()
        assert report.acknowledged >= len(acked) + 10
        assert [r[0] for r in rows] == list(range(len(rows)))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await own.stop()


async def test_retention_runs_in_the_actors_turn_between_writes(
    shared_client: LedgerClient,
) -> None:
    """A replicated actor's retention step drops whole ledgers through its log, ordered
    with the writes queued around it; what is left reads back from the new start."""
    rep = ReplicationConfig(ManagedLogConfig(max_entries_per_ledger=3), snapshot_every=1000)
    plog = await ReplicatedPartitionLog.open(
        shared_client, "public/default/retained/0", PartitionConfig(retention_bytes=1), rep
    )
    actor: PartitionActor[ReplicatedPartitionLog] = PartitionActor(
        plog,
        None,
        topic="public/default/retained",
        partition=0,
        generation=1,
        max_queue_bytes=1 << 20,
        max_commit_bytes=1,  # one write per commit: one entry each
        commit=plog.commit,
        read=plog.read,
        retain=plog.retain,
    )
    try:
        first = [actor.submit(validate_incoming(batch(s)), 64) for s in range(1, 8)]
        dropped = asyncio.ensure_future(actor.run_retention(None, None))
        await asyncio.sleep(0)  # one loop turn: the task queues its step (not a timing wait)
        later = [actor.submit(validate_incoming(batch(s)), 64) for s in range(8, 11)]
        offsets = [r[0].offset for r in await asyncio.gather(*first, *later)]
        assert offsets == list(range(10))
        # when its turn came 7 entries were written: the ledgers up to offset 5 go (whole
        # ledgers: 3 entries each), the open one holding offset 6 stays
        assert await dropped > 0
        assert (actor.start_offset, actor.end_offset) == (6, 10)
        res = await actor.read_async(0, 1 << 20)
        assert res.first_offset == 6
    finally:
        await actor.close()
        await plog.close()


async def test_dropping_a_partition_still_held_fences_its_owner_and_deletes_its_ledgers(
    shared_client: LedgerClient,
) -> None:
    """A drop whose owner never let go (paused, or dead with its session still alive)
    fences it: the owner's next write fails and is not acknowledged; the log's metadata
    and every ledger it listed (data and snapshot) are gone."""
    key = partition_key(TOPIC + "-dropped", 0)
    held = await ReplicatedPartitionLog.open(shared_client, key, replication=REP, claim=1)
    for seq in range(12):  # past a ledger and a snapshot
        await held.write(validate_incoming(batch(seq)))
    await held.snapshot()
    ledgers = {li.ledger_id for li in held.mlog.ledgers}
    snap = held.mlog.snapshot
    assert snap is not None and len(ledgers) > 1
    ledgers.add(snap.ledger_id)

    assert await delete_managed_log(shared_client, key, REP.managed_log)

    with pytest.raises(ManagedLogFencedError, match="fenced"):
        await held.write(validate_incoming(batch(12)))
    assert held.end_offset == 12  # the refused write was not applied
    await held.abandon()
    store = ManagedLogStore(shared_client.zk, shared_client.root)
    assert await store.read(key) is None
    for ledger_id in ledgers:
        assert not shared_client.zk.exists(ledger_path(shared_client.root, ledger_id))
    assert not await delete_managed_log(shared_client, key, REP.managed_log)  # done already


async def test_two_admins_dropping_one_partition_at_once_leave_nothing(
    shared_client: LedgerClient,
) -> None:
    """Both finish without an error, the log is gone and no ledger either of them opened
    is left behind. (Here the two usually finish one after the other; the interleaving in
    which one fences the other between its close and its delete, which
    `delete_managed_log` retries, is not provoked.)"""
    key = partition_key(TOPIC + "-dropped-twice", 0)
    held = await ReplicatedPartitionLog.open(shared_client, key, replication=REP, claim=1)
    for seq in range(3):
        await held.write(validate_incoming(batch(seq)))
    ledger_nodes = ledgers_path(shared_client.root)
    before = set(shared_client.zk.get_children(ledger_nodes))
    mine = {f"L{li.ledger_id:010d}" for li in held.mlog.ledgers}
    assert mine <= before

    done = await asyncio.gather(
        delete_managed_log(shared_client, key, REP.managed_log),
        delete_managed_log(shared_client, key, REP.managed_log),
    )
    assert done == [True, True]
    await held.abandon()
    assert await ManagedLogStore(shared_client.zk, shared_client.root).read(key) is None
    after = set(shared_client.zk.get_children(ledger_nodes))
    assert after <= before - mine, after - (before - mine)
