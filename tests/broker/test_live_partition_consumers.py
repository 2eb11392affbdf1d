"""Live (non-persistent) subscriptions with consumers of some partitions only, as the
Pulsar front attaches them (one consumer per partition of a partitioned topic): each
takes only its partitions' messages, Exclusive refuses only an overlapping claim, and
a partition nobody of the subscription takes drops nothing on the others."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.broker.subscriptions import Delivery
from weir.errors import BadRequestError, ConsumerBusyError, WeirError
from weir.storage.batch_encoding import encode_batch
from weir.storage.incoming import validate_incoming


class Inbox:
    def __init__(self) -> None:
        self.got: list[tuple[int, int]] = []  # (partition, offset)

    def deliver(self, d: Delivery) -> None:
        self.got.extend((d.partition, o) for o in d.offsets)

    def close(self, err: WeirError) -> None:
        pass


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = await Broker.open(BrokerConfig(data_dir=tmp_path, retention_interval_s=3600))
    await b.create_topic("t", partitions=3, kind="non-persistent")
    yield b
    await b.close()


async def _write(b: Broker, partition: int, n: int) -> None:
    await b.write("t", partition, validate_incoming([encode_batch([b"x"] * n)]))


async def test_each_consumer_takes_its_partitions_only(broker: Broker) -> None:
    inboxes = [Inbox() for _ in range(3)]
    for p, inbox in enumerate(inboxes):
        sub, c = await broker.subscribe(
            "t", "s", "exclusive", "latest", inbox, partitions=frozenset({p})
        )
        sub.flow(c.consumer_id, 100)
    with pytest.raises(ConsumerBusyError):  # partition 1 is claimed already
        await broker.subscribe("t", "s", "exclusive", "latest", Inbox(), partitions=frozenset({1}))
    for p in range(3):
        await _write(broker, p, p + 1)
    assert [sorted(i.got) for i in inboxes] == [
        [(0, 0)],
        [(1, 0), (1, 1)],
        [(2, 0), (2, 1), (2, 2)],
    ]
    assert [p.dropped_messages for p in broker.partitions("t")] == [0, 0, 0]


async def test_shared_consumers_of_one_partition_take_all_of_it(broker: Broker) -> None:
    inboxes = [Inbox() for _ in range(2)]
    for p, inbox in enumerate(inboxes):
        sub, c = await broker.subscribe(
            "t", "sh", "shared", "latest", inbox, partitions=frozenset({p})
        )
        sub.flow(c.consumer_id, 100)
    for _ in range(4):  # round robin among the consumers that take partition 0 only
        await _write(broker, 0, 1)
    await _write(broker, 2, 1)  # nobody of "sh" takes partition 2
    assert inboxes[0].got == [(0, o) for o in range(4)] and inboxes[1].got == []
    assert [p.dropped_messages for p in broker.partitions("t")] == [0, 0, 0]


async def test_whole_batch_consumers_are_refused(broker: Broker) -> None:
    with pytest.raises(BadRequestError, match="single messages"):
        await broker.subscribe("t", "s", "shared", "latest", Inbox(), whole_batches=True)
