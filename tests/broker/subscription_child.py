"""Child process of the subscription kill -9 tests: opens a broker on a data directory,
runs one scenario, prints ``DONE`` once what it did is durable, then waits to be killed
with SIGKILL (the parent reopens the directory and checks what survived)."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from tests.broker.test_subscriptions import Inbox, fill, one, open_broker
from weir.broker.subscriptions import DeadLetterPolicy
from weir.broker.topics import ConsumerConfig
from weir.storage.batch_encoding import encode_batch
from weir.storage.incoming import validate_incoming


async def batch_index(path: Path) -> None:
    b = await open_broker(path)
    await b.create_topic("t", partitions=1)
    await fill(b, 10)  # one stored batch: offsets 0..9
    inbox = Inbox()
    s, c = await b.subscribe("t", "s", "exclusive", "earliest", inbox)
    s.flow(c.consumer_id, 100)
    await inbox.wait(10)
    await b.acknowledge_batch_indexes("t", "s", 0, 0, [0, 3, 4, 9])


async def counts(path: Path) -> None:
    b = await open_broker(path)
    await b.create_topic("t", partitions=1)
    await fill(b, 3)
    inbox = Inbox()
    s, c = await b.subscribe("t", "s", "shared", "earliest", inbox, dead_letter=DeadLetterPolicy(2))
    s.flow(c.consumer_id, 100)
    await inbox.wait(3)
    for n in (1, 2):  # offset 1 fails twice: delivered again each time, its count raised
        s.negative_acknowledge(one([(0, 1)]), 0)
        assert (await inbox.wait(3 + n))[-1] == (0, 1, n)
    await s.acknowledge(one([(0, 0)]))
    await s.parts[0].cursor.persist()


async def delayed(path: Path) -> None:
    b = await open_broker(path)
    await b.create_topic("t", partitions=1)
    hour = str(int(time.time() * 1000) + 3_600_000)
    batch = encode_batch([b"later", b"now"], headers=[{"weir-deliver-at": hour}, None])
    await b.write("t", 0, validate_incoming([batch]))
    inbox = Inbox()
    s, c = await b.subscribe("t", "s", "shared", "earliest", inbox)
    s.flow(c.consumer_id, 100)
    assert await inbox.wait(1) == [(0, 1, 0)]
    await s.acknowledge(one([(0, 1)]))


async def consumer_acks(path: Path) -> None:
    """A reader's consumer consumed as a Failover subscription: acks are its commits."""
    b = await open_broker(path)
    await b.create_topic("t", partitions=1, consumers=[ConsumerConfig("audit")])
    await fill(b, 6)
    inbox = Inbox()
    s, c = await b.subscribe("t", "audit", "failover", "earliest", inbox)
    s.flow(c.consumer_id, 100)
    await inbox.wait(6)
    await s.acknowledge(one([(0, 0), (0, 1)]))  # individual acks in order: a commit
    await s.acknowledge_cumulative(0, 3)  # 4 and 5 stay unacknowledged
    s.negative_acknowledge(one([(0, 4)]), 0)  # delivered again, its count raised
    assert (await inbox.wait(7))[-1] == (0, 4, 1)


SCENARIOS = {
    "batch_index": batch_index,
    "counts": counts,
    "delayed": delayed,
    "consumer_acks": consumer_acks,
}


async def main(path: Path, scenario: str) -> None:
    await SCENARIOS[scenario](path)
    sys.stdout.write("DONE\n")
    sys.stdout.flush()
    await asyncio.Event().wait()  # until SIGKILL


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
