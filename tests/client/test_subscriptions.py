"""Durable subscriptions through the SDK against a real server process: each type and
ack kind, redelivery, handover, bad input, the asyncio twin."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Iterator

import pytest

import weir
import weir.aio
from tests.conftest import ServerProcess
from weir.errors import BadRequestError, ConsumerBusyError, UnknownSubscriptionError


@pytest.fixture
def client(shared_server: ServerProcess) -> Iterator[weir.Client]:
    c = weir.Client(shared_server.endpoint)
    yield c
    c.close()


def fill(client: weir.Client, topic: str, n: int, partitions: int = 1) -> None:
    client.create_topic(topic, partitions=partitions, exist_ok=True)
    with client.writer(topic, producer_id="w") as w:
        for i in range(n):
            w.write(b"%d" % i)


def take(c: weir.SubscriptionConsumer, n: int, timeout: float = 20) -> list[weir.ReceivedMessage]:
    out: list[weir.ReceivedMessage] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out.extend(c.receive_batch(n - len(out), timeout=0.5))
    return out


def test_exclusive_acks_individually_and_cumulatively(client: weir.Client, topic_name: str) -> None:
    fill(client, topic_name, 10)
    c = client.subscribe(topic_name, "s", initial_position="earliest").wait_connected()
    msgs = take(c, 10)
    assert [int(m.data) for m in msgs] == list(range(10))
    assert all(m.redelivery_count == 0 for m in msgs)
    c.acknowledge([msgs[0], msgs[1], msgs[5]])
    info = client.describe_subscription(topic_name, "s")
    assert (info.type, info.backlog, info.unacked) == ("exclusive", 7, 7)
    assert info.partitions[0].mark_delete == 2 and info.partitions[0].acked_ranges == 1
    with pytest.raises(ConsumerBusyError, match="exclusive"):
        client.subscribe(topic_name, "s").wait_connected()
    c.acknowledge_cumulative(msgs[8])
    info = client.describe_subscription(topic_name, "s")
    assert (info.backlog, info.partitions[0].mark_delete) == (1, 9)
    c.close()
    # a new consumer gets only what was never acknowledged (9 was delivered once), then new
    c = client.subscribe(topic_name, "s").wait_connected()
    fill(client, topic_name, 1)
    again = take(c, 2)
    assert [(m.offset, m.redelivery_count) for m in again] == [(9, 1), (10, 0)]
    c.acknowledge(again)
    assert client.describe_subscription(topic_name, "s").backlog == 0
    c.unsubscribe()
    with pytest.raises(UnknownSubscriptionError):
        client.describe_subscription(topic_name, "s")


def test_shared_spreads_and_redelivers_what_a_lost_consumer_held(
    client: weir.Client, topic_name: str
) -> None:
    fill(client, topic_name, 60, partitions=2)
    a = client.subscribe(
        topic_name, "s", type="shared", initial_position="earliest", receiver_queue_size=10
    ).wait_connected()
    b = client.subscribe(
        topic_name, "s", type="shared", initial_position="earliest", receiver_queue_size=10
    ).wait_connected()
    got_a, got_b = take(a, 10), take(b, 10)
    assert len(got_a) == len(got_b) == 10
    assert not {m.message_id for m in got_a} & {m.message_id for m in got_b}
    with pytest.raises(BadRequestError, match="cumulative"):
        a.acknowledge_cumulative(got_a[0])
    a.acknowledge(got_a)
    b.close()  # leaves with 10 unacknowledged messages (and the ones it was sent since)
    rest = take(a, 50)
    assert len(rest) == 50
    redelivered = {m.message_id for m in rest if m.redelivery_count == 1}
    assert {m.message_id for m in got_b} <= redelivered
    a.acknowledge(rest)
    seen = {m.message_id for m in got_a + rest}
    assert len(seen) == 60
    assert client.describe_subscription(topic_name, "s").backlog == 0
    a.close()


def test_failover_hands_over_in_order(client: weir.Client, topic_name: str) -> None:
    client.create_topic(topic_name)
    consumers = {
        name: client.subscribe(
            topic_name, "s", type="failover", initial_position="earliest", consumer_name=name
        ).wait_connected()
        for name in ("c", "a", "b")
    }
    fill(client, topic_name, 5)
    got = take(consumers["a"], 5)
    assert [(m.offset, m.redelivery_count) for m in got] == [(i, 0) for i in range(5)]
    info = client.describe_subscription(topic_name, "s")
    assert info.partitions[0].active_consumer == "a"
    assert {c.name: c.unacked for c in info.consumers} == {"a": 5, "b": 0, "c": 0}
    consumers["a"].acknowledge_cumulative(got[1])
    consumers["a"].close()
    got = take(consumers["b"], 3)
    assert [(m.offset, m.redelivery_count) for m in got] == [(2, 1), (3, 1), (4, 1)]
    consumers["b"].acknowledge_cumulative(got[0])
    consumers["b"].close()
    got = take(consumers["c"], 2)
    assert [(m.offset, m.redelivery_count) for m in got] == [(3, 2), (4, 2)]
    assert client.describe_subscription(topic_name, "s").partitions[0].active_consumer == "c"
    consumers["c"].close()


def test_negative_ack_and_ack_timeout_deliver_again(client: weir.Client, topic_name: str) -> None:
    fill(client, topic_name, 2)
    c = client.subscribe(
        topic_name, "s", type="shared", initial_position="earliest", ack_timeout=0.3
    ).wait_connected()
    first = take(c, 2)
    c.negative_acknowledge(first[0], delay=0.05)
    again = take(c, 2)  # offset 0 after the nack, offset 1 after the ack timeout
    assert sorted((m.offset, m.redelivery_count) for m in again) == [(0, 1), (1, 1)]
    c.acknowledge(again)
    assert client.describe_subscription(topic_name, "s").backlog == 0
    c.close()


def test_bad_input_gets_a_clear_error_and_changes_nothing(
    client: weir.Client, topic_name: str
) -> None:
    fill(client, topic_name, 2)
    with pytest.raises(UnknownSubscriptionError):
        client.describe_subscription(topic_name, "nope")
    with pytest.raises(UnknownSubscriptionError):
        client.subscribe(topic_name, "nope", create=False).wait_connected()
    with pytest.raises(BadRequestError, match="type"):
        client.subscribe(topic_name, "s", type="round-robin")
    c = client.subscribe(
        topic_name, "s", type="shared", initial_position="earliest"
    ).wait_connected()
    got = take(c, 2)
    before = client.describe_subscription(topic_name, "s")
    assert before.unacked == 2
    with pytest.raises(BadRequestError, match="cumulative"):
        c.acknowledge_cumulative(got[0])
    with pytest.raises(BadRequestError, match="never delivered"):
        c.acknowledge([got[0], (0, 2)])  # offset 2 was not delivered: got[0] stays unacked
    with pytest.raises(BadRequestError, match="never delivered"):
        c.acknowledge((0, 999))
    with pytest.raises(BadRequestError, match="delay"):
        c.negative_acknowledge(got[0], delay=-1)
    with pytest.raises(ConsumerBusyError, match="attached"):
        client.delete_subscription(topic_name, "s")
    assert client.describe_subscription(topic_name, "s") == before
    c.acknowledge(got)  # the consumer still works after its refused requests
    assert client.describe_subscription(topic_name, "s").partitions[0].mark_delete == 2
    client.delete_subscription(topic_name, "s", force=True)
    assert client.list_subscriptions(topic_name) == []
    c.close()


def test_admin_creates_lists_and_describes(client: weir.Client, topic_name: str) -> None:
    fill(client, topic_name, 4, partitions=2)
    info = client.create_subscription(topic_name, "audit", type="failover")
    assert (info.type, info.initial_position, info.backlog) == ("failover", "latest", 0)
    client.create_subscription(topic_name, "all", initial_position="earliest")
    assert [s.name for s in client.list_subscriptions(topic_name)] == ["all", "audit"]
    assert client.describe_subscription(topic_name, "all").backlog == 4
    fill(client, topic_name, 2, partitions=2)
    assert client.describe_subscription(topic_name, "audit").backlog == 2


async def test_the_asyncio_consumer_has_the_same_calls(
    shared_server: ServerProcess, topic_name: str
) -> None:
    async with weir.aio.Client(shared_server.endpoint) as client:
        await client.create_topic(topic_name)
        w = client.writer(topic_name, producer_id="w")
        for i in range(5):
            await w.write(b"%d" % i)
        await w.close()
        c = await client.subscribe(topic_name, "s", initial_position="earliest").wait_connected()
        first = await c.receive(timeout=20)
        assert first is not None and first.data == b"0"
        rest: list[weir.aio.ReceivedMessage] = []
        while len(rest) < 4:
            rest.extend(await c.receive_batch(10, timeout=20))
        await c.negative_acknowledge(rest[-1])
        again = await c.receive(timeout=20)
        assert again is not None and (again.offset, again.redelivery_count) == (4, 1)
        await c.acknowledge_cumulative(again)
        info = await client.describe_subscription(topic_name, "s")
        assert info.backlog == 0 and [s.name for s in await client.list_subscriptions(topic_name)]
        await c.unsubscribe()
        assert await client.list_subscriptions(topic_name) == []


def test_seek_moves_the_cursor_back_and_forth(client: weir.Client, topic_name: str) -> None:
    fill(client, topic_name, 6)
    c = client.subscribe(topic_name, "s", initial_position="earliest").wait_connected()
    got = take(c, 6)
    futures = [c.acknowledge_future(m) for m in got]
    for f in futures:
        f.result(30)
    assert client.describe_subscription(topic_name, "s").backlog == 0
    c.seek({0: 2})  # back: 2..5 again, as new deliveries of a moved cursor
    again = take(c, 4)
    assert [(m.offset, m.redelivery_count) for m in again] == [(i, 0) for i in range(2, 6)]
    info = client.seek_subscription(topic_name, "s", offsets={0: 5})  # forward, from admin
    assert info.partitions[0].mark_delete == 5 and info.backlog == 1
    assert [m.offset for m in take(c, 1)] == [5]
    info = client.seek_subscription(topic_name, "s", timestamp=0)  # every partition, by time
    assert info.backlog == 6
    with pytest.raises(BadRequestError, match="needs offsets or a time"):
        client.seek_subscription(topic_name, "s")
    with pytest.raises(UnknownSubscriptionError):
        client.seek_subscription(topic_name, "nope", offsets={0: 0})
    c.close()


def test_key_shared_gives_each_key_to_one_consumer_in_order(
    client: weir.Client, topic_name: str
) -> None:
    client.create_topic(topic_name, partitions=2)
    consumers = [
        client.subscribe(
            topic_name, "s", type="key-shared", initial_position="earliest", consumer_name=n
        ).wait_connected()
        for n in ("a", "b")
    ]
    with client.writer(topic_name, producer_id="w") as w:
        for i in range(200):
            w.write(b"%d" % i, key=b"key-%d" % (i % 8))
    got: dict[str, list[weir.ReceivedMessage]] = {"a": [], "b": []}
    deadline = time.monotonic() + 30
    while sum(len(v) for v in got.values()) < 200 and time.monotonic() < deadline:
        for name, c in zip("ab", consumers, strict=True):
            got[name].extend(c.receive_batch(200, timeout=0.1))
    assert sum(len(v) for v in got.values()) == 200
    owner: dict[bytes, str] = {}
    for name, msgs in got.items():
        assert msgs, "both consumers get keys"
        for m in msgs:
            assert owner.setdefault(m.key, name) == name  # one consumer per key
        for key in {m.key for m in msgs}:
            values = [int(m.data) for m in msgs if m.key == key]
            assert values == sorted(values)  # in order
    with pytest.raises(BadRequestError, match="cumulative"):
        consumers[0].acknowledge_cumulative(got["a"][0])
    for name, c in zip("ab", consumers, strict=True):
        c.acknowledge(got[name])
        c.close()
    assert client.describe_subscription(topic_name, "s").type == "key_shared"


def test_key_shared_sticky_ranges_give_the_consumers_the_keys_they_claim(
    client: weir.Client, topic_name: str
) -> None:
    client.create_topic(topic_name, partitions=1)
    halves = {"low": [(0, 32767)], "high": [(32768, 65535)]}
    consumers = {
        n: client.subscribe(
            topic_name,
            "s",
            type="key_shared",
            initial_position="earliest",
            consumer_name=n,
            sticky_ranges=r,
        ).wait_connected()
        for n, r in halves.items()
    }
    with pytest.raises(ConsumerBusyError, match="overlaps"):
        client.subscribe(
            topic_name, "s", type="key_shared", sticky_ranges=[(100, 200)]
        ).wait_connected()
    with client.writer(topic_name, producer_id="w") as w:
        for i in range(100):
            w.write(b"%d" % i, key=b"key-%d" % (i % 10))
    for name, c in consumers.items():
        ((lo, hi),) = halves[name]
        want = sum(1 for i in range(100) if lo <= weir.key_shared_slot(b"key-%d" % (i % 10)) <= hi)
        msgs = take(c, want, timeout=20)
        assert len(msgs) == want and all(lo <= weir.key_shared_slot(m.key) <= hi for m in msgs)
        c.acknowledge(msgs)
    info = client.describe_subscription(topic_name, "s")
    assert sorted(c.sticky_ranges for c in info.consumers) == [[(0, 32767)], [(32768, 65535)]]
    assert info.backlog == 0
    for c in consumers.values():
        c.close()


def test_a_message_that_keeps_failing_lands_in_the_dead_letter_topic(
    client: weir.Client, topic_name: str
) -> None:
    client.create_topic(topic_name)
    with client.writer(topic_name, producer_id="w") as w:
        w.write(b"poison", key=b"k", headers={"trace": "t1"})
        w.write(b"fine")
    c = client.subscribe(
        topic_name,
        "s",
        type="shared",
        initial_position="earliest",
        dead_letter_policy=weir.DeadLetterPolicy(max_redeliver_count=2),
    ).wait_connected()
    seen = []
    while len(seen) < 4:  # poison 3 times (counts 0, 1, 2), fine once
        for m in c.receive_batch(timeout=10):
            seen.append((m.data, m.redelivery_count))
            if m.data == b"poison":
                c.negative_acknowledge(m)
            else:
                c.acknowledge(m)
    assert sorted(seen) == [(b"fine", 0), (b"poison", 0), (b"poison", 1), (b"poison", 2)]
    info = client.describe_subscription(topic_name, "s")
    assert (info.max_redeliver_count, info.dead_letter_topic) == (2, f"{topic_name}-s-DLQ")
    deadline = time.monotonic() + 20  # the copy is written, then the message acked
    while client.describe_subscription(topic_name, "s").backlog:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    dead = [
        m for chunk in client.read_range(info.dead_letter_topic, 0, 0) for m in chunk.messages()
    ]
    assert [(m.data, m.key) for m in dead] == [(b"poison", b"k")]
    assert dead[0].headers["trace"] == "t1"
    assert dead[0].headers["weir-origin-offset"] == "0"
    assert dead[0].headers["weir-origin-subscription"] == "s"
    c.close()


def test_a_subscription_can_start_at_a_time(client: weir.Client, topic_name: str) -> None:
    client.create_topic(topic_name)
    with client.writer(topic_name, producer_id="w") as w:
        first = w.write_with_result(b"before")
    written = next(iter(client.read_range(topic_name, 0, 0, 1))).messages()[0].written_at_ms
    while time.time() * 1000 <= written + 1:  # the clock passes the cut: no fixed sleep
        time.sleep(0.001)
    with client.writer(topic_name, producer_id="w") as w:
        w.write(b"after")
    info = client.create_subscription(topic_name, "by-time", initial_position=written + 1)
    assert (info.initial_position, info.partitions[0].mark_delete) == ("timestamp", 1)
    c = client.subscribe(
        topic_name, "s", initial_position=dt.datetime.fromtimestamp((written + 1) / 1000, dt.UTC)
    ).wait_connected()
    assert [m.data for m in take(c, 1)] == [b"after"] and first.offset == 0
    c.close()


def test_a_message_listener_handles_and_acknowledges(client: weir.Client, topic_name: str) -> None:
    import threading

    fill(client, topic_name, 5)
    seen: list[tuple[bytes, int]] = []
    done = threading.Event()

    def handle(consumer: weir.SubscriptionConsumer, msg: weir.ReceivedMessage) -> None:
        seen.append((msg.data, msg.redelivery_count))
        if msg.data == b"2" and msg.redelivery_count == 0:
            raise ValueError("fails once")  # logged; the message comes again
        consumer.acknowledge(msg)
        if len(seen) == 6:
            done.set()

    c = client.subscribe(
        topic_name, "s", type="shared", initial_position="earliest", listener=handle
    )
    assert done.wait(30), seen
    assert sorted(seen) == sorted([(b"%d" % i, 0) for i in range(5)] + [(b"2", 1)])
    assert client.describe_subscription(topic_name, "s").backlog == 0
    c.close()


async def test_an_async_listener(shared_server: ServerProcess, topic_name: str) -> None:
    async with weir.aio.Client(shared_server.endpoint) as client:
        await client.create_topic(topic_name)
        w = client.writer(topic_name, producer_id="w")
        await w.write(b"x")
        await w.close()
        got: asyncio.Queue[bytes] = asyncio.Queue()

        async def handle(
            consumer: weir.aio.SubscriptionConsumer, msg: weir.aio.ReceivedMessage
        ) -> None:
            await consumer.acknowledge(msg)
            await got.put(msg.data)

        c = client.subscribe(topic_name, "s", initial_position="earliest", listener=handle)
        assert await asyncio.wait_for(got.get(), 30) == b"x"
        await c.close()


def test_shared_subscriptions_hold_delayed_messages_back(
    client: weir.Client, topic_name: str
) -> None:
    client.create_topic(topic_name)
    c = client.subscribe(
        topic_name, "s", type="shared", initial_position="earliest"
    ).wait_connected()
    e = client.subscribe(topic_name, "e", initial_position="earliest").wait_connected()
    with client.writer(topic_name, producer_id="w") as w:
        w.write(b"later", deliver_after=0.5)
        w.write(b"now")
        due = w.write_with_result(b"at", deliver_at=dt.datetime.now(dt.UTC))
    assert due.offset == 2
    first = take(c, 2)
    assert [m.data for m in first] == [b"now", b"at"]  # "later" waits its turn
    written = first[0].written_at_ms
    later = take(c, 1)
    assert [(m.data, m.redelivery_count) for m in later] == [(b"later", 0)]
    assert time.time() * 1000 >= written + 400  # not before its time (clock, not a threshold)
    c.acknowledge(first + later)
    assert [m.data for m in take(e, 3)] == [b"later", b"now", b"at"]  # exclusive: at once
    with pytest.raises(BadRequestError, match="not both"), client.writer(topic_name) as w2:
        w2.write(b"x", deliver_at=0, deliver_after=1)
    c.close()
    e.close()


def test_reconsume_later_goes_through_the_retry_topic_then_the_dead_letter_topic(
    client: weir.Client, topic_name: str
) -> None:
    client.create_topic(topic_name, partitions=2)
    with client.writer(topic_name, producer_id="w") as w:
        w.write(b"job", key=b"K", headers={"trace": "t1"}, created_at=1_700_000_000_000)
        w.write(b"other")
    c = client.subscribe(
        topic_name,
        "s",
        type="shared",
        initial_position="earliest",
        retry_enable=True,
        dead_letter_policy=weir.DeadLetterPolicy(max_redeliver_count=2),
    ).wait_connected()
    assert c.retry_topic == f"{topic_name}-s-RETRY"
    first = {m.data: m for m in take(c, 2)}
    c.acknowledge(first[b"other"])
    job = first[b"job"]
    t0 = time.monotonic()
    c.reconsume_later(job, 0.3)  # durable in the retry topic, acknowledged here
    assert client.describe_subscription(topic_name, "s").backlog == 0
    (back,) = take(c, 1)
    assert time.monotonic() - t0 >= 0.3  # held back for the delay
    assert (back.topic, back.data, back.key, back.created_at_ms) == (
        c.retry_topic,
        b"job",
        b"K",
        1_700_000_000_000,
    )
    assert back.reconsume_count == 1 and back.headers["trace"] == "t1"
    assert back.headers["weir-origin-topic"] == topic_name
    assert back.headers["weir-origin-offset"] == str(job.offset)
    c.reconsume_later(back, dt.timedelta(0))  # from the retry topic, back to it
    (again,) = take(c, 1)
    assert again.reconsume_count == 2 and again.headers["weir-origin-topic"] == topic_name
    c.reconsume_later(again, 0)  # a third time is past max_redeliver_count: the DLQ
    assert take(c, 1, timeout=1) == []
    with client.subscribe(
        f"{topic_name}-s-DLQ", "audit", type="shared", initial_position="earliest"
    ) as dlq:
        (dead,) = take(dlq, 1)
    assert (dead.data, dead.key, dead.headers["weir-origin-topic"]) == (b"job", b"K", topic_name)
    assert client.describe_subscription(c.retry_topic, "s").backlog == 0
    c.reconsume_later(first[b"job"], 0)  # acknowledged already: nothing to copy
    with pytest.raises(BadRequestError, match="negative"):
        c.reconsume_later(job, -1)
    plain = client.subscribe(topic_name, "p", initial_position="earliest").wait_connected()
    with pytest.raises(BadRequestError, match="retry_enable"):
        plain.reconsume_later(take(plain, 1)[0], 1)
    plain.close()
    c.unsubscribe()
    assert client.list_subscriptions(c.retry_topic) == []


async def test_the_asyncio_consumer_reconsumes_later_too(
    shared_server: ServerProcess, topic_name: str
) -> None:
    async with weir.aio.Client(shared_server.endpoint) as client:
        await client.create_topic(topic_name)
        w = client.writer(topic_name, producer_id="w")
        await w.write(b"x")
        await w.close()
        c = await client.subscribe(
            topic_name, "s", type="key_shared", initial_position="earliest", retry_enable=True
        ).wait_connected()
        m = await c.receive(timeout=20)
        assert m is not None
        await c.reconsume_later(m, 0)
        back = await c.receive(timeout=20)
        assert back is not None and (back.data, back.reconsume_count) == (b"x", 1)
        await c.acknowledge(back)  # a retry letter is acknowledged on the retry topic
        info = await client.describe_subscription(c.retry_topic, "s")
        assert (info.type, info.backlog) == ("key_shared", 0)
        await c.close()


async def test_acks_made_while_others_are_in_flight_go_together(
    shared_server: ServerProcess, topic_name: str
) -> None:
    async with weir.aio.Client(shared_server.endpoint) as client:
        await client.create_topic(topic_name)
        w = client.writer(topic_name, producer_id="w")
        for i in range(300):
            await w.write(b"%d" % i)
        await w.close()
        c = await client.subscribe(
            topic_name, "s", type="shared", initial_position="earliest"
        ).wait_connected()
        got: list[weir.aio.ReceivedMessage] = []
        while len(got) < 300:
            got.extend(await c.receive_batch(300, timeout=20))
        # one ack call per message, all at once, and one bad one among them
        futures = [c.acknowledge_future(m) for m in got]
        bad = c.acknowledge_future((0, 10_000))  # never delivered
        await asyncio.gather(*futures)  # each one durable when it returns
        with pytest.raises(BadRequestError, match="never delivered"):
            await bad
        assert c.ack_requests < 100  # grouped behind the ones in flight
        info = await client.describe_subscription(topic_name, "s")
        assert (info.backlog, info.unacked) == (0, 0)
        await c.close()


def test_a_readers_consumer_is_a_failover_subscription(
    client: weir.Client, topic_name: str
) -> None:
    fill(client, topic_name, 6)
    r = client.reader(topic_name, consumer="billing").wait_connected()
    got: list[weir.Message] = []
    while len(got) < 4:
        batch = r.receive_batch(timeout=20)
        assert batch is not None
        got.extend(batch.messages)
    r.commit_with_ack(got[3])  # committed: 4, the next to read
    info = {s.name: s for s in client.list_subscriptions(topic_name)}["billing"]
    assert (info.type, info.consumer, info.partitions[0].mark_delete) == ("failover", True, 4)
    with pytest.raises(ConsumerBusyError, match="read session"):  # one kind of reader at a time
        client.subscribe(topic_name, "billing", type="failover").wait_connected()
    r.close()
    c = client.subscribe(topic_name, "billing", type="failover").wait_connected()
    with pytest.raises(ConsumerBusyError, match="subscription consumer"):  # and the reverse
        client.reader(topic_name, consumer="billing").wait_connected()
    rest = take(c, 2)
    assert [int(m.data) for m in rest] == [4, 5]
    c.acknowledge_cumulative(rest[-1])  # a commit
    assert client.describe_consumer(topic_name, "billing").partitions[0].committed_offset == 6
    c.close()
