"""Broker: topic registry, partition actors, pinning, generations, consumers, backpressure."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.storage.conftest import hold, make_batch, queued
from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.broker.consumers import ConsumerGroup
from weir.broker.topics import ConsumerConfig, canonical_topic
from weir.errors import (
    AlreadyExistsError,
    BadRequestError,
    OffsetOutOfRangeError,
    OverloadedError,
    StaleGenerationError,
    StorageFullError,
    UnknownPartitionError,
    UnknownTopicError,
)


async def open_broker(path: Path, **kw: object) -> Broker:
    return await Broker.open(BrokerConfig(data_dir=path, retention_interval_s=3600, **kw))  # type: ignore[arg-type]


def test_topic_names() -> None:
    assert canonical_topic("orders") == "public/default/orders"
    assert canonical_topic("/local/orders", "/local") == "public/default/orders"
    assert canonical_topic("shop/orders") == "public/shop/orders"
    assert canonical_topic("acme/shop/orders/") == "acme/shop/orders"
    for bad in ("", "a/b/c/d", "with space", "../x", 5):
        with pytest.raises(BadRequestError):
            canonical_topic(bad)  # type: ignore[arg-type]


async def test_topic_lifecycle_persists(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    cfg = await b.create_topic(
        "orders", partitions=2, consumers=[ConsumerConfig("billing", important=True)]
    )
    assert cfg.partitions == 2 and cfg.retention_ms == 7 * 24 * 3600 * 1000
    with pytest.raises(AlreadyExistsError):
        await b.create_topic("public/default/orders")
    with pytest.raises(BadRequestError, match="never removed"):
        await b.alter_topic("orders", partitions=1)
    await b.alter_topic("orders", partitions=4, retention_ms=1000, codecs=["raw", "gzip"])
    await b.write("orders", 3, make_batch(5, producer="p"))
    gen1 = b.generation
    await b.close()
    b = await open_broker(tmp_path)
    cfg = b.topic("orders")
    assert (cfg.partitions, cfg.retention_ms, cfg.codecs) == (4, 1000, (1, 2))
    assert cfg.consumers["billing"].important
    assert b.generation == gen1 + 1
    assert [p.end_offset for p in b.partitions("orders")] == [0, 0, 0, 5]
    await b.drop_topic("orders")
    with pytest.raises(UnknownTopicError):
        b.topic("orders")
    # a new topic of the same name starts empty
    await b.create_topic("orders", partitions=4)
    assert [p.end_offset for p in b.partitions("orders")] == [0, 0, 0, 0]
    await b.close()


async def test_concurrent_writes_share_commits_and_wake_readers(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=8)
    actor = b.actor("t", 0)
    assert not await actor.wait_for_data(0, timeout=0)  # nothing there yet
    # created first, so it runs (and waits) before any write below is queued
    waiter = asyncio.create_task(actor.wait_for_data(0, timeout=10))

    # writes to 8 partitions that wait together for the committer share one commit
    committer = b.store.committer
    gate = hold(committer)
    first = [b.submit("t", p, make_batch(10, producer=f"p{p}")) for p in range(8)]
    await queued(committer, 8)
    commits0, jobs0 = committer.stats.commits, committer.stats.jobs
    gate.set()
    assert [r[0].written for r in await asyncio.gather(*first)] == [10] * 8
    assert (committer.stats.commits - commits0, committer.stats.jobs - jobs0) == (1, 8)
    assert await waiter

    async def producer(i: int) -> None:
        for r in range(1, 20):
            res = await b.write("t", i % 8, make_batch(10, producer=f"p{i}", first_seq=r * 10 + 1))
            assert res[0].written == 10

    await asyncio.gather(*(producer(i) for i in range(8)))
    assert [p.end_offset for p in b.partitions("t")] == [200] * 8
    # a write of the same messages again is skipped by dedup
    res = await b.write("t", 0, make_batch(10, producer="p0", first_seq=1))
    assert (res[0].written, res[0].skipped) == (0, 10)
    await b.close()


async def test_failed_commit_fails_the_queue_then_writes_resume(tmp_path: Path) -> None:
    b = await open_broker(tmp_path, map_size=4 << 20, min_disk_free=0)
    await b.create_topic("t", partitions=1)
    await b.write("t", 0, make_batch(10, producer="p"))
    big = make_batch(2000, producer="p", first_seq=11, size=4000)  # ~8 MB: cannot fit the map
    after = make_batch(5, producer="p", first_seq=2011)
    f_big = b.submit("t", 0, big)  # queued in call order: big first
    f_after = b.submit("t", 0, after)
    results = await asyncio.gather(f_big, f_after, return_exceptions=True)
    assert isinstance(results[0], StorageFullError)
    # the later write of the same producer must not overtake the failed one
    assert isinstance(results[1], Exception)
    assert b.actor("t", 0).end_offset == 10
    res = await b.write("t", 0, make_batch(5, producer="p", first_seq=11))
    assert res[0].offset == 10 and res[0].written == 5
    await b.close()


async def test_backpressure_refuses_instead_of_growing(tmp_path: Path) -> None:
    b = await open_broker(tmp_path, max_partition_queue_bytes=50_000)
    await b.create_topic("t", partitions=1)
    tasks = [
        asyncio.create_task(b.write("t", 0, make_batch(100, producer=f"p{i}"))) for i in range(20)
    ]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    refused = [r for r in results if isinstance(r, OverloadedError)]
    ok = [r for r in results if isinstance(r, list)]
    assert refused and ok
    assert refused[0].retryable
    assert b.actor("t", 0).end_offset == 100 * len(ok)
    assert b.actor("t", 0).queued_bytes == 0
    await b.close()


async def test_producer_pinning_and_generations(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=4)
    p = await b.resolve_partition("t", "svc-1")
    assert p == await b.resolve_partition("t", "svc-1")
    await b.write("t", p, make_batch(1, producer="svc-1"))
    with pytest.raises(BadRequestError, match="pinned to partition"):
        await b.resolve_partition("t", "svc-1", partition=(p + 1) % 4)
    assert await b.resolve_partition("t", "", partition=2, generation=b.generation) == 2
    with pytest.raises(StaleGenerationError):
        await b.resolve_partition("t", "", partition=2, generation=b.generation - 1)
    with pytest.raises(UnknownPartitionError):
        await b.resolve_partition("t", "", partition=4)
    with pytest.raises(BadRequestError):
        await b.resolve_partition("t")
    await b.close()
    b = await open_broker(tmp_path)
    await b.alter_topic("t", partitions=16)  # growing the topic does not move a pinned producer
    assert await b.resolve_partition("t", "svc-1") == p
    await b.close()


async def test_offsets_commit_describe_and_never_backwards(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=2)
    await b.write("t", 0, make_batch(10, producer="p"))
    await b.ensure_consumer("t", "c")
    assert await b.commit_offset("t", 0, "c", 4)
    assert not await b.commit_offset("t", 0, "c", 3)
    assert b.committed_offset("t", 0, "c") == 4
    with pytest.raises(BadRequestError, match="end offset"):
        await b.commit_offset("t", 0, "c", 11)
    assert await b.commit_offset("t", 0, "c", 2, allow_backwards=True)
    info = b.describe_consumer("t", "c")
    assert [(i.committed_offset, i.end_offset, i.lag) for i in info] == [(2, 10, 8), (0, 0, 0)]
    await b.close()
    b = await open_broker(tmp_path)
    assert b.committed_offset("t", 0, "c") == 2
    assert b.read_start("t", 0, "c") == 2
    await b.close()


async def test_retention_keeps_what_an_important_consumer_has_not_read(tmp_path: Path) -> None:
    b = await open_broker(tmp_path, low_watermark=10_000, max_blob_size=20_000)
    await b.create_topic(
        "t", partitions=1, retention_ms=1, consumers=[ConsumerConfig("audit", important=True)]
    )
    for i in range(20):
        await b.write("t", 0, make_batch(10, producer="p", first_seq=i * 10 + 1))
    now = 10**13
    assert await b.run_retention(now) == 0  # audit has read nothing
    await b.commit_offset("t", 0, "audit", 120)
    assert await b.run_retention(now) > 0
    start = b.actor("t", 0).start_offset
    assert 0 < start <= 120
    await b.close()


async def test_delete_records_moves_the_start_offset(tmp_path: Path) -> None:
    """delete_records (Kafka's DeleteRecords, for any front): never past the end, never
    backwards, kept across a restart; a consumer committed below the new start reads
    from it."""
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=1)
    await b.write("t", 0, make_batch(10, producer="p"))
    await b.commit_offset("t", 0, "c", 2)
    await b.write("t", 0, make_batch(10, producer="p", first_seq=11))
    assert await b.delete_records("t", 0, 15) == 15
    assert await b.delete_records("t", 0, 5) == 15
    with pytest.raises(OffsetOutOfRangeError):
        await b.delete_records("t", 0, 21)
    assert b.read_start("t", 0, "c") == 15
    await b.close()
    b = await open_broker(tmp_path)
    a = b.actor("t", 0)
    assert (a.start_offset, a.end_offset) == (15, 20)
    assert await b.delete_records("t", 0, -1) == 20  # -1: everything
    await b.close()


async def test_delete_offset_per_partition(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=2)
    await b.write("t", 0, make_batch(10, producer="p"))
    await b.commit_offset("t", 0, "c", 4)
    await b.commit_offset("t", 1, "c", 0)
    assert await b.delete_offset("t", 0, "c")
    assert not await b.delete_offset("t", 0, "c")
    assert b.committed_offset("t", 0, "c") is None and b.committed_partitions("t", "c") == [1]
    assert "c" in b.topic("t").consumers
    assert await b.delete_offset("t", 1, "c")  # its last offset on t: the consumer goes
    assert "c" not in b.topic("t").consumers
    await b.close()
    b = await open_broker(tmp_path)
    assert b.committed_offset("t", 1, "c") is None
    await b.close()


class Member:
    def __init__(self, sid: str) -> None:
        self.session_id = sid
        self.owned: set[int] = set()
        self.revoked: list[tuple[int, bool]] = []

    def assign(self, topic: str, partition: int) -> None:
        assert partition not in self.owned
        self.owned.add(partition)

    def revoke(self, topic: str, partition: int, graceful: bool) -> None:
        self.revoked.append((partition, graceful))
        if not graceful:
            self.owned.discard(partition)


async def test_group_spreads_partitions_and_moves_them_gracefully() -> None:
    g = ConsumerGroup("t", "c", partitions=4, rebalance_timeout=0.05)
    a, b = Member("a"), Member("b")
    g.join(a)
    assert a.owned == {0, 1, 2, 3}
    g.join(b)
    # b gets nothing until a lets go: no partition is ever read by two sessions
    assert b.owned == set() and len(a.revoked) == 2 and all(gr for _, gr in a.revoked)
    for p, _ in list(a.revoked):
        a.owned.discard(p)
        g.released("a", p)
    assert len(a.owned) == 2 and len(b.owned) == 2 and not (a.owned & b.owned)
    # a session that never confirms loses the partition after the timeout
    c = Member("c")
    revoked_before = {m.session_id: list(m.revoked) for m in (a, b)}
    g.join(c)  # a keeps 2 (4 over 3 sessions: 2, 1, 1); b must give one up and never does
    (asked,) = b.revoked[len(revoked_before["b"]) :]
    assert asked[1] and a.revoked == revoked_before["a"] and not c.owned
    deadline = time.monotonic() + 10
    while not c.owned:  # until the rebalance timeout (50 ms) takes it by force
        assert time.monotonic() < deadline, "the partition was never taken from b"
        await asyncio.sleep(0.01)
    assert c.owned == {asked[0]} and b.revoked[-1] == (asked[0], False)
    assert len(a.owned) == 2 and len(b.owned) == 1
    # leaving frees partitions at once
    g.leave("a")
    owned = [m.owned for m in (b, c)]
    assert set().union(*owned) == {0, 1, 2, 3} and not (owned[0] & owned[1])
    g.close()
