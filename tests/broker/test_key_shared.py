"""Key_Shared in the broker: per-key order holds while consumers join, leave and ack at
random (a property test over schedules), with keys split automatically or by sticky
ranges the consumers claim, and nothing is left behind; sticky claims are checked."""

from __future__ import annotations

import asyncio
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.broker.subscriptions import AttachedConsumer, Delivery
from weir.errors import BadRequestError, WeirError
from weir.storage.batch_encoding import encode_batch
from weir.storage.incoming import validate_incoming

KEYS = 5
STICKY = [(i * 8192, i * 8192 + 8191) for i in range(8)]  # the slots, in 8 ranges


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


async def run(schedule: list[tuple[str, int]], seed: int, sticky: bool = False) -> Model:
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

            claimed: dict[str, list[tuple[int, int]]] = {}

            async def join(name: str, permits: int, ranges: list[tuple[int, int]] | None) -> None:
                if sticky and ranges is None:  # a random share of what is not claimed yet
                    taken = {r for rs in claimed.values() for r in rs}
                    ranges = [r for r in STICKY if r not in taken and rng.random() < 0.5]
                    if not ranges:
                        return
                if ranges:
                    claimed[name] = ranges
                _, c = await b.subscribe(
                    "t",
                    "s",
                    "key_shared",
                    "earliest",
                    Inbox(name, model),
                    consumer_name=name,
                    hash_ranges=ranges,
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
                    await join(f"c{n}", 1 + arg % 30, None)
                elif action == "leave" and consumers:
                    name = sorted(consumers)[arg % len(consumers)]
                    sub.detach(consumers.pop(name).consumer_id)
                    claimed.pop(name, None)
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
            for name in list(consumers):
                sub.detach(consumers.pop(name).consumer_id)
                claimed.pop(name, None)
                for o in [o for o, who in model.held_by.items() if who == name]:
                    del model.held_by[o]
            await join("last", written + 1, [(0, 65535)] if sticky else None)
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


@settings(max_examples=15, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["write", "write", "join", "join", "leave", "ack", "ack"]),
            st.integers(0, 999),
        ),
        min_size=3,
        max_size=40,
    ),
    st.integers(0, 2**31),
)
def test_per_key_order_holds_with_sticky_ranges(schedule: list[tuple[str, int]], seed: int) -> None:
    model = asyncio.run(run([("write", 10), ("join", 5), *schedule], seed, sticky=True))
    assert not model.violations, model.violations[:5]


async def test_sticky_ranges_route_keys_refuse_overlaps_and_hold_unclaimed_keys(
    tmp_path: Path,
) -> None:
    from tests.broker.test_subscriptions import Inbox as Box
    from weir.broker.subscriptions.key_shared import key_hash, slot_of
    from weir.client.routing import key_shared_slot
    from weir.errors import ConsumerBusyError

    b = await Broker.open(BrokerConfig(data_dir=tmp_path, retention_interval_s=3600))
    await b.create_topic("t", partitions=1)
    keys = [b"key-%d" % i for i in range(40)]
    assert all(key_shared_slot(k) == slot_of(key_hash(k)) for k in keys)  # SDK and broker agree
    await b.write("t", 0, validate_incoming([encode_batch([b"x"] * 40, keys=keys)]))
    low = [o for o, k in enumerate(keys) if key_shared_slot(k) < 32768]
    assert 0 < len(low) < 40

    async def join(sub: str, name: str, ranges: object, type: str = "key_shared") -> Box:
        box = Box()
        s, c = await b.subscribe(
            "t",
            sub,
            type,
            "earliest",
            box,
            consumer_name=name,
            hash_ranges=ranges,  # type: ignore[arg-type]
        )
        s.flow(c.consumer_id, 100)
        return box

    # only the low half is claimed: the rest waits until someone claims it
    lo = await join("s", "low", [(0, 32767)])
    assert sorted(o for _, o, _ in await lo.wait(len(low))) == low
    with pytest.raises(
        ConsumerBusyError, match=r"30000\.\.40000 overlaps 0\.\.32767 of consumer 'low'"
    ):
        await join("s", "greedy", [(30000, 40000)])
    with pytest.raises(ConsumerBusyError, match="sticky hash ranges"):
        await join("s", "auto", None)
    for bad, match in (([(5, 2)], "START..END"), ([(0, 65536)], "0..65535"), ([], "at least")):
        with pytest.raises(BadRequestError, match=match):
            await join("s", "bad", bad)
    with pytest.raises(BadRequestError, match="key_shared subscriptions, not shared"):
        await join("other", "x", [(0, 10)], type="shared")
    hi = await join("s", "high", [(32768, 65535)])
    assert sorted(o for _, o, _ in await hi.wait(40 - len(low))) == sorted(
        set(range(40)) - set(low)
    )
    info = b.describe_subscription("t", "s")
    assert sorted(c.sticky_ranges for c in info.consumers) == [((0, 32767),), ((32768, 65535),)]
    # an automatically split subscription refuses a sticky consumer
    await join("auto", "a", None)
    with pytest.raises(ConsumerBusyError, match="splits keys automatically"):
        await join("auto", "b", [(0, 10)])
    await b.close()
