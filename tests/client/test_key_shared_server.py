"""Key_Shared through a real weir server, with the SDK's subscription consumers: a
property test over random write / join / leave / receive / ack schedules. Whatever the
schedule, (1) a key is held by one consumer at a time and per-key order holds (a message
of key k reaches a consumer only when every earlier message of k is acknowledged or held
by that consumer), (2) nothing is delivered again once its ack was sent, and what is
delivered again comes with its redelivery count raised, and (3) nothing
is lost: at the end one consumer takes and acknowledges the rest and the backlog is 0.

Keys are split over the consumers automatically, or (``sticky``) each consumer claims
a random share of the slot ranges nobody holds yet. The model is conservative: an ack is recorded before it is sent and a leaving
consumer's messages are released before it closes, so the server can never act on
something the model does not know yet. The default run keeps a few examples on the
session's shared server; ``slow`` (`make soak`) runs many more."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import weir.aio
from tests.conftest import ServerProcess
from weir.client.subscription import ReceivedMessage, SubscriptionConsumer

KEYS = 5
STICKY = [(i * 8192, i * 8192 + 8191) for i in range(8)]  # the slots, in 8 ranges
_topics = itertools.count()


class Model:
    """Each offset's key, who holds what, what was acknowledged, what went wrong."""

    def __init__(self) -> None:
        self.key: dict[int, bytes] = {}
        self.held_by: dict[int, str] = {}
        self.acked: set[int] = set()
        self.count: dict[int, int] = {}  # the redelivery count each was last received with
        self.violations: list[str] = []

    def received(self, who: str, msgs: list[ReceivedMessage]) -> None:
        for m in msgs:
            o, k = m.offset, m.key
            if self.key.get(o) != k:
                self.violations.append(f"{o} came with key {k!r}, written with {self.key.get(o)!r}")
            if o in self.acked:
                self.violations.append(f"{o} went to {who} again after it was acknowledged")
                continue
            for other, holder in self.held_by.items():  # one holder per key at a time
                if self.key[other] == k and holder != who:
                    self.violations.append(
                        f"{o} (key {k!r}) went to {who} while {holder} held {other}"
                    )
            for earlier in range(o):  # per-key order
                if (
                    self.key[earlier] == k
                    and earlier not in self.acked
                    and earlier not in self.held_by
                ):
                    self.violations.append(f"{o} (key {k!r}) went to {who} before {earlier}")
            if o in self.count and m.redelivery_count <= self.count[o]:
                self.violations.append(f"{o} came again with count {m.redelivery_count}")
            self.count[o] = m.redelivery_count
            self.held_by[o] = who


async def run(endpoint: str, schedule: list[tuple[str, int]], seed: int, sticky: bool) -> Model:
    rng = random.Random(seed)
    model = Model()
    topic = f"ks_server_{next(_topics)}_{seed}"
    async with weir.aio.Client(endpoint) as client:
        await client.create_topic(topic, partitions=1)
        await client.create_subscription(topic, "k", type="key_shared", initial_position="earliest")
        consumers: dict[str, SubscriptionConsumer] = {}
        claimed: dict[str, list[tuple[int, int]]] = {}  # sticky: each consumer's ranges
        written = 0
        async with client.writer(topic, producer_id="w") as w:

            async def write(n: int) -> None:
                nonlocal written
                for _ in range(n):
                    k = b"k%d" % rng.randrange(KEYS)
                    model.key[written] = k  # one writer, one partition: offsets in order
                    await w.write(b"x", key=k)
                    written += 1
                await w.flush()

            async def join(name: str, queue: int, ranges: list[tuple[int, int]] | None) -> None:
                if sticky and ranges is None:  # a random share of what is not claimed yet
                    taken = {r for rs in claimed.values() for r in rs}
                    ranges = [r for r in STICKY if r not in taken and rng.random() < 0.5]
                    if not ranges:
                        return
                if ranges:
                    claimed[name] = ranges
                c = client.subscribe(
                    topic,
                    "k",
                    type="key_shared",
                    consumer_name=name,
                    receiver_queue_size=queue,
                    sticky_ranges=ranges,
                )
                consumers[name] = await c.wait_connected()

            async def take(name: str, timeout: float) -> None:
                model.received(name, await consumers[name].receive_batch(1000, timeout=timeout))

            async def ack(name: str, fraction: float) -> None:
                await take(name, 0)
                mine = sorted(o for o, who in model.held_by.items() if who == name)
                chosen = [o for o in mine if rng.random() < fraction]
                for o in chosen:  # known acknowledged before the server can act on it
                    model.acked.add(o)
                    del model.held_by[o]
                if chosen:
                    await consumers[name].acknowledge([(0, o) for o in chosen])

            async def leave(name: str) -> None:
                c = consumers.pop(name)
                claimed.pop(name, None)
                for o in [o for o, who in model.held_by.items() if who == name]:
                    del model.held_by[o]  # unacknowledged: the server delivers it again
                await c.close()

            for n, (action, arg) in enumerate(schedule):
                names = sorted(consumers)
                if action == "write":
                    await write(1 + arg % 20)
                elif action == "join":
                    await join(f"c{n}", 1 + arg % 10, None)
                elif action == "leave" and names:
                    await leave(names[arg % len(names)])
                elif action == "take" and names:
                    await take(names[arg % len(names)], 0.05)  # returns on the first message
                elif action == "ack" and names:
                    await ack(names[arg % len(names)], (arg % 10) / 9)
            for name in sorted(consumers):
                await leave(name)
            async with asyncio.timeout(30):  # the server has let them go (sticky: the ranges)
                while (await client.describe_subscription(topic, "k")).consumers:
                    await asyncio.sleep(0.01)
            # the end: one consumer with room for everything takes and acknowledges the rest
            await join("last", written + 1, [(0, 65535)] if sticky else None)
            async with asyncio.timeout(30):
                while len(model.acked) < written:
                    await take("last", 1.0)
                    await ack("last", 1.0)
            info = await client.describe_subscription(topic, "k")
            assert (info.backlog, info.unacked) == (0, 0), info
            await leave("last")
        await client.drop_topic(topic)
    return model


SCHEDULES = st.lists(
    st.tuples(
        st.sampled_from(["write", "write", "join", "leave", "take", "take", "ack", "ack"]),
        st.integers(0, 999),
    ),
    min_size=3,
    max_size=30,
)


def check(endpoint: str, schedule: list[tuple[str, int]], seed: int, sticky: bool) -> None:
    start = [("write", 10), ("join", 4), ("join", 2), ("take", 0)]
    model = asyncio.run(run(endpoint, start + schedule, seed, sticky))
    assert not model.violations, model.violations[:5]


@settings(max_examples=5, deadline=None)
@given(SCHEDULES, st.integers(0, 2**31), st.booleans())
def test_key_shared_through_a_server_keeps_keys_and_order_while_consumers_come_and_go(
    shared_server: ServerProcess, schedule: list[tuple[str, int]], seed: int, sticky: bool
) -> None:
    check(shared_server.endpoint, schedule, seed, sticky)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(SCHEDULES, st.integers(0, 2**31), st.booleans())
def test_key_shared_through_a_server_many_schedules(
    shared_server: ServerProcess, schedule: list[tuple[str, int]], seed: int, sticky: bool
) -> None:
    check(shared_server.endpoint, schedule, seed, sticky)
