"""Durable subscriptions in the broker (real LMDB, real partition actors): cursors, acks,
dispatch per type, redelivery, retention; the wire and SDK are tested in tests/client."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from tests.storage.conftest import make_batch
from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.broker.subscriptions import AttachedConsumer, Delivery
from weir.broker.subscriptions.cursor import StoredCursor, drop_acked
from weir.broker.subscriptions.ranges import RangeSet
from weir.errors import (
    AlreadyExistsError,
    BadRequestError,
    ConsumerBusyError,
    UnknownSubscriptionError,
    WeirError,
)


async def open_broker(path: Path, **kw: object) -> Broker:
    return await Broker.open(BrokerConfig(data_dir=path, retention_interval_s=3600, **kw))  # type: ignore[arg-type]


class Inbox:
    """The consumer's side of a delivery: what a front would send on the wire."""

    def __init__(self) -> None:
        self.got: list[tuple[int, int, int]] = []  # (partition, offset, redelivery count)
        self.closed: WeirError | None = None
        self.event = asyncio.Event()

    def deliver(self, d: Delivery) -> None:
        self.got.extend(
            (d.partition, o, n) for o, n in zip(d.offsets, d.redelivery_counts, strict=True)
        )
        self.event.set()

    def close(self, err: WeirError) -> None:
        self.closed = err

    async def wait(self, n: int) -> list[tuple[int, int, int]]:
        async with asyncio.timeout(10):
            while len(self.got) < n:
                self.event.clear()
                await self.event.wait()
        return self.got


async def attach(
    b: Broker,
    sub: str,
    type: str,
    permits: int = 1000,
    name: str = "",
    topic: str = "t",
    **kw: object,
) -> tuple[Inbox, AttachedConsumer]:
    inbox = Inbox()
    s, c = await b.subscribe(topic, sub, type, "earliest", inbox, consumer_name=name, **kw)  # type: ignore[arg-type]
    s.flow(c.consumer_id, permits)
    return inbox, c


async def fill(b: Broker, n: int, partition: int = 0) -> None:
    await b.write("t", partition, make_batch(n, producer=f"p{partition}"))


def one(ids: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(partition, offset) pairs as the (partition, start, end) ranges acks take."""
    return [(p, o, o + 1) for p, o in ids]


def test_range_set_merges_and_trims() -> None:
    rs = RangeSet()
    for x in (5, 7, 6, 10, 3):
        rs.add(x)
    assert list(rs) == [(3, 4), (5, 8), (10, 11)] and rs.count == 5 and 6 in rs and 8 not in rs
    rs.add_range(4, 10)
    assert list(rs) == [(3, 11)]
    rs.drop_below(6)
    assert list(rs) == [(6, 11)]
    assert list(RangeSet.decode(rs.encode())) == [(6, 11)]
    assert (rs.end_of(7), rs.end_of(11), rs.end_of(2)) == (11, 11, 2)


@settings(max_examples=300, deadline=None)
@given(
    mark=hs.integers(0, 40),
    acks=hs.lists(hs.tuples(hs.integers(0, 80), hs.integers(1, 12)), max_size=12),
    offsets=hs.sets(hs.integers(0, 90), max_size=60),
)
def test_dispatch_run_finding_drops_exactly_the_acked_offsets(
    mark: int, acks: list[tuple[int, int]], offsets: set[int]
) -> None:
    """drop_acked (a lookup per run) keeps exactly what the per-offset check keeps."""
    cursor = StoredCursor(None, b"k", mark)  # type: ignore[arg-type] - never persisted here
    for a, n in acks:
        cursor.ack_range(a, a + n)
    given_offsets = sorted(offsets)
    assert drop_acked(cursor, given_offsets) == [o for o in given_offsets if not cursor.is_acked(o)]


async def test_individual_acks_survive_a_restart_and_the_rest_comes_again(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=1)
    await fill(b, 10)
    inbox, _c = await attach(b, "s", "exclusive")
    assert [o for _, o, _ in await inbox.wait(10)] == list(range(10))
    sub = b.subscription("t", "s")
    await sub.acknowledge(one([(0, o) for o in (0, 1, 2, 5, 7)]))
    info = b.describe_subscription("t", "s")
    p = info.partitions[0]
    assert (p.mark_delete, p.acked_ranges, p.backlog, p.unacked) == (3, 2, 5, 5)
    assert info.consumers[0].unacked == 5
    await b.close()
    b = await open_broker(tmp_path)
    inbox, _c = await attach(b, "s", "exclusive")
    assert [o for _, o, _ in await inbox.wait(5)] == [3, 4, 6, 8, 9]
    # an ack of a message delivered before the restart is still accepted
    await b.subscription("t", "s").acknowledge(one([(0, 3)]))
    assert b.describe_subscription("t", "s").partitions[0].mark_delete == 4
    await b.close()


async def test_exclusive_refuses_a_second_consumer_and_another_type(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=1)
    await attach(b, "s", "exclusive")
    with pytest.raises(ConsumerBusyError, match="exclusive"):
        await attach(b, "s", "exclusive")
    with pytest.raises(ConsumerBusyError, match="cannot attach a shared"):
        await attach(b, "s", "shared")
    assert len(b.describe_subscription("t", "s").consumers) == 1
    await b.close()


async def test_shared_spreads_refuses_cumulative_and_redelivers_a_lost_consumers(
    tmp_path: Path,
) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=2)
    a, ca = await attach(b, "s", "shared", permits=30)
    z, cz = await attach(b, "s", "shared", permits=30)
    await fill(b, 20, 0)
    await fill(b, 20, 1)
    async with asyncio.timeout(10):
        while len(a.got) + len(z.got) < 40:
            await asyncio.sleep(0.01)
    assert len(a.got) + len(z.got) == 40 and a.got and z.got
    assert not {(p, o) for p, o, _ in a.got} & {(p, o) for p, o, _ in z.got}
    sub = b.subscription("t", "s")
    with pytest.raises(BadRequestError, match="cumulative"):
        await sub.acknowledge_cumulative(0, 5)
    await sub.acknowledge(one([(p, o) for p, o, _ in a.got]))
    a_held = {(p, o) for p, o, _ in a.got}
    z_held = {(p, o) for p, o, _ in z.got}
    sub.detach(cz.consumer_id)  # z goes away with everything unacked
    sub.flow(ca.consumer_id, 100)
    got = await a.wait(40)
    again = got[len(a_held) :]
    assert {(p, o) for p, o, _ in again} == z_held
    assert all(n == 1 for _, _, n in again)
    await b.close()


async def test_failover_hands_over_in_order(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=1)
    inboxes = {}
    consumers = {}
    for name in ("c", "a", "b"):
        inboxes[name], consumers[name] = await attach(b, "s", "failover", name=name)
    await fill(b, 5)
    await inboxes["a"].wait(5)
    assert not inboxes["b"].got and not inboxes["c"].got
    sub = b.subscription("t", "s")
    await sub.acknowledge_cumulative(0, 1)
    sub.detach(consumers["a"].consumer_id)
    assert [(o, n) for _, o, n in await inboxes["b"].wait(3)] == [(2, 1), (3, 1), (4, 1)]
    assert b.describe_subscription("t", "s").partitions[0].active_consumer == "b"
    sub.detach(consumers["b"].consumer_id)
    assert [(o, n) for _, o, n in await inboxes["c"].wait(3)] == [(2, 2), (3, 2), (4, 2)]
    await b.close()


async def test_bad_acks_change_nothing(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=1)
    await fill(b, 3)
    inbox, _c = await attach(b, "s", "exclusive", permits=2)
    await inbox.wait(2)
    sub = b.subscription("t", "s")
    before = b.describe_subscription("t", "s")
    with pytest.raises(BadRequestError, match="never delivered"):
        await sub.acknowledge(one([(0, 0), (0, 2)]))  # 2 was never delivered: 0 is not acked either
    with pytest.raises(BadRequestError, match="never delivered"):
        await sub.acknowledge_cumulative(0, 7)
    with pytest.raises(BadRequestError, match="delay"):
        sub.negative_acknowledge(one([(0, 0)]), -1)
    with pytest.raises(UnknownSubscriptionError):
        b.describe_subscription("t", "nope")
    with pytest.raises(UnknownSubscriptionError):
        await b.subscribe("t", "nope", "shared", "earliest", inbox, create=False)
    with pytest.raises(BadRequestError, match="type"):
        await b.subscribe("t", "s2", "round-robin", "earliest", inbox)
    assert b.describe_subscription("t", "s") == before
    with pytest.raises(AlreadyExistsError):
        await b.create_subscription("t", "s")
    with pytest.raises(BadRequestError, match="needs the time"):
        await b.create_subscription("t", "s3", "shared", "timestamp")
    with pytest.raises(ConsumerBusyError, match="attached"):
        await b.delete_subscription("t", "s")
    await b.delete_subscription("t", "s", force=True)
    assert isinstance(inbox.closed, UnknownSubscriptionError)
    assert b.list_subscriptions("t") == []
    await b.close()


async def test_negative_ack_and_ack_timeout_redeliver_with_a_count(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=1)
    await fill(b, 2)
    inbox, _c = await attach(b, "s", "shared", ack_timeout_ms=200)
    await inbox.wait(2)
    sub = b.subscription("t", "s")
    sub.negative_acknowledge(one([(0, 0)]), 0)
    got = await inbox.wait(3)
    assert got[2] == (0, 0, 1)
    await sub.acknowledge(one([(0, 0)]))
    got = await inbox.wait(4)  # offset 1 was never acked: the ack timeout sends it again
    assert got[3] == (0, 1, 1)
    await sub.acknowledge(one([(0, 1)]))
    assert b.describe_subscription("t", "s").partitions[0].mark_delete == 2
    await b.close()


async def test_retention_keeps_what_a_subscription_has_not_acked(tmp_path: Path) -> None:
    b = await open_broker(tmp_path, low_watermark=10_000, max_blob_size=20_000)
    await b.create_topic("t", partitions=1, retention_ms=1)
    await b.create_subscription("t", "s", "exclusive", "earliest")
    for i in range(20):
        await b.write("t", 0, make_batch(10, producer="p", first_seq=i * 10 + 1))
    now = 10**13
    assert await b.run_retention(now) == 0  # s has acked nothing
    inbox, _c = await attach(b, "s", "exclusive", permits=120)
    await inbox.wait(120)
    await b.subscription("t", "s").acknowledge_cumulative(0, 119)
    assert await b.run_retention(now) > 0
    assert 0 < b.actor("t", 0).start_offset <= 120
    await b.close()


async def test_new_partitions_join_and_a_dropped_topic_takes_its_subscriptions(
    tmp_path: Path,
) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=1)
    inbox, _c = await attach(b, "s", "shared")
    await b.alter_topic("t", partitions=2)
    await fill(b, 3, partition=1)
    assert [(p, o) for p, o, _ in await inbox.wait(3)] == [(1, 0), (1, 1), (1, 2)]
    await b.subscription("t", "s").acknowledge(one([(1, 0), (1, 1), (1, 2)]))
    assert [p.mark_delete for p in b.describe_subscription("t", "s").partitions] == [0, 3]
    await b.close()
    b = await open_broker(tmp_path)
    assert [p.mark_delete for p in b.describe_subscription("t", "s").partitions] == [0, 3]
    inbox, _c = await attach(b, "s", "shared")
    await b.drop_topic("t")
    assert isinstance(inbox.closed, UnknownSubscriptionError)  # the consumer is told why
    await b.create_topic("t", partitions=1)
    assert b.list_subscriptions("t") == []
    await b.close()
    b = await open_broker(tmp_path)
    assert b.list_subscriptions("t") == []
    await b.close()


async def test_a_subscription_without_consumers_takes_the_next_consumers_type(
    tmp_path: Path,
) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=1)
    await b.create_subscription("t", "s", "exclusive")
    _, c = await attach(b, "s", "shared")
    _, d = await attach(b, "s", "shared")  # a shared subscription now: both are welcome
    assert b.describe_subscription("t", "s").type.value == "shared"
    b.subscription("t", "s").detach(c.consumer_id)
    b.subscription("t", "s").detach(d.consumer_id)
    await b.close()
    b = await open_broker(tmp_path)
    assert b.describe_subscription("t", "s").type.value == "shared"
    await b.close()


async def test_seek_resets_the_cursor_and_drops_the_consumers(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=1)
    await fill(b, 5)
    inbox, _c = await attach(b, "s", "exclusive")
    await inbox.wait(5)
    await b.subscription("t", "s").acknowledge(one([(0, 1), (0, 3)]))
    with pytest.raises(BadRequestError):
        await b.seek_subscription("t", "s", {0: -1})
    info = await b.seek_subscription("t", "s", {0: 99})  # clamped to the end
    assert info.partitions[0].mark_delete == 5 and info.consumers == []
    assert inbox.closed is not None and inbox.closed.retryable
    info = await b.seek_subscription("t", "s", timestamp_ms=0)
    assert (info.partitions[0].mark_delete, info.partitions[0].acked_ranges) == (0, 0)
    await b.close()
    b = await open_broker(tmp_path)  # the seek is durable
    assert b.describe_subscription("t", "s").backlog == 5
    await b.close()


async def test_a_message_nacked_too_often_goes_to_the_dead_letter_topic(tmp_path: Path) -> None:
    from weir.broker.subscriptions import DeadLetterPolicy
    from weir.storage.batch import decode_payload, iter_batches
    from weir.storage.batch_encoding import encode_batch
    from weir.storage.incoming import validate_incoming

    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=1)
    batch = encode_batch([b"a", b"b"], keys=[b"k1", b"k2"], headers=[{"h": "1"}, None])
    await b.write("t", 0, validate_incoming([batch]))
    inbox = Inbox()
    s, c = await b.subscribe("t", "s", "shared", "earliest", inbox, dead_letter=DeadLetterPolicy(2))
    s.flow(c.consumer_id, 100)
    await inbox.wait(2)
    for n in range(3):  # delivered 3 times (counts 0, 1, 2), then the third nack buries it
        s.negative_acknowledge(one([(0, 0)]), 0)
        if n < 2:
            assert (await inbox.wait(3 + n))[-1] == (0, 0, n + 1)
    async with asyncio.timeout(10):
        while b.describe_subscription("t", "s").partitions[0].mark_delete < 1:
            await asyncio.sleep(0.01)
    dlq = b.actor("t-s-DLQ", 0)
    assert dlq.end_offset == 1
    chunk = dlq.read(0, 1 << 20).chunks[0]
    pos, h = next(iter_batches(chunk))
    p = decode_payload(chunk, pos, h)
    assert (p.data_list(), p.key_list()) == ([b"a"], [b"k1"])
    assert p.header_list()[0] == {
        "h": "1",
        "weir-origin-topic": "t",
        "weir-origin-partition": "0",
        "weir-origin-offset": "0",
        "weir-origin-subscription": "s",
    }
    await b.close()
    b = await open_broker(tmp_path)  # the policy is stored with the subscription
    sub = b.subscription("t", "s")
    assert sub.meta.max_redeliver_count == 2
    await b.close()


async def test_failover_spreads_partitions_over_the_ordered_consumers(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=3)
    a, ca = await attach(b, "s", "failover", name="a")
    z, _cz = await attach(b, "s", "failover", name="z")
    for p in range(3):
        await fill(b, 2, partition=p)
    await a.wait(4)
    await z.wait(2)
    assert {p for p, _, _ in a.got} == {0, 2} and {p for p, _, _ in z.got} == {1}
    info = b.describe_subscription("t", "s")
    assert [p.active_consumer for p in info.partitions] == ["a", "z", "a"]
    b.subscription("t", "s").detach(ca.consumer_id)
    await z.wait(6)  # a's partitions, from their unacked start, to the one left
    assert sorted((p, o, n) for p, o, n in z.got if p != 1) == [
        (0, 0, 1),
        (0, 1, 1),
        (2, 0, 1),
        (2, 1, 1),
    ]
    await b.close()


async def test_a_delayed_message_stays_back_across_a_restart(tmp_path: Path) -> None:
    import time

    from weir.storage.batch_encoding import encode_batch
    from weir.storage.incoming import validate_incoming

    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=1)
    hour = str(int(time.time() * 1000) + 3_600_000)
    batch = encode_batch([b"later", b"now"], headers=[{"weir-deliver-at": hour}, None])
    await b.write("t", 0, validate_incoming([batch]))
    for offset in (1, 2):  # before and after a restart: the time travels with the message
        if offset == 2:
            await b.write("t", 0, validate_incoming([encode_batch([b"next"])]))
        inbox, _c = await attach(b, "s", "shared")
        assert await inbox.wait(1) == [(0, offset, 0)]  # offset 0 is skipped, held back
        await b.subscription("t", "s").acknowledge(one([(0, offset)]))
        info = b.describe_subscription("t", "s")
        assert (info.backlog, info.unacked) == (1, 0)
        await b.close()
        b = await open_broker(tmp_path)
    await b.close()
