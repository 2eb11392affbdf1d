"""Durable subscriptions hold data back like important consumers: the backlog quota
counts what they have not acknowledged (refuse, or evict by policy) and retention never
removes it, across a restart too (real LMDB, real partition actors)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.broker.test_subscriptions import attach, one, open_broker
from tests.storage.conftest import make_batch
from weir.broker.broker import Broker
from weir.broker.tenancy import Policies
from weir.broker.topics import ConsumerConfig
from weir.errors import BacklogQuotaExceededError, BadRequestError

SMALL_BLOBS = {"low_watermark": 10_000, "max_blob_size": 20_000}


async def write_until_refused(b: Broker, topic: str, batches: int = 300) -> int:
    """Write batches of 10 x 100 B; how many went in before the first refusal."""
    for i in range(batches):
        try:
            await b.write(topic, 0, make_batch(10, producer="p", first_seq=i * 10 + 1))
        except BacklogQuotaExceededError as err:
            assert err.retryable and "subscriptions have not acknowledged" in err.message
            return i
    return batches


async def test_the_backlog_quota_counts_what_a_subscription_has_not_acknowledged(
    tmp_path: Path,
) -> None:
    b = await open_broker(tmp_path, **SMALL_BLOBS)
    await b.create_namespace("quota", {"backlog_quota_bytes": 30_000})
    await b.create_topic("quota/t")  # no important consumer: only the subscription holds back
    await b.create_subscription("quota/t", "s", "shared", "earliest")
    n = await write_until_refused(b, "quota/t")
    assert 0 < n < 300
    stored = b.actor("quota/t", 0).end_offset
    with pytest.raises(BacklogQuotaExceededError):  # still over: nothing stored
        await b.write("quota/t", 0, make_batch(10, producer="q"))
    assert b.actor("quota/t", 0).end_offset == stored
    assert await b.skip_subscription("quota/t", "s") == stored  # it catches up
    await b.write("quota/t", 0, make_batch(10, producer="q"))
    # a deleted subscription holds nothing back
    await b.create_subscription("quota/t", "s2", "shared", "earliest")
    assert await write_until_refused(b, "quota/t") < 300
    await b.delete_subscription("quota/t", "s2")
    await b.write("quota/t", 0, make_batch(10, producer="r"))
    await b.close()


async def test_consumer_backlog_eviction_moves_the_slowest_cursors_instead(tmp_path: Path) -> None:
    b = await open_broker(tmp_path, **SMALL_BLOBS)
    quota = 30_000
    await b.create_namespace(
        "evict", {"backlog_quota_bytes": quota, "backlog_quota_policy": "consumer_backlog_eviction"}
    )
    await b.create_topic("evict/t", consumers=[ConsumerConfig("audit", important=True)])
    await b.create_subscription("evict/t", "slow", "exclusive", "earliest")
    inbox, _ = await attach(b, "fast", "shared", permits=10_000, topic="evict/t")
    assert await write_until_refused(b, "evict/t") == 300  # never refused
    await inbox.wait(3000)
    fast = b.subscription("evict/t", "fast")
    await fast.acknowledge([(0, 0, 3000)])
    actor = b.actor("evict/t", 0)
    async with asyncio.timeout(10):  # the consumer's offset is committed in the background
        while (b.committed_offset("evict/t", 0, "audit") or 0) == 0:
            await asyncio.sleep(0.01)
    slow = b.describe_subscription("evict/t", "slow").partitions[0]
    assert 0 < slow.mark_delete < 3000
    for start in (slow.mark_delete, b.committed_offset("evict/t", 0, "audit") or 0):
        # what is left for them is within the quota, plus the write that passed it
        assert actor.log.bytes_from(start, 10 * quota) <= quota + 20_000
    assert b.describe_subscription("evict/t", "fast").backlog == 0
    await b.close()
    b = await open_broker(tmp_path, **SMALL_BLOBS)  # the moved cursor was stored
    assert b.describe_subscription("evict/t", "slow").partitions[0].mark_delete == slow.mark_delete
    await b.close()


def test_the_backlog_quota_policy_is_one_of_pulsars_three() -> None:
    assert Policies({"backlog_quota_policy": "producer_request_hold"})
    with pytest.raises(BadRequestError, match="consumer_backlog_eviction"):
        Policies({"backlog_quota_policy": "drop_newest"})


async def test_retention_keeps_what_subscriptions_have_not_acknowledged_across_a_restart(
    tmp_path: Path,
) -> None:
    b = await open_broker(tmp_path, **SMALL_BLOBS)
    await b.create_topic("t", partitions=1, retention_ms=1, retention_bytes=1)
    await b.create_subscription("t", "a", "shared", "earliest")
    await b.create_subscription("t", "b", "exclusive", "earliest")
    for i in range(30):
        await b.write("t", 0, make_batch(10, producer="p", first_seq=i * 10 + 1))
    assert await b.skip_subscription("t", "a") == 300  # b lags behind
    b_sub = b.subscription("t", "b")
    inbox, _ = await attach(b, "b", "exclusive", permits=250)
    await inbox.wait(250)
    await b_sub.acknowledge([(0, 0, 150)])
    await b_sub.acknowledge(one([(0, 200)]))  # acked above mark-delete: still kept
    now = 10**13
    await b.run_retention(now)
    start = b.actor("t", 0).start_offset
    assert start <= 150  # whole blobs, all of them below b's mark-delete
    await b.close()
    b = await open_broker(tmp_path, **SMALL_BLOBS)
    await b.run_retention(now)
    assert b.actor("t", 0).start_offset == start
    inbox, _ = await attach(b, "b", "exclusive", permits=300)
    got = [o for _, o, _ in await inbox.wait(149)]
    assert got == [o for o in range(150, 300) if o != 200]
    # a topic whose message TTL says so explicitly lets retention go past a subscription
    await b.alter_topic("t", policies={"message_ttl_ms": 1})
    await b.run_retention(now)
    assert b.actor("t", 0).start_offset > 150
    await b.close()
