"""Subscriptions under kill -9, judged by the history checker.

Two subscriptions of one topic while the server is SIGKILLed and restarted several
times: a Shared one whose two consumers acknowledge individually at random, and now and
then negatively acknowledge (a dead-letter policy buries what is redelivered too often),
and a Failover one whose consumer acknowledges cumulatively, lagging behind. Every
write's ack, every delivery (with the server lifetime and the redelivery count) and every
ack the server answered go into a `History`; at the end the topic and the dead-letter
topic are read back and `check` judges (see checker.py): no message comes back after its
ack was answered, no lifetime delivers a message twice without counting the redelivery,
every message is acknowledged or dead-lettered, and nothing delivered was never produced.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sized

import weir
import weir.aio
from tests.conftest import ServerProcess
from tests.reliability.checker import check
from tests.reliability.history import History, make_data, message_id
from weir.errors import WeirError

MESSAGES = 400
KILLS = 5
PARTITIONS = 2
SHARED, FAILOVER = "s", "f"


async def test_acked_messages_never_come_back_after_kill_9(
    server: ServerProcess, topic_name: str, chaos_seed: int
) -> None:
    rng = random.Random(chaos_seed)
    h = History()
    dlq = f"{topic_name}-{SHARED}-DLQ"
    with weir.Client(server.endpoint) as admin:
        admin.create_topic(topic_name, partitions=PARTITIONS)
        admin.create_topic(dlq, partitions=1)
        for sub, kind in ((SHARED, "shared"), (FAILOVER, "failover")):
            admin.create_subscription(topic_name, sub, type=kind, initial_position="earliest")
        for p in range(PARTITIONS):
            with admin.writer(topic_name, producer_id=f"w{p}", partition=p) as w:
                for n in range(MESSAGES // PARTITIONS):
                    data = make_data(f"w{p}", n, 40)
                    h.attempted(message_id(data))
                    res = w.write_with_result(data)
                    h.acked(message_id(data), res.partition, res.offset)

    final = asyncio.Event()  # after the last kill: acknowledge everything
    done = asyncio.Event()
    # per consumer, the acks it must still send until one is answered (the answer to an
    # earlier one was lost: the server may have applied it, and then shows no backlog
    # while the history has no answered ack of those messages yet)
    unanswered: list[Sized] = []

    async def received(
        c: weir.aio.SubscriptionConsumer, sub: str, opened: int
    ) -> list[weir.aio.ReceivedMessage] | None:
        """The next batch of ``c`` (None when the stream broke, retryably), each message
        recorded as delivered to ``sub``."""
        try:
            msgs = await c.receive_batch(50, timeout=0.2)
        except WeirError as err:
            assert err.retryable, err
            return None
        gen = c.server_generation
        for m in msgs:
            h.sub_delivered(
                sub,
                m.partition,
                m.offset,
                message_id(m.data),
                generation=gen,
                redelivery_count=m.redelivery_count,
                opened=opened,
            )
        return msgs

    async def shared(c: weir.aio.SubscriptionConsumer, opened: int, seed: int) -> None:
        """Individual acks of a random part of what it holds; a few negative acks."""
        local = random.Random(seed)
        held: list[weir.aio.ReceivedMessage] = []
        unsure: set[tuple[int, int]] = set()  # acks whose answer was lost: applied or not
        unanswered.append(unsure)
        while not done.is_set():
            msgs = await received(c, SHARED, opened)
            if msgs is None:
                continue
            # a message delivered again is nacked again: it goes to the dead letters (after
            # the last kill too, or a slow run whose nacked messages come back only then
            # would bury none)
            fresh_nacks = not final.is_set()
            nack = [
                m for m in msgs if m.redelivery_count or (fresh_nacks and local.random() < 0.05)
            ]
            msgs = [m for m in msgs if m not in nack]
            if nack:
                try:
                    await c.negative_acknowledge(nack)
                except WeirError as err:
                    assert err.retryable, err  # unknown: the broker redelivers anyway
            held += msgs
            if final.is_set():
                todo, held = held, []
            else:
                local.shuffle(held)
                k = local.randint(0, len(held))
                todo, held = held[:k], held[k:]
            ids = {m.message_id for m in todo}
            if final.is_set():
                ids |= unsure  # acknowledging again is safe
            if not ids:
                continue
            try:
                await c.acknowledge(sorted(ids))
            except WeirError as err:
                assert err.retryable, err  # the stream broke: we cannot know
                unsure |= ids
                continue
            h.sub_acked(SHARED, sorted(ids), generation=c.server_generation)
            unsure -= ids

    async def failover(c: weir.aio.SubscriptionConsumer, opened: int, seed: int) -> None:
        """Cumulative acks per partition, up to a random message of what it received."""
        local = random.Random(seed)
        last: dict[int, weir.aio.ReceivedMessage] = {}  # the cumulative acks to send
        unanswered.append(last)
        while not done.is_set():
            msgs = await received(c, FAILOVER, opened)
            if msgs is None:
                continue
            for m in msgs:
                if final.is_set() or local.random() < 0.1:
                    last[m.partition] = m
            for p, m in sorted(last.items()):
                try:
                    await c.acknowledge_cumulative(m)
                except WeirError as err:
                    assert err.retryable, err
                    continue
                h.sub_acked_cumulative(FAILOVER, p, m.offset, generation=c.server_generation)
                del last[p]

    policy = weir.DeadLetterPolicy(max_redeliver_count=1, dead_letter_topic=dlq)
    async with weir.aio.Client(server.endpoint) as client:
        opened = h.clock()  # every consumer below receives only what is sent from here on
        consumers = [
            client.subscribe(
                topic_name,
                SHARED,
                type="shared",
                receiver_queue_size=40,
                dead_letter_policy=policy,
            )
            for _ in range(2)
        ]
        tasks = [asyncio.create_task(shared(c, opened, rng.randrange(2**31))) for c in consumers]
        lagging = client.subscribe(topic_name, FAILOVER, type="failover", receiver_queue_size=40)
        tasks.append(asyncio.create_task(failover(lagging, opened, rng.randrange(2**31))))
        consumers.append(lagging)
        try:
            for k in range(KILLS):
                target = MESSAGES * (k + 1) // (KILLS + 2)
                async with asyncio.timeout(60):
                    while SHARED not in h.subs or len(h.subs[SHARED].a_key) < target:
                        await asyncio.sleep(0.01)
                await asyncio.to_thread(server.kill)
                await asyncio.to_thread(server.start)
            final.set()
            async with asyncio.timeout(90):  # every message acknowledged or buried
                while True:
                    infos = [await client.describe_subscription(topic_name, s) for s in "sf"]
                    settled = all(i.backlog == 0 and i.unacked == 0 for i in infos)
                    if settled and not any(unanswered):
                        break
                    await asyncio.sleep(0.05)
        finally:
            done.set()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            for c in consumers:
                await c.close()
        assert not [r for r in results if isinstance(r, BaseException)], results

        info = await client.describe_topic(topic_name)
        stored: dict[int, list[tuple[int, str]]] = {}
        starts: dict[int, int] = {}
        for p in info.partition_info:
            starts[p.partition] = p.start_offset
            stored[p.partition] = [
                (m.offset, message_id(m.data))
                async for chunk in client.read_range(topic_name, p.partition, p.start_offset)
                for m in chunk.messages()
            ]
        dead = [
            (
                int(m.headers["weir-origin-partition"]),
                int(m.headers["weir-origin-offset"]),
                message_id(m.data),
            )
            async for chunk in client.read_range(dlq, 0, 0)
            for m in chunk.messages()
        ]

    everything = dict.fromkeys(range(PARTITIONS), 0)
    report = check(
        h,
        stored,
        starts,
        subscriptions={SHARED: everything, FAILOVER: everything},
        dead_letters={SHARED: dead},
    )
    why = f"seed {chaos_seed} (replay: WEIR_CHAOS_SEED={chaos_seed}): {report.summary()}"
    assert report.ok, why
    assert report.acknowledged == MESSAGES and report.stored == MESSAGES, why
    # the run did what it is for: acks were answered across several server lifetimes,
    # unacknowledged messages came back after restarts, and some were dead-lettered
    gens = set(h.subs[SHARED].d_gen)
    assert len(gens) > 1, why
    assert report.dead_lettered > 0, why
