"""The real pulsar-client (C++ underneath) producing and consuming through weir's Pulsar front."""

from __future__ import annotations

import asyncio
import threading
import time

import pulsar
import pytest

import weir
from tests.conftest import ServerProcess
from tests.pulsar.conftest import make_client, quiet


def _drain(consumer: pulsar.Consumer, n: int, timeout_ms: int = 5000) -> list[pulsar.Message]:
    out = []
    for _ in range(n):
        m = consumer.receive(timeout_ms)
        out.append(m)
        consumer.acknowledge(m)
    return out


@pytest.mark.parametrize("batching", [False, True])
def test_produce_then_consume_keeps_key_properties_and_time(
    client: pulsar.Client, topic: str, batching: bool
) -> None:
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        topic, batching_enabled=batching, batching_max_publish_delay_ms=5
    )
    sent = [
        producer.send(
            f"m{i}".encode(),
            properties={"i": str(i), "kind": "test"},
            partition_key=f"k{i}",
            event_timestamp=1_700_000_000_000 + i,
        )
        for i in range(10)
    ]
    got = _drain(consumer, 10)
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(10)]
    assert [m.properties() for m in got] == [{"i": str(i), "kind": "test"} for i in range(10)]
    assert [m.partition_key() for m in got] == [f"k{i}" for i in range(10)]
    assert [m.event_timestamp() for m in got] == [1_700_000_000_000 + i for i in range(10)]
    assert [m.message_id() for m in got] == sent  # the ids the producer was given
    assert all(m.publish_timestamp() > 0 for m in got)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(200)  # every message once
    consumer.close()
    producer.close()


def test_async_send_with_callbacks_and_batches(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=50, batching_max_publish_delay_ms=20
    )
    done = threading.Event()
    results: list[tuple[object, pulsar.MessageId]] = []
    lock = threading.Lock()

    def callback(res: object, mid: pulsar.MessageId) -> None:
        with lock:
            results.append((res, mid))
            if len(results) == 200:
                done.set()

    for i in range(200):
        producer.send_async(b"x%d" % i, callback)
    producer.flush()
    assert done.wait(10)
    assert all(res == pulsar.Result.Ok for res, _ in results)
    ids = sorted(mid for _, mid in results)
    assert len(set(map(str, ids))) == 200
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    seen = []
    while reader.has_message_available():
        seen.append(reader.read_next(5000).data())
    assert seen == [b"x%d" % i for i in range(200)]
    reader.close()
    producer.close()


def test_readers_from_earliest_latest_and_an_id(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=4)
    ids = [producer.send(b"%d" % i) for i in range(10)]
    latest = client.create_reader(topic, pulsar.MessageId.latest)
    assert not latest.has_message_available()
    exclusive = client.create_reader(topic, ids[5])
    assert [exclusive.read_next(5000).data() for _ in range(4)] == [b"6", b"7", b"8", b"9"]
    assert not exclusive.has_message_available()
    inclusive = client.create_reader(topic, ids[5], start_message_id_inclusive=True)
    assert inclusive.read_next(5000).data() == b"5"
    producer.send(b"10")
    assert latest.read_next(5000).data() == b"10"
    for r in (latest, exclusive, inclusive):
        r.close()
    producer.close()


def test_seek_by_id_and_by_time(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    ids = [producer.send(b"%d" % i) for i in range(6)]
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    got = _drain(consumer, 6)
    consumer.seek(ids[2])
    again = consumer.receive(5000)
    assert again.data() in (b"2", b"3")  # Pulsar delivers from the id (inclusive here)
    consumer.seek(got[0].publish_timestamp())
    assert consumer.receive(5000).data() == b"0"
    consumer.close()
    producer.close()


@pytest.mark.parametrize(
    "kind",
    [pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared, pulsar.ConsumerType.Failover],
)
def test_several_consumers_share_a_subscription(
    client: pulsar.Client, topic: str, kind: pulsar.ConsumerType
) -> None:
    seen: dict[str, list[bytes]] = {}
    lock = threading.Lock()
    done = threading.Event()

    def listener(consumer: pulsar.Consumer, msg: pulsar.Message) -> None:
        consumer.acknowledge(msg)
        with lock:
            seen.setdefault(consumer.consumer_name(), []).append(msg.data())
            if sum(map(len, seen.values())) >= 60:
                done.set()

    consumers = [
        client.subscribe(
            topic,
            "workers",
            consumer_type=kind,
            consumer_name=f"c{i}",
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=10,
            message_listener=listener,
        )
        for i in range(3)
    ]
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(60):
        producer.send_async(b"%d" % i, None, partition_key=f"key{i % 6}")
    producer.flush()
    assert done.wait(10)
    everything = sorted(x for v in seen.values() for x in v)
    assert everything == sorted(b"%d" % i for i in range(60))  # each once
    if kind == pulsar.ConsumerType.Failover:
        assert list(seen) == ["c0"]  # the one active consumer
    else:
        assert len(seen) >= 2
    if kind == pulsar.ConsumerType.KeyShared:
        owners = {}
        for name, msgs in seen.items():
            for m in msgs:
                owners.setdefault(int(m) % 6, set()).add(name)
        assert all(len(o) == 1 for o in owners.values())  # a key to one consumer
    for c in consumers:
        c.close()
    producer.close()


def test_key_shared_batches_of_several_keys_go_whole_by_their_first_key(
    client: pulsar.Client, topic: str
) -> None:
    """Without batch-index acks (the default) a batch goes whole to one consumer: the one
    of its first message's key, as in Pulsar. Every message comes once."""
    got: list[tuple[str, bytes, int, int, str]] = []  # consumer, data, entry, index, key
    lock = threading.Lock()
    done = threading.Event()

    def listener(consumer: pulsar.Consumer, msg: pulsar.Message) -> None:
        mid = msg.message_id()
        with lock:
            got.append(
                (
                    consumer.consumer_name(),
                    msg.data(),
                    mid.entry_id(),
                    mid.batch_index(),
                    msg.partition_key(),
                )
            )
            if len(got) >= 60:
                done.set()
        consumer.acknowledge(msg)

    consumers = [
        client.subscribe(
            topic,
            "ks",
            consumer_type=pulsar.ConsumerType.KeyShared,
            consumer_name=f"c{i}",
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=20,
            message_listener=listener,
        )
        for i in range(3)
    ]
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=4, batching_max_publish_delay_ms=50
    )
    for i in range(60):
        producer.send_async(b"%d" % i, None, partition_key=f"k{i % 6}")
    producer.flush()
    assert done.wait(10)
    with lock:  # before any consumer closes: closing hands its unacked messages to the others
        seen = list(got)
    for c in consumers:
        c.close()
    producer.close()
    data = sorted(int(d) for _, d, *_ in seen)
    assert data == list(range(60))  # each message once
    owner: dict[int, set[str]] = {}
    sticky: dict[str, set[str]] = {}
    for name, _, entry, index, key in seen:
        owner.setdefault(entry, set()).add(name)
        if index == 0:
            sticky.setdefault(key, set()).add(name)
    assert all(len(o) == 1 for o in owner.values())  # a batch to one consumer
    assert all(len(o) == 1 for o in sticky.values())  # by its first key


def test_key_shared_sticky_ranges_route_by_pulsars_slot(client: pulsar.Client, topic: str) -> None:
    """A sticky Key_Shared consumer gets exactly the keys whose slot (Pulsar's murmur3 sticky
    hash) is in its ranges; keys nobody claims wait for a consumer that claims them;
    overlapping claims, and an automatic consumer among sticky ones, are refused."""
    keys = [f"key-{i}" for i in range(16)]
    low = [k for k in keys if weir.key_shared_slot(k.encode()) < 32768]
    assert low and len(low) < len(keys)  # both halves have keys

    def sticky(name: str, *ranges: tuple[int, int]) -> pulsar.Consumer:
        return client.subscribe(
            topic,
            "sticky",
            consumer_type=pulsar.ConsumerType.KeyShared,
            consumer_name=name,
            initial_position=pulsar.InitialPosition.Earliest,
            key_shared_policy=pulsar.ConsumerKeySharedPolicy(
                key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=list(ranges)
            ),
        )

    a = sticky("a", (0, 32767))
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(48):
        producer.send_async(b"%d" % i, None, partition_key=keys[i % 16])
    producer.flush()
    mine = [i for i in range(48) if keys[i % 16] in low]
    got = [a.receive(5000) for _ in mine]
    assert sorted(int(m.data()) for m in got) == mine
    for m in got:
        a.acknowledge(m)
    with pytest.raises(pulsar.Timeout):
        a.receive(300)  # the other half's keys are held: nobody claims their slots
    with pytest.raises(pulsar.ConsumerBusy):
        sticky("overlap", (30000, 40000))
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sticky", consumer_type=pulsar.ConsumerType.KeyShared)
    b = sticky("b", (32768, 65535))
    rest = [b.receive(5000) for _ in range(48 - len(mine))]
    assert sorted(int(m.data()) for m in rest) == sorted(set(range(48)) - set(mine))
    for m in rest:
        b.acknowledge(m)
    for c in (a, b):
        c.close()
    producer.close()


def test_exclusive_subscription_refuses_a_second_consumer(
    client: pulsar.Client, topic: str
) -> None:
    first = client.subscribe(topic, "only")
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "only")
    first.close()


def test_negative_ack_and_ack_timeout_redeliver_with_a_count(
    client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    consumer = client.subscribe(
        topic,
        "s",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
        negative_ack_redelivery_delay_ms=100,
        unacked_messages_timeout_ms=10_000,  # the client's smallest
    )
    for data in (b"nacked", b"forgotten", b"acked"):
        producer.send(data)
    first = {m.data(): m for m in (consumer.receive(5000) for _ in range(3))}
    assert all(m.redelivery_count() == 0 for m in first.values())
    consumer.acknowledge(first[b"acked"])
    consumer.negative_acknowledge(first[b"nacked"])
    again = consumer.receive(5000)
    assert (again.data(), again.redelivery_count()) == (b"nacked", 1)
    consumer.acknowledge(again)
    # "forgotten" is neither acked nor nacked: the ack timeout sends it again
    late = consumer.receive(20_000)
    assert (late.data(), late.redelivery_count()) == (b"forgotten", 1)
    consumer.acknowledge(late)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)  # nothing acknowledged comes back
    consumer.close()
    producer.close()


def test_asyncio_api_ack_timeout_redelivers_with_a_count(
    pulsar_server: ServerProcess, topic: str
) -> None:
    """The asyncio consumer's ack timeout (10 s, the client's smallest): a message it
    neither acks nor nacks comes back once, with its redelivery count."""
    import pulsar.asyncio as apulsar

    async def run() -> None:
        c = apulsar.Client(pulsar_server.pulsar_url, operation_timeout_seconds=5, logger=quiet())
        try:
            producer = await c.create_producer(topic, batching_enabled=False)
            consumer = await c.subscribe(
                topic,
                "s",
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=pulsar.InitialPosition.Earliest,
                unacked_messages_timeout_ms=10_000,
            )
            for data in (b"acked", b"forgotten"):
                await producer.send(data)
            first = {m.data(): m for m in [await consumer.receive() for _ in range(2)]}
            assert [m.redelivery_count() for m in first.values()] == [0, 0]
            await consumer.acknowledge(first[b"acked"])
            late = await asyncio.wait_for(consumer.receive(), 20)
            assert (late.data(), late.redelivery_count()) == (b"forgotten", 1)
            await consumer.acknowledge(late)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(consumer.receive(), 0.3)  # nothing acked comes back
            await consumer.close()
            await producer.close()
        finally:
            await c.close()

    asyncio.run(run())


def test_cumulative_ack_and_a_restarted_consumer_resumes(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=3)
    for i in range(9):
        producer.send_async(b"%d" % i, None)
    producer.flush()
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    got = [consumer.receive(5000) for _ in range(6)]
    consumer.acknowledge_cumulative(got[-1])
    consumer.close()
    again = client.subscribe(topic, "s")
    assert again.receive(5000).data() == b"6"
    again.close()
    producer.close()


def test_dead_letter_policy(client: pulsar.Client, topic: str) -> None:
    dlq = f"{topic}-dlq"
    dead = client.subscribe(dlq, "d", initial_position=pulsar.InitialPosition.Earliest)
    consumer = client.subscribe(
        topic,
        "s",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
        negative_ack_redelivery_delay_ms=50,
        dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(
            max_redeliver_count=2, dead_letter_topic=dlq
        ),
    )
    producer = client.create_producer(topic)
    producer.send(b"poison", properties={"p": "1"})
    for _ in range(3):
        consumer.negative_acknowledge(consumer.receive(5000))
    buried = dead.receive(10_000)
    assert buried.data() == b"poison"
    assert buried.properties().get("p") == "1"
    for c in (consumer, dead):
        c.close()
    producer.close()


def test_delayed_delivery(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(
        topic,
        "s",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    producer = client.create_producer(topic)
    import datetime

    producer.send(b"later", deliver_after=datetime.timedelta(milliseconds=800))
    at = int(__import__("time").time() * 1000) + 400
    producer.send(b"at", deliver_at=at)
    producer.send(b"now")
    first = consumer.receive(5000)
    assert first.data() == b"now"
    consumer.acknowledge(first)
    second = consumer.receive(5000)
    assert second.data() == b"at"
    assert at <= int(__import__("time").time() * 1000)
    consumer.acknowledge(second)
    third = consumer.receive(5000)
    assert third.data() == b"later"
    assert third.publish_timestamp() + 700 <= int(__import__("time").time() * 1000)
    consumer.acknowledge(third)
    consumer.close()
    producer.close()


def test_dedup_across_producer_reconnects(pulsar_server: ServerProcess, topic: str) -> None:
    c1 = make_client(pulsar_server.pulsar_url)
    p1 = c1.create_producer(topic, producer_name="writer-1")
    for i in range(5):
        p1.send(b"%d" % i)
    p1.close()
    p2 = c1.create_producer(topic, producer_name="writer-1")
    assert p2.last_sequence_id() == 4  # it learns where it was
    assert p2.send(b"5", sequence_id=4) is not None  # a resend of 4: dropped
    p2.send(b"5", sequence_id=5)
    reader = c1.create_reader(topic, pulsar.MessageId.earliest)
    seen = []
    while reader.has_message_available():
        seen.append(reader.read_next(5000).data())
    assert seen == [b"0", b"1", b"2", b"3", b"4", b"5"]
    c1.close()


def test_chunked_big_message(client: pulsar.Client, topic: str) -> None:
    big = bytes(range(256)) * (20 * 4096)  # 20 MiB
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    producer.send(big)
    m = consumer.receive(20_000)
    assert m.data() == big
    consumer.acknowledge(m)
    consumer.close()
    producer.close()


def test_message_listener(client: pulsar.Client, topic: str) -> None:
    got: list[bytes] = []
    done = threading.Event()

    def listener(consumer: pulsar.Consumer, msg: pulsar.Message) -> None:
        got.append(msg.data())
        consumer.acknowledge(msg)
        if len(got) == 5:
            done.set()

    consumer = client.subscribe(
        topic, "s", message_listener=listener, initial_position=pulsar.InitialPosition.Earliest
    )
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(b"%d" % i)
    assert done.wait(10)
    assert got == [b"%d" % i for i in range(5)]
    consumer.close()
    producer.close()


def test_has_message_available_on_every_path(client: pulsar.Client, topic: str) -> None:
    """The client asks GetLastMessageId and compares with what it read: an empty topic, new
    messages, the end of a batch, inclusive readers from an id and from the latest."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not reader.has_message_available()  # an empty topic
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=3, batching_max_publish_delay_ms=50
    )
    ids: list[pulsar.MessageId] = []
    for i in range(5):
        producer.send_async(b"%d" % i, lambda res, mid: ids.append(mid))
    producer.flush()
    assert reader.has_message_available()
    assert [reader.read_next(5000).data() for _ in range(5)] == [b"%d" % i for i in range(5)]
    assert not reader.has_message_available()  # read to the end of the last batch
    last = max(ids)
    at_last = client.create_reader(topic, last, start_message_id_inclusive=True)
    assert at_last.has_message_available()
    assert at_last.read_next(5000).data() == b"4"
    assert not at_last.has_message_available()
    latest = client.create_reader(topic, pulsar.MessageId.latest, start_message_id_inclusive=True)
    assert latest.has_message_available()  # inclusive from the latest: the last message
    assert latest.read_next(5000).data() == b"4"
    for r in (reader, at_last, latest):
        r.close()
    producer.close()


def test_replicated_subscription_flag_is_accepted(client: pulsar.Client, topic: str) -> None:
    """One cluster: a replicated subscription is a durable subscription like any other."""
    consumer = client.subscribe(
        topic,
        "replicated",
        initial_position=pulsar.InitialPosition.Earliest,
        replicate_subscription_state_enabled=True,
    )
    producer = client.create_producer(topic)
    producer.send(b"once")
    m = consumer.receive(5000)
    consumer.acknowledge(m)
    consumer.close()
    again = client.subscribe(topic, "replicated")
    with pytest.raises(pulsar.Timeout):
        again.receive(300)  # the position was kept
    again.close()
    producer.close()


def test_unsubscribe_deletes_the_subscription(
    pulsar_server: ServerProcess, client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic)
    producer.send(b"kept for s")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    other = client.subscribe(topic, "t", initial_position=pulsar.InitialPosition.Earliest)
    with weir.Client(pulsar_server.endpoint) as native:
        assert sorted(s.name for s in native.list_subscriptions(topic)) == ["s", "t"]
        consumer.unsubscribe()
        assert [s.name for s in native.list_subscriptions(topic)] == ["t"]
    # a new subscription of that name starts afresh (Latest): the old backlog is gone
    consumer = client.subscribe(topic, "s")
    producer.send(b"new")
    assert consumer.receive(5000).data() == b"new"
    assert other.receive(5000).data() == b"kept for s"
    consumer.close()
    other.close()
    producer.close()


def test_ordering_key_survives_and_routes_key_shared(client: pulsar.Client, topic: str) -> None:
    """A message's ordering key reaches the consumer, and Key_Shared routes by it before
    the partition key: every message of one ordering key goes to one consumer."""
    consumers = [
        client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared) for _ in range(2)
    ]
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(40):
        producer.send_async(b"%d" % i, None, partition_key=f"k{i}", ordering_key=f"o{i % 2}")
    producer.flush()
    owner: dict[str, set[int]] = {}
    seen = 0
    deadline = time.monotonic() + 20
    while seen < 40 and time.monotonic() < deadline:
        for n, c in enumerate(consumers):
            while True:  # what this consumer has now, then the other's
                try:
                    m = c.receive(100)
                except pulsar.Timeout:
                    break
                c.acknowledge(m)
                seen += 1
                i = int(m.data())
                ordering = m.ordering_key()
                ordering = ordering.decode() if isinstance(ordering, bytes) else ordering
                assert (m.partition_key(), ordering) == (f"k{i}", f"o{i % 2}")
                owner.setdefault(ordering, set()).add(n)
    assert seen == 40
    assert all(len(who) == 1 for who in owner.values()), owner
    for c in consumers:
        c.close()
    producer.close()


def test_a_send_weir_cannot_store_fails_at_once(client: pulsar.Client, topic: str) -> None:
    """A message weir cannot decode (SNAPPY is not served) fails its send at once with
    ChecksumError, the SendError after which a Pulsar client drops the message (after any
    other it reconnects and resends it, for ever); the client logs the server's reason.
    Nothing is stored, and the topic goes on."""
    snappy = client.create_producer(
        topic, compression_type=pulsar.CompressionType.SNAPPY, batching_enabled=False
    )
    done = threading.Event()
    results: list[pulsar.Result] = []

    def sent(res: pulsar.Result, _: pulsar.MessageId) -> None:
        results.append(res)
        done.set()

    snappy.send_async(b"snappy" * 100, sent)
    assert done.wait(10), "never answered: the client resends for ever"
    assert results == [pulsar.Result.ChecksumError]
    snappy.close()
    plain = client.create_producer(topic)
    plain.send(b"plain")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.read_next(5000).data() == b"plain"
    assert not reader.has_message_available()
    for x in (reader, plain):
        x.close()
