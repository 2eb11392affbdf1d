"""Subscription calls added for the Pulsar front and admins: batch-index acks, skip,
rates in describe (real LMDB, real partition actors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.broker.test_subscriptions import attach, one, open_broker
from tests.storage.conftest import make_batch
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
