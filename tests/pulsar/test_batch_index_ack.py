"""A server with batch-index acks on (``pulsar.batch_index_ack``) and clients with
``batch_index_ack_enabled=True``: each message of a batch is acknowledged on its own, an
acknowledged message of a batch never comes back, and Key_Shared routes every message of
a batch by its own key (consumers are given their part of a batch with an ack set)."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.conftest import ServerProcess
from tests.pulsar.conftest import make_client, quiet

_topics = itertools.count(1)


@pytest.fixture(scope="module")
def bia_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(
        Path(tmp_path_factory.mktemp("pulsar-bia")), env={"WEIR_PULSAR_BATCH_INDEX_ACK": "true"}
    )
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def bia_client(bia_server: ServerProcess) -> Iterator[pulsar.Client]:
    c = make_client(bia_server.pulsar_url)
    yield c
    c.close()


@pytest.fixture
def topic() -> str:
    return f"bia-{next(_topics)}"


def _batch(client: pulsar.Client, topic: str, n: int, keys: int = 1) -> None:
    """``n`` messages in one batch, keys ``k0`` .. ``k{keys-1}`` in turn."""
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=n, batching_max_publish_delay_ms=500
    )
    for i in range(n):
        producer.send_async(b"%d" % i, None, partition_key=f"k{i % keys}")
    producer.flush()
    producer.close()


def _subscribe(client: pulsar.Client, topic: str, **kwargs: object) -> pulsar.Consumer:
    return client.subscribe(
        topic,
        "s",
        initial_position=pulsar.InitialPosition.Earliest,
        batch_index_ack_enabled=True,
        **kwargs,
    )


def test_acked_messages_of_a_batch_never_come_back(bia_client: pulsar.Client, topic: str) -> None:
    _batch(bia_client, topic, 10)
    first = _subscribe(bia_client, topic, consumer_type=pulsar.ConsumerType.Shared)
    got = [first.receive(5000) for _ in range(10)]
    assert len({m.message_id().entry_id() for m in got}) == 1  # one entry
    for m in got[::2]:
        first.acknowledge(m)  # 0, 2, 4, 6, 8
    first.close()  # answered once those acks are durable
    second = _subscribe(bia_client, topic, consumer_type=pulsar.ConsumerType.Shared)
    again = [second.receive(5000) for _ in range(5)]
    assert [m.data() for m in again] == [b"1", b"3", b"5", b"7", b"9"]
    with pytest.raises(pulsar.Timeout):
        second.receive(300)
    second.close()


def test_a_cumulative_ack_inside_a_batch_covers_the_messages_before(
    bia_client: pulsar.Client, topic: str
) -> None:
    _batch(bia_client, topic, 10)
    first = _subscribe(bia_client, topic)
    got = [first.receive(5000) for _ in range(10)]
    first.acknowledge_cumulative(got[3])
    first.close()
    second = _subscribe(bia_client, topic)
    assert [second.receive(5000).data() for _ in range(6)] == [b"%d" % i for i in range(4, 10)]
    with pytest.raises(pulsar.Timeout):
        second.receive(300)
    second.close()


def test_key_shared_splits_batches_of_several_keys_by_key(
    bia_client: pulsar.Client, topic: str
) -> None:
    """Each message exactly once, every key to exactly one consumer, though the producer
    batched keys together."""
    got: list[tuple[str, int, int]] = []  # consumer, message, entry
    lock = threading.Lock()
    done = threading.Event()

    def listener(consumer: pulsar.Consumer, msg: pulsar.Message) -> None:
        with lock:
            got.append((consumer.consumer_name(), int(msg.data()), msg.message_id().entry_id()))
            if len(got) >= 96:
                done.set()
        consumer.acknowledge(msg)

    consumers = [
        _subscribe(
            bia_client,
            topic,
            consumer_type=pulsar.ConsumerType.KeyShared,
            consumer_name=f"c{i}",
            receiver_queue_size=20,
            message_listener=listener,
        )
        for i in range(3)
    ]
    producer = bia_client.create_producer(
        topic, batching_enabled=True, batching_max_messages=12, batching_max_publish_delay_ms=50
    )
    for i in range(96):
        producer.send_async(b"%d" % i, None, partition_key=f"k{i % 12}")
    producer.flush()
    assert done.wait(10)
    with lock:  # before any consumer closes: closing hands its unacked messages to the others
        seen = list(got)
    for c in consumers:
        c.close()
    producer.close()
    assert sorted(i for _, i, _ in seen) == list(range(96))  # each message once
    owners: dict[int, set[str]] = {}
    entries: dict[int, set[str]] = {}
    for name, i, entry in seen:
        owners.setdefault(i % 12, set()).add(name)
        entries.setdefault(entry, set()).add(name)
    assert all(len(o) == 1 for o in owners.values())  # a key to one consumer
    assert any(len(e) > 1 for e in entries.values())  # batches were shared out


def test_asyncio_api_batch_index_acks(bia_server: ServerProcess, topic: str) -> None:
    """The asyncio twins: acknowledged messages of a batch never come back, and a
    cumulative ack inside a batch covers the messages before it."""
    import pulsar.asyncio as apulsar

    async def subscribe(c: apulsar.Client, name: str) -> apulsar.Consumer:
        kind = pulsar.ConsumerType.Shared if name == "i" else pulsar.ConsumerType.Exclusive
        return await c.subscribe(
            topic,
            name,
            consumer_type=kind,
            initial_position=pulsar.InitialPosition.Earliest,
            batch_index_ack_enabled=True,
        )

    async def receive(consumer: apulsar.Consumer, n: int) -> list[pulsar.Message]:
        return [await asyncio.wait_for(consumer.receive(), 10) for _ in range(n)]

    async def run() -> None:
        c = apulsar.Client(bia_server.pulsar_url, operation_timeout_seconds=5, logger=quiet())
        try:
            producer = await c.create_producer(
                topic, batching_max_messages=10, batching_max_publish_delay_ms=500
            )
            ids = await asyncio.gather(*(producer.send(b"%d" % i) for i in range(10)))
            assert len({m.entry_id() for m in ids}) == 1  # one entry
            individual, cumulative = await subscribe(c, "i"), await subscribe(c, "c")
            got = await receive(individual, 10)
            for m in got[::2]:
                await individual.acknowledge(m)  # 0, 2, 4, 6, 8
            await individual.close()  # answered once those acks are durable
            got = await receive(cumulative, 10)
            await cumulative.acknowledge_cumulative(got[3])  # 0..3
            await cumulative.close()
            again = await subscribe(c, "i")
            assert [m.data() for m in await receive(again, 5)] == [b"1", b"3", b"5", b"7", b"9"]
            rest = await subscribe(c, "c")
            assert [m.data() for m in await receive(rest, 6)] == [b"%d" % i for i in range(4, 10)]
            for consumer in (again, rest):  # and nothing more
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(consumer.receive(), 0.3)
            await again.close()
            await rest.close()
            await producer.close()
        finally:
            await c.close()

    asyncio.run(run())
