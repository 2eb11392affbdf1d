"""The broker's transactions: all-or-nothing across topics and partitions, offsets that move
only on commit, timeouts, fencing, restarts, bad input, and the seams other parts rely on
(retention, read-committed waits)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.storage.conftest import make_batch
from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.broker.transactions.facade import TxnOffset
from weir.errors import (
    BadRequestError,
    ProducerFencedError,
    TransactionBusyError,
    TransactionEndedError,
    UnknownTransactionError,
)
from weir.storage.batch import decode_records

TOPICS = ("in", "mid", "out")


async def open_broker(path: Path, **kw: object) -> Broker:
    cfg = BrokerConfig(data_dir=path, retention_interval_s=3600, **kw)  # type: ignore[arg-type]
    return await Broker.open(cfg)


async def setup(b: Broker) -> None:
    for t in TOPICS:
        await b.create_topic(t, partitions=3)


def records(b: Broker, topic: str, partition: int, *, committed: bool) -> list[bytes]:
    actor = b.actor(topic, partition)
    out = []
    pos = actor.start_offset
    stop = actor.stable_offset if committed else actor.end_offset
    while pos < stop:
        res = actor.read(pos, 1 << 20, committed=committed)
        for c in res.chunks:
            out.extend(r.data.split(b":")[0] for r in decode_records(c) if r.offset >= pos)
        pos = res.next_offset
    return out


def everywhere(b: Broker, *, committed: bool) -> dict[tuple[str, int], list[bytes]]:
    return {(t, p): records(b, t, p, committed=committed) for t in TOPICS for p in range(3)}


async def write_everywhere(b: Broker, txn_id: int, producer: str) -> None:
    futs = [
        b.submit_in_transaction(txn_id, t, p, make_batch(2, producer=f"{producer}-{t}-{p}"))
        for t in TOPICS
        for p in range(3)
    ]
    await asyncio.gather(*futs)


async def test_commit_shows_every_partition_at_once_and_abort_none(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    try:
        await setup(b)
        keep = await b.begin_transaction()
        drop = await b.begin_transaction()
        await write_everywhere(b, keep.id, "keep")
        await write_everywhere(b, drop.id, "drop")
        await b.write("in", 0, make_batch(1, producer="plain"))
        # uncommitted: read-uncommitted readers see both, read-committed ones nothing yet
        assert all(len(v) >= 4 for v in everywhere(b, committed=False).values())
        assert all(v == [] for v in everywhere(b, committed=True).values())
        await b.abort_transaction(drop.id)
        assert all(v == [] for v in everywhere(b, committed=True).values())
        await b.commit_transaction(keep.id)
        got = everywhere(b, committed=True)
        for (t, p), v in got.items():
            want = [f"keep-{t}-{p}".encode()] * 2
            if (t, p) == ("in", 0):
                want.append(b"plain")
            assert v == want, (t, p)
        # read-uncommitted readers keep seeing everything, aborted data included
        assert (
            everywhere(b, committed=False)[("mid", 1)] == [b"keep-mid-1"] * 2 + [b"drop-mid-1"] * 2
        )
    finally:
        await b.close()


async def test_offsets_move_only_when_the_transaction_commits(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    try:
        await setup(b)
        await b.write("in", 1, make_batch(5, producer="src"))
        await b.commit_offset("in", 1, "job", 1)
        for outcome in ("abort", "commit"):
            txn = await b.begin_transaction()
            await b.submit_in_transaction(txn.id, "out", 0, make_batch(1, producer=outcome))
            await b.add_transaction_offsets(txn.id, [TxnOffset("in", 1, "job", 4)])
            assert b.committed_offset("in", 1, "job") == 1
            if outcome == "abort":
                await b.abort_transaction(txn.id)
                assert b.committed_offset("in", 1, "job") == 1
            else:
                await b.commit_transaction(txn.id)
                assert b.committed_offset("in", 1, "job") == 4
        await b.close()
        b = await open_broker(tmp_path)
        assert b.committed_offset("in", 1, "job") == 4
    finally:
        await b.close()


async def test_bad_input_gets_a_clear_error_and_changes_nothing(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    try:
        await setup(b)
        await b.write("in", 0, make_batch(3, producer="src"))
        with pytest.raises(UnknownTransactionError, match="unknown"):
            await b.commit_transaction(12345)
        txn = await b.begin_transaction()
        await b.submit_in_transaction(txn.id, "out", 0, make_batch(1, producer="w"))
        with pytest.raises(BadRequestError, match="end offset is 3"):
            await b.add_transaction_offsets(
                txn.id, [TxnOffset("in", 0, "job", 2), TxnOffset("in", 0, "other", 9)]
            )
        assert txn.offsets == {}  # the good one of the two was not taken either
        await b.commit_transaction(txn.id)
        assert b.committed_offset("in", 0, "job") is None
        with pytest.raises(TransactionEndedError, match="committed"):
            await b.commit_transaction(txn.id)
        with pytest.raises(TransactionEndedError, match="committed"):
            await b.abort_transaction(txn.id)
        with pytest.raises(TransactionEndedError):
            b.submit_in_transaction(txn.id, "out", 0, make_batch(1, producer="late"))
        assert records(b, "out", 0, committed=False) == [b"w"]
        with pytest.raises(BadRequestError, match="timeout"):
            await b.begin_transaction(timeout_ms=10**9)
    finally:
        await b.close()


async def test_a_transaction_past_its_timeout_is_aborted(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    try:
        await setup(b)
        txn = await b.begin_transaction(timeout_ms=200)
        await write_everywhere(b, txn.id, "slow")
        assert b.stable_offset("mid", 2) == 0
        for _ in range(200):
            if b.stable_offset("mid", 2) > 0:
                break
            await asyncio.sleep(0.02)
        assert all(v == [] for v in everywhere(b, committed=True).values())
        assert b.stable_offset("mid", 2) == b.actor("mid", 2).end_offset == 3
        with pytest.raises(TransactionEndedError, match="timed out"):
            await b.commit_transaction(txn.id)
    finally:
        await b.close()


async def test_a_newer_instance_fences_the_older(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    try:
        await setup(b)
        old = await b.init_transactional_producer("etl")
        t_old = await b.begin_transaction(producer="etl", epoch=old.epoch)
        await b.submit_in_transaction(t_old.id, "out", 0, make_batch(1, producer="zombie"))
        with pytest.raises(TransactionBusyError):
            await b.begin_transaction(producer="etl", epoch=old.epoch)
        new = await b.init_transactional_producer("etl")
        assert (new.number, new.epoch) == (old.number, old.epoch + 1)
        # the old instance's open transaction was aborted; everything it does now fails
        with pytest.raises(ProducerFencedError, match="newer instance"):
            b.submit_in_transaction(t_old.id, "out", 0, make_batch(1, producer="zombie2"))
        with pytest.raises(ProducerFencedError, match="newer instance"):
            await b.commit_transaction(t_old.id)
        with pytest.raises(ProducerFencedError, match="newer instance"):
            await b.begin_transaction(producer="etl", epoch=old.epoch)
        t_new = await b.begin_transaction(producer="etl", epoch=new.epoch)
        await b.submit_in_transaction(t_new.id, "out", 0, make_batch(1, producer="fresh"))
        await b.commit_transaction(t_new.id)
        assert records(b, "out", 0, committed=True) == [b"fresh"]
        await b.close()
        b = await open_broker(tmp_path)  # epochs are durable
        with pytest.raises(ProducerFencedError):
            await b.begin_transaction(producer="etl", epoch=old.epoch)
        assert (await b.init_transactional_producer("etl")).epoch == new.epoch + 1
    finally:
        await b.close()


async def test_keyed_transactions_are_joined_and_replaced(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    try:
        await setup(b)
        a = await b.begin_transaction(producer="spark-q", key="7")
        again = await b.begin_transaction(producer="spark-q", key="7")
        assert again is a
        await b.submit_in_transaction(a.id, "out", 1, make_batch(2, producer="task"))
        nxt = await b.begin_transaction(producer="spark-q", key="8")  # a replay starts over
        assert nxt.id != a.id
        with pytest.raises(TransactionEndedError, match="key '8'"):
            await b.commit_transaction(a.id)
        assert records(b, "out", 1, committed=True) == []
        await b.commit_transaction(nxt.id)
    finally:
        await b.close()


async def test_a_restart_aborts_what_was_open(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await setup(b)
    done = await b.begin_transaction()
    await write_everywhere(b, done.id, "done")
    await b.commit_transaction(done.id)
    left = await b.begin_transaction()
    await write_everywhere(b, left.id, "left")
    await b.add_transaction_offsets(left.id, [TxnOffset("in", 0, "job", 1)])
    await b.close()
    b = await open_broker(tmp_path)
    try:
        for (t, p), v in everywhere(b, committed=True).items():
            assert v == [f"done-{t}-{p}".encode()] * 2
            assert b.stable_offset(t, p) == b.actor(t, p).end_offset
        assert b.committed_offset("in", 0, "job") is None
        with pytest.raises(TransactionEndedError, match="aborted at restart"):
            await b.commit_transaction(left.id)
    finally:
        await b.close()


async def test_read_committed_waiters_wake_on_commit(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    try:
        await setup(b)
        txn = await b.begin_transaction()
        await b.submit_in_transaction(txn.id, "out", 2, make_batch(1, producer="x"))
        actor = b.actor("out", 2)
        assert await actor.wait_for_data(0, 0.05) is True
        waiter = asyncio.ensure_future(actor.wait_for_data(0, 10, committed=True))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        await b.commit_transaction(txn.id)
        assert await waiter is True
    finally:
        await b.close()


async def test_an_empty_transaction_commits_and_dropped_topics_are_skipped(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    try:
        await setup(b)
        await b.commit_transaction((await b.begin_transaction()).id)
        txn = await b.begin_transaction()
        await b.submit_in_transaction(txn.id, "mid", 0, make_batch(1, producer="gone"))
        await b.submit_in_transaction(txn.id, "out", 0, make_batch(1, producer="kept"))
        await b.drop_topic("mid")
        await b.commit_transaction(txn.id)
        assert records(b, "out", 0, committed=True) == [b"kept"]
    finally:
        await b.close()
