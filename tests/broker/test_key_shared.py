"""Key_Shared in the broker: per-key order holds while consumers join, leave and ack at
random (a property test over schedules), and nothing is left behind."""

from __future__ import annotations

import asyncio
import random
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.broker.subscriptions import AttachedConsumer, Delivery
from weir.errors import BadRequestError, WeirError
from weir.storage.batch import encode_batch
from weir.storage.incoming import validate_incoming

KEYS = 5


class Model:
    """What the test knows: each message's key, who holds what, what it acknowledged."""

    def __init__(self) -> None:
        self.key: dict[int, bytes] = {}
        self.acked: set[int] = set()
        self.held_by: dict[int, str] = {}
        self.attached: set[str] = set()
        self.violations: list[str] = []
        self.delivered = 0
        self.event = asyncio.Event()

    def check(self, who: str, offsets: list[int]) -> None:
        for o in offsets:
            k = self.key[o]
            for earlier in range(o):
                if self.key.get(earlier) != k or earlier in self.acked:
                    continue
                holder = self.held_by.get(earlier)
                if holder != who:
                    self.violations.append(
                        f"{o} (key {k!r}) went to {who} while {earlier} was "
                        + (f"held by {holder}" if holder else "waiting to be delivered again")
                    )
            self.held_by[o] = who
        self.delivered += len(offsets)
        self.event.set()


class Inbox:
    def __init__(self, name: str, model: Model) -> None:
        self.name = name
        self.model = model

    def deliver(self, d: Delivery) -> None:
        self.model.check(self.name, d.offsets)

    def close(self, err: WeirError) -> None:
        pass


async def run(schedule: list[tuple[str, int]], seed: int) -> Model:
    rng = random.Random(seed)
    model = Model()
    with tempfile.TemporaryDirectory() as tmp:
        b = await Broker.open(BrokerConfig(data_dir=Path(tmp), retention_interval_s=3600))
        try:
            await b.create_topic("t", partitions=1)
            await b.create_subscription("t", "s", "key_shared", "earliest")
            sub = b.subscription("t", "s")
            consumers: dict[str, AttachedConsumer] = {}
            written = 0

            async def write(n: int) -> None:
                nonlocal written
                keys = [b"k%d" % rng.randrange(KEYS) for _ in range(n)]
                for i, k in enumerate(keys):
                    model.key[written + i] = k
                batch = encode_batch([b"x"] * n, keys=keys)
                await b.write("t", 0, validate_incoming([batch]))
                written += n

            async def join(name: str, permits: int) -> None:
                _, c = await b.subscribe(
                    "t", "s", "key_shared", "earliest", Inbox(name, model), consumer_name=name
                )
                consumers[name] = c
                model.attached.add(name)
                sub.flow(c.consumer_id, permits)

            async def ack(name: str, fraction: float) -> None:
                mine = [o for o, who in model.held_by.items() if who == name]
                chosen = [o for o in mine if rng.random() < fraction]
                for o in chosen:  # known acked before the broker can act on it
                    model.acked.add(o)
                    del model.held_by[o]
                if chosen:
                    await sub.acknowledge([(0, o, o + 1) for o in chosen])
                    sub.flow(consumers[name].consumer_id, len(chosen))

            for n, (action, arg) in enumerate(schedule):
                if action == "write":
                    await write(1 + arg % 20)
                elif action == "join":
                    await join(f"c{n}", 1 + arg % 30)
                elif action == "leave" and consumers:
                    name = sorted(consumers)[arg % len(consumers)]
                    sub.detach(consumers.pop(name).consumer_id)
                    model.attached.discard(name)
                    for o in [o for o, who in model.held_by.items() if who == name]:
                        del model.held_by[o]  # unacked: the broker delivers it again
                elif action == "ack" and consumers:
                    await ack(sorted(consumers)[arg % len(consumers)], (arg % 10) / 9)
                for _ in range(3):
                    await asyncio.sleep(0)  # let the pumps run (no waiting on time)
            with __import__("pytest").raises(BadRequestError, match="cumulative"):
                await sub.acknowledge_cumulative(0, 0)
            # the end: one consumer with room for everything takes and acks what is left
            await join("last", written + 1)
            for name in [n for n in consumers if n != "last"]:
                sub.detach(consumers.pop(name).consumer_id)
                for o in [o for o, who in model.held_by.items() if who == name]:
                    del model.held_by[o]
            async with asyncio.timeout(30):
                while len(model.acked) < written:
                    model.event.clear()
                    await ack("last", 1.0)
                    if len(model.acked) < written:
                        await model.event.wait()
            assert b.describe_subscription("t", "s").backlog == 0
        finally:
            await b.close()
    return model


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["write", "write", "join", "leave", "ack", "ack"]), st.integers(0, 999)
        ),
        min_size=3,
        max_size=40,
    ),
    st.integers(0, 2**31),
)
def test_per_key_order_holds_while_consumers_join_leave_and_ack(
    schedule: list[tuple[str, int]], seed: int
) -> None:
    model = asyncio.run(run([("write", 10), ("join", 5), *schedule], seed))
    assert not model.violations, model.violations[:5]
