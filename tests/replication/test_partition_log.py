"""A replicated partition (its log in a managed log) on real ZooKeeper and bookie processes.

The property: random writes (with resends that dedup must drop), position
commits, snapshots and handovers (a clean close, or the owner abandoned as by a
crash) against a single-owner model. After every handover the new owner's state
(end offset, producer table, positions, last write, log position) equals the old
owner's, and both agree with the model; at the end every message reads back at
its offset.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weir.errors import CorruptDataError
from weir.replication.errors import ManagedLogFencedError
from weir.replication.ledger import LedgerClient
from weir.replication.local_cluster import BookieProcess
from weir.replication.managed_log import ManagedLogConfig
from weir.replication.partition_log import (
    PartitionState,
    ReplicatedPartitionLog,
    ReplicationConfig,
)
from weir.replication.zkserver import ZooKeeperServer
from weir.storage.batch import decode_records, iter_batches
from weir.storage.batch_encoding import encode_batch
from weir.storage.incoming import validate_incoming
from weir.storage.partition import PartitionConfig

REP = ReplicationConfig(ManagedLogConfig(max_entries_per_ledger=4), snapshot_every=5)
PRODUCERS = ["", "a", "b"]
CONSUMERS = ["c1", "c2"]
_names = itertools.count()


@pytest.fixture
def client(shared_client: LedgerClient) -> LedgerClient:
    return shared_client


def batch(producer: str, first_seq: int, n: int, tag: int) -> bytes:
    data = [f"{tag}|{producer}|{first_seq + i}".encode() for i in range(n)]
    return encode_batch(data, producer_id=producer, first_seq_no=first_seq)


def offset_bytes(offset: int) -> bytes:
    return struct.pack(">Q", offset)


@dataclass
class Model:
    """The partition as one owner that never moves would have it."""

    messages: list[bytes] = field(default_factory=list)  # data by offset
    max_seq: dict[str, int] = field(default_factory=dict)
    last_offset: dict[str, int] = field(default_factory=dict)
    positions: dict[str, bytes] = field(default_factory=dict)

    def write(self, producer: str, first_seq: int, n: int, tag: int) -> None:
        for i in range(n):
            seq = first_seq + i
            if producer and seq <= self.max_seq.get(producer, -1):
                continue
            self.messages.append(f"{tag}|{producer}|{seq}".encode())
            if producer:
                self.max_seq[producer] = seq
                self.last_offset[producer] = len(self.messages) - 1


async def read_back(plog: ReplicatedPartitionLog) -> list[bytes]:
    out: list[bytes] = []
    offset = plog.start_offset
    while offset < plog.end_offset:
        res = await plog.read(offset, 300)
        for chunk in res.chunks:
            for pos, _ in iter_batches(chunk):
                out.extend(r.data for r in decode_records(chunk, pos) if r.offset >= offset)
        offset = res.next_offset
    return out


def check_against_model(state: PartitionState, model: Model) -> None:
    assert state.end_offset == len(model.messages)
    assert {p: s.max_seq_no for p, s in state.producers.items()} == model.max_seq
    assert {p: s.offset for p, s in state.producers.items()} == model.last_offset
    assert state.positions == model.positions


ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("write"), st.sampled_from(PRODUCERS), st.integers(1, 4), st.integers(0, 3)
        ),
        st.tuples(st.just("commit"), st.sampled_from(CONSUMERS), st.integers(0, 40)),
        st.tuples(st.just("uncommit"), st.sampled_from(CONSUMERS)),
        st.tuples(st.just("snapshot")),
        st.tuples(st.just("handover"), st.booleans()),
    ),
    min_size=4,
    max_size=24,
)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(script=ops)
def test_state_after_any_handover_equals_the_state_before(
    zookeeper: ZooKeeperServer,
    shared_root: str,
    shared_bookies: list[BookieProcess],
    script: list[tuple[object, ...]],
) -> None:
    asyncio.run(run_script(zookeeper.hosts, shared_root, script))


async def run_script(hosts: str, root: str, script: list[tuple[object, ...]]) -> None:
    name = f"prop/{next(_names)}"
    model = Model()
    next_seq = dict.fromkeys(PRODUCERS, 1)
    handovers = 0
    async with LedgerClient(hosts, root=root, request_timeout=5.0) as client:
        plog = await ReplicatedPartitionLog.open(client, name, replication=REP)
        try:
            for step, op in enumerate(script):
                match op:
                    case ("write", str(producer), int(n), int(back)):
                        first = max(1, next_seq[producer] - back)
                        await plog.write(validate_incoming([batch(producer, first, n, step)]))
                        model.write(producer, first, n, step)
                        next_seq[producer] = max(next_seq[producer], first + n)
                    case ("commit", str(consumer), int(at)):
                        value = offset_bytes(min(at, plog.end_offset))
                        await plog.set_positions({consumer: value})
                        model.positions[consumer] = value
                    case ("uncommit", str(consumer)):
                        await plog.set_positions({consumer: None})
                        model.positions.pop(consumer, None)
                    case ("snapshot",):
                        await plog.snapshot()
                    case ("handover", bool(clean)):
                        before = plog.state.copy()
                        if clean:
                            await plog.close()
                        else:
                            await plog.abandon()
                        plog = await ReplicatedPartitionLog.open(client, name, replication=REP)
                        handovers += 1
                        assert plog.state == before
                check_against_model(plog.state, model)
            assert await read_back(plog) == model.messages
            assert plog.generation == handovers + 1
        finally:
            await plog.close()


async def test_a_new_owner_replays_only_what_follows_the_snapshot(client: LedgerClient) -> None:
    name = f"replay/{next(_names)}"
    rep = ReplicationConfig(ManagedLogConfig(max_entries_per_ledger=10), snapshot_every=1000)
    plog = await ReplicatedPartitionLog.open(client, name, replication=rep)
    for i in range(12):
        await plog.write(validate_incoming([batch("p", i + 1, 1, i)]))
    await plog.snapshot()
    for i in range(12, 15):
        await plog.write(validate_incoming([batch("p", i + 1, 1, i)]))
    await plog.set_positions({"c": offset_bytes(7)})
    await plog.abandon()
    new = await ReplicatedPartitionLog.open(client, name, replication=rep)
    assert new.replayed_entries == 4  # 3 writes and a commit; not 16
    assert new.state.producers["p"].max_seq_no == 15 and new.positions == {"c": offset_bytes(7)}
    # a resend of what the old owner stored is dropped by the new one
    res = await new.write(validate_incoming([batch("p", 14, 3, 99)]))
    assert (res[0].skipped, res[0].written, res[0].offset) == (2, 1, 15)
    await new.close()
    again = await ReplicatedPartitionLog.open(client, name, replication=rep)
    assert again.replayed_entries == 0  # close took a snapshot
    await again.close()


async def test_the_old_owner_cannot_write_after_the_handover(client: LedgerClient) -> None:
    name = f"fence/{next(_names)}"
    old = await ReplicatedPartitionLog.open(client, name, replication=REP)
    await old.write(validate_incoming([batch("p", 1, 2, 0)]))
    new = await ReplicatedPartitionLog.open(client, name, replication=REP)
    change = old.prepare_write(validate_incoming([batch("p", 3, 1, 1)]))
    with pytest.raises(ManagedLogFencedError):
        await old.commit(change)
    old.abort(change)
    assert new.end_offset == 2
    assert (await new.write(validate_incoming([batch("p", 3, 1, 1)])))[0].offset == 2
    await new.close()
    await old.abandon()


async def test_retention_drops_whole_ledgers_after_a_snapshot(client: LedgerClient) -> None:
    name = f"retain/{next(_names)}"
    cfg = PartitionConfig(retention_bytes=1)
    rep = ReplicationConfig(ManagedLogConfig(max_entries_per_ledger=3), snapshot_every=1000)
    plog = await ReplicatedPartitionLog.open(client, name, cfg, rep)
    for i in range(10):
        await plog.write(validate_incoming([batch("p", i + 1, 1, i)]))
    assert await plog.retain(protect_from=5) == 1  # ledger 0..2; ledger 3..5 holds offset 5
    assert plog.start_offset == 3
    assert plog.mlog.snapshot is not None  # taken first: the trimmed entries are covered
    assert await plog.retain() == 2  # all but the open ledger
    assert plog.start_offset == 9
    res = await plog.read(0, 1 << 20)
    assert res.first_offset == 9 and res.start_offset == 9
    await plog.abandon()
    new = await ReplicatedPartitionLog.open(client, name, cfg, rep)
    assert (new.start_offset, new.end_offset) == (9, 10)
    assert new.state.producers["p"].max_seq_no == 10  # from the snapshot: its batches are gone
    await new.close()


async def test_a_replay_that_disagrees_with_the_log_refuses_to_open(client: LedgerClient) -> None:
    """An entry whose batches are not stamped at the offsets the entry covers is damage."""
    name = f"damaged/{next(_names)}"
    plog = await ReplicatedPartitionLog.open(client, name, replication=REP)
    await plog.write(validate_incoming([batch("p", 1, 2, 0)]))
    # an entry claiming 5 offsets while its batch holds 2, written behind the log's back
    bad = b"D" + bytes(plog.mlog.cache.get(plog.mlog.last_position).payload)[1:]  # type: ignore[arg-type, union-attr]
    await plog.mlog.append(bad, 5)
    await plog.abandon()
    with pytest.raises(CorruptDataError, match="offset"):
        await ReplicatedPartitionLog.open(client, name, replication=REP)
