"""Subscription calls added for the Pulsar front and admins: batch-index acks, skip,
rates in describe (real LMDB, real partition actors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.broker.test_subscriptions import attach, one, open_broker
from tests.storage.conftest import make_batch
from weir.broker.subscriptions.rates import RateMeter
from weir.errors import BadRequestError


async def test_batch_index_acks_acknowledge_part_of_a_stored_batch(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=1)
    await b.write("t", 0, make_batch(4, producer="a"))  # batch at 0: 0..3
    await b.write("t", 0, make_batch(4, producer="b"))  # batch at 4: 4..7
    inbox, c = await attach(b, "s", "shared")
    await inbox.wait(8)
    await b.acknowledge_batch_indexes("t", "s", 0, 4, [1, 2])
    await b.acknowledge_batch_indexes("t", "s", 0, 0, [0, 1, 2, 3])
    p = b.describe_subscription("t", "s").partitions[0]
    assert (p.mark_delete, p.acked_ranges, p.backlog, p.unacked) == (4, 1, 2, 2)
    # bad requests change nothing: inside a batch, past it, no index, not a batch
    for batch, idx, match in [
        (5, [0], "index 1 of the batch at offset 4"),
        (4, [4], "holds indexes 0..3"),
        (4, [-1], "holds indexes 0..3"),
        (4, [], "at least one index"),
        (8, [0], "no stored batch at offset 8"),
    ]:
        with pytest.raises(BadRequestError, match=match):
            await b.acknowledge_batch_indexes("t", "s", 0, batch, idx)
    assert b.describe_subscription("t", "s").partitions[0] == p
    # what is left of the batch comes again, and only that, when its consumer goes
    sub = b.subscription("t", "s")
    sub.detach(c.consumer_id)
    inbox2, _ = await attach(b, "s", "shared")
    assert [o for _, o, _ in await inbox2.wait(2)] == [4, 7]
    await sub.acknowledge(one([(0, 4), (0, 7)]))
    assert b.describe_subscription("t", "s").backlog == 0
    await b.close()


async def test_skip_acknowledges_what_consumers_hold_and_what_is_not_delivered(
    tmp_path: Path,
) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=1)
    await b.write("t", 0, make_batch(10, producer="a"))
    inbox, c = await attach(b, "s", "shared", permits=4)
    await inbox.wait(4)
    sub = b.subscription("t", "s")
    await sub.acknowledge(one([(0, 1)]))
    info = b.describe_subscription("t", "s")  # 4 delivered, 1 acked just now
    assert info.msg_rate_out > 0 and info.ack_rate > 0 and info.msg_rate_redeliver == 0
    assert await b.skip_subscription("t", "s", 3) == 3  # 0, 2, 3: held by the consumer
    info = b.describe_subscription("t", "s")
    assert (info.partitions[0].mark_delete, info.unacked, info.consumers[0].unacked) == (4, 0, 0)
    assert await b.skip_subscription("t", "s", 2) == 2  # 4, 5: never delivered
    sub.flow(c.consumer_id, 10)
    assert [o for _, o, _ in (await inbox.wait(8))[4:]] == [6, 7, 8, 9]
    for bad in (0, -1):
        with pytest.raises(BadRequestError, match="count >= 1"):
            await b.skip_subscription("t", "s", bad)
    assert await b.skip_subscription("t", "s") == 4  # everything: clear the backlog
    assert await b.skip_subscription("t", "s") == 0
    await b.close()
    b = await open_broker(tmp_path)  # durable
    assert b.describe_subscription("t", "s").backlog == 0
    await b.close()


def test_rates_count_a_recent_window() -> None:
    m = RateMeter(now=100.0)
    m.add(50, now=100.2)
    m.add(30, now=101.5)
    assert m.rate(now=101.9) == 8.0  # 80 messages over the 10 s window
    assert m.rate(now=109.9) == 8.0
    assert m.rate(now=110.5) == 3.0  # the first second left the window
    assert m.rate(now=200.0) == 0.0
    m.add(10, now=200.1)
    assert m.rate(now=200.2) == 1.0
