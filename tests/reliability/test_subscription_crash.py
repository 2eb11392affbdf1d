"""Subscriptions under kill -9: consumers of a Shared subscription acknowledge at random
while the server is SIGKILLed and restarted several times.

The promises judged afterwards:
- an acknowledgement whose answer arrived is durable: the message is never delivered
  again by a later server lifetime (generation);
- within one server lifetime a message is delivered once (nothing here asks for a
  redelivery: no negative acks, no ack timeout, no consumer leaves);
- nothing is lost: every produced message is eventually delivered and acknowledged.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict

import weir
import weir.aio
from tests.conftest import ServerProcess
from weir.errors import WeirError

MESSAGES = 400
KILLS = 5


async def test_acked_messages_never_come_back_after_kill_9(
    server: ServerProcess, topic_name: str, chaos_seed: int
) -> None:
    rng = random.Random(chaos_seed)
    with weir.Client(server.endpoint) as admin:
        admin.create_topic(topic_name, partitions=2)
        admin.create_subscription(topic_name, "s", type="shared", initial_position="earliest")
        for p in range(2):
            with admin.writer(topic_name, producer_id=f"w{p}", partition=p) as w:
                for i in range(MESSAGES // 2):
                    w.write(b"%d:%d" % (p, i))
    produced = {(p, o) for p in range(2) for o in range(MESSAGES // 2)}

    delivered: dict[int, set[tuple[int, int]]] = defaultdict(set)  # generation -> ids
    acked: dict[tuple[int, int], int] = {}  # id -> generation its ack answer came from
    unsure: set[tuple[int, int]] = set()  # acks whose answer was lost: applied or not
    violations: list[str] = []
    final = asyncio.Event()  # after the last kill: acknowledge everything
    done = asyncio.Event()

    async def consume(c: weir.aio.SubscriptionConsumer, seed: int) -> None:
        local = random.Random(seed)
        held: list[weir.aio.ReceivedMessage] = []
        while not done.is_set():
            try:
                msgs = await c.receive_batch(50, timeout=0.2)
            except WeirError as err:
                assert err.retryable, err
                continue
            gen = c.server_generation
            for m in msgs:
                mid = m.message_id
                if m.data != b"%d:%d" % mid:
                    violations.append(f"{mid} carries {m.data!r}")
                if mid in delivered[gen]:
                    violations.append(f"{mid} delivered twice in generation {gen}")
                delivered[gen].add(mid)
                if mid in acked and acked[mid] < gen:
                    violations.append(
                        f"{mid} delivered in generation {gen} after its ack in {acked[mid]}"
                    )
                held.append(m)
            if final.is_set():
                todo, held = held, []
            else:
                local.shuffle(held)
                k = local.randint(0, len(held))
                todo, held = held[:k], held[k:]
            refs: list[weir.aio.ReceivedMessage | tuple[int, int]] = list(todo)
            if final.is_set() and unsure:
                refs += sorted(unsure)  # acking again is safe
            if not refs:
                continue
            ids = [r.message_id if isinstance(r, weir.aio.ReceivedMessage) else r for r in refs]
            try:
                await c.acknowledge(refs)
            except WeirError as err:
                assert err.retryable, err  # the stream broke: we cannot know
                unsure.update(ids)
                continue
            for mid in ids:
                acked.setdefault(mid, c.server_generation)
                unsure.discard(mid)
            if len(acked) == len(produced):
                done.set()

    async with weir.aio.Client(server.endpoint) as client:
        consumers = [
            client.subscribe(topic_name, "s", type="shared", receiver_queue_size=40)
            for _ in range(2)
        ]
        tasks = [asyncio.create_task(consume(c, rng.randrange(2**31))) for c in consumers]
        try:
            for k in range(KILLS):
                target = len(produced) * (k + 1) // (KILLS + 2)
                async with asyncio.timeout(60):
                    while len(acked) < target:
                        await asyncio.sleep(0.01)
                await asyncio.to_thread(server.kill)
                await asyncio.to_thread(server.start)
            final.set()
            async with asyncio.timeout(90):
                await done.wait()
        finally:
            done.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            for c in consumers:
                await c.close()
        info = await client.describe_subscription(topic_name, "s")

    assert not violations, violations[:20]
    assert set(acked) == produced, f"never acknowledged: {sorted(produced - set(acked))[:20]}"
    assert info.backlog == 0 and info.unacked == 0
    # unacknowledged messages did come back after restarts (the test saw redeliveries)
    generations: dict[tuple[int, int], int] = defaultdict(int)
    for ids in delivered.values():
        for mid in ids:
            generations[mid] += 1
    assert len(delivered) > 1 and max(generations.values()) > 1
