"""A topic's consumers (committed offsets: readers, YDB and Kafka consumers) are
Failover subscriptions of the same broker object: listed, described, consumed with
cumulative (or in-order) acks that are commits, seen by retention alike; data written
by the old code (committed offsets only) opens unchanged."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from tests.broker.test_subscriptions import attach, fill, one, open_broker
from tests.conftest import ROOT
from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.broker.observer import BrokerObserver
from weir.broker.topics import ConsumerConfig
from weir.errors import (
    AlreadyExistsError,
    BadRequestError,
    ConsumerBusyError,
    UnknownSubscriptionError,
)

FIXTURE = ROOT / "tests" / "fixtures" / "pre-tenancy-datadir.tar.gz"


async def test_a_consumer_is_a_failover_subscription_over_its_committed_offsets(
    tmp_path: Path,
) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=2, consumers=[ConsumerConfig("audit", important=True)])
    await fill(b, 6)
    await b.commit_offset("t", 0, "audit", 2)  # as a reader commits
    (info,) = b.list_subscriptions("t")
    assert (info.name, info.type.value, info.consumer) == ("audit", "failover", True)
    assert [p.mark_delete for p in info.partitions] == [2, 0] and info.backlog == 4
    inbox, c = await attach(b, "audit", "failover")
    assert [o for _, o, _ in await inbox.wait(4)] == [2, 3, 4, 5]
    sub = b.subscription("t", "audit")
    await sub.acknowledge(one([(0, 2), (0, 3)]))  # in order: the commit moves
    assert b.committed_offset("t", 0, "audit") == 4
    with pytest.raises(BadRequestError, match="acknowledge in order or cumulatively"):
        await sub.acknowledge(one([(0, 5)]))  # a gap: refused, nothing changes
    assert b.committed_offset("t", 0, "audit") == 4
    await sub.acknowledge_cumulative(0, 5)
    assert b.committed_offset("t", 0, "audit") == 6
    assert [p.committed_offset for p in b.describe_consumer("t", "audit")] == [6, 0]
    # one kind of reader at a time: a reader's commit is refused while it is attached
    with pytest.raises(ConsumerBusyError, match="1 subscription consumer"):
        await b.commit_offset("t", 0, "audit", 4, allow_backwards=True)
    assert b.describe_subscription("t", "audit").backlog == 0
    sub.detach(c.consumer_id)
    await b.commit_offset("t", 0, "audit", 4, allow_backwards=True)  # now it may: one state
    assert b.describe_subscription("t", "audit").backlog == 2
    # what a consumer's subscription cannot be
    with pytest.raises(BadRequestError, match="failover or exclusive only"):
        await attach(b, "audit", "shared")
    with pytest.raises(AlreadyExistsError, match="is a consumer of topic"):
        await b.create_subscription("t", "audit", "failover", "earliest")
    # seek back: the committed offset goes back too
    await b.seek_subscription("t", "audit", {0: 1})
    assert b.committed_offset("t", 0, "audit") == 1
    await b.close()
    b = await open_broker(tmp_path)  # durable: the committed offsets are the state
    assert [p.mark_delete for p in b.describe_subscription("t", "audit").partitions] == [1, 0]
    # deleting the subscription removes the consumer (and its offsets)
    await b.delete_subscription("t", "audit")
    assert "audit" not in b.topic("t").consumers and b.list_subscriptions("t") == []
    with pytest.raises(UnknownSubscriptionError):
        b.describe_subscription("t", "audit")
    await b.close()


async def test_offsets_committed_by_the_old_code_are_a_subscription_position(
    tmp_path: Path,
) -> None:
    with tarfile.open(FIXTURE) as tar:  # written before subscriptions existed
        tar.extractall(tmp_path, filter="data")
    b = await open_broker(tmp_path / "data")
    try:
        subs = {s.name: s for s in b.list_subscriptions("orders")}
        old = subs["old-consumer"]
        assert old.consumer and old.partitions[0].mark_delete == 3 and old.backlog == 2
        inbox, _ = await attach(b, "old-consumer", "failover", topic="orders")
        assert [(p, o) for p, o, _ in await inbox.wait(2)] == [(0, 3), (0, 4)]
        await b.subscription("orders", "old-consumer").acknowledge_cumulative(0, 4)
        assert b.describe_consumer("orders", "old-consumer")[0].committed_offset == 5
    finally:
        await b.close()


class Commits(BrokerObserver):
    def __init__(self) -> None:
        self.seen: list[tuple[str, int, str, int]] = []

    def on_consumer_commit(self, topic: str, partition: int, consumer: str, offset: int) -> None:
        self.seen.append((topic, partition, consumer, offset))


async def test_an_ack_of_a_consumers_subscription_is_a_commit_the_metrics_see(
    tmp_path: Path,
) -> None:
    obs = Commits()
    b = await Broker.open(BrokerConfig(data_dir=tmp_path, retention_interval_s=3600), observer=obs)
    try:
        await b.create_topic("t", partitions=1, consumers=[ConsumerConfig("audit")])
        await fill(b, 3)
        inbox, _ = await attach(b, "audit", "exclusive")
        await inbox.wait(3)
        await b.subscription("t", "audit").acknowledge_cumulative(0, 1)
        assert obs.seen == [(b.topic("t").name, 0, "audit", 2)]  # weir_consumer_commits
    finally:
        await b.close()
