"""Partitioned topics, multi-topic and regex consumers, schemas, access modes, asyncio API."""

from __future__ import annotations

import asyncio
import datetime
import itertools
import re
import time

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema

import weir
from tests.conftest import ServerProcess
from tests.pulsar.conftest import quiet


def _all(consumer: pulsar.Consumer, n: int) -> list[pulsar.Message]:
    out = []
    for _ in range(n):
        m = consumer.receive(5000)
        consumer.acknowledge(m)
        out.append(m)
    return out


ROUTING_MODES = ["round-robin", "single", "key", "custom"]


def _routing(mode: str) -> dict[str, object]:
    """create_producer options of a routing mode; message i is b"i", keyed k{i % 4} in
    the key mode. Round robin without batching: with it the client moves on per batch."""
    if mode == "round-robin":
        return dict(
            message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
            batching_enabled=False,
        )
    if mode == "single":
        return dict(message_routing_mode=pulsar.PartitionsRoutingMode.UseSinglePartition)
    if mode == "custom":  # CustomPartition: the application's router picks
        return dict(message_router=lambda msg, n: int(msg.data()) % n)
    return {}


def _check_routing(mode: str, sent: list[int], got: dict[bytes, int], n: int = 3) -> None:
    """``sent[i]``: the partition message i's id names; ``got``: message -> the partition
    its consumer read it from. Each message is read where its id says, and each mode
    placed it where that mode places messages."""
    assert got == {b"%d" % i: p for i, p in enumerate(sent)}
    if mode == "round-robin":
        assert all(b == (a + 1) % n for a, b in itertools.pairwise(sent))
    elif mode == "single":
        assert len(set(sent)) == 1
    elif mode == "custom":
        assert sent == [i % n for i in range(len(sent))]
    else:
        by_key: dict[int, set[int]] = {}
        for i, p in enumerate(sent):
            by_key.setdefault(i % 4, set()).add(p)
        assert all(len(v) == 1 for v in by_key.values())  # a key stays in one partition


def _partition_of(m: pulsar.Message) -> int:
    return int(re.search(r"-partition-(\d+)$", m.topic_name()).group(1))  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ROUTING_MODES)
def test_partitioned_topic_with_every_routing_mode(
    pulsar_server: ServerProcess, client: pulsar.Client, topic: str, mode: str
) -> None:
    from tests.pulsar.test_admin_rest import call

    call(pulsar_server.http_url, "PUT", f"/persistent/public/default/{topic}/partitions", 3)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, **_routing(mode))  # type: ignore[arg-type]
    key = (lambda i: f"k{i % 4}") if mode == "key" else (lambda i: None)
    ids = [producer.send(b"%d" % i, partition_key=key(i)) for i in range(12)]
    got = {m.data(): _partition_of(m) for m in _all(consumer, 12)}
    _check_routing(mode, [mid.partition() for mid in ids], got)
    consumer.close()
    producer.close()


def test_asyncio_api_every_routing_mode(pulsar_server: ServerProcess, topic: str) -> None:
    """The asyncio producer's routing modes (its create_producer takes the same options)."""
    import pulsar.asyncio as apulsar

    from tests.pulsar.test_admin_rest import call

    async def one(c: apulsar.Client, mode: str) -> None:
        name = f"{topic}-{mode}"
        call(pulsar_server.http_url, "PUT", f"/persistent/public/default/{name}/partitions", 3)
        consumer = await c.subscribe(name, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = await c.create_producer(name, **_routing(mode))  # type: ignore[arg-type]
        ids = []
        for i in range(12):
            ids.append(
                await producer.send(b"%d" % i, partition_key=f"k{i % 4}" if mode == "key" else None)
            )
        got = {}
        for _ in range(12):
            m = await asyncio.wait_for(consumer.receive(), 10)
            await consumer.acknowledge(m)
            got[m.data()] = _partition_of(m)
        _check_routing(mode, [mid.partition() for mid in ids], got)
        await consumer.close()
        await producer.close()

    async def run() -> None:
        c = apulsar.Client(pulsar_server.pulsar_url, operation_timeout_seconds=5, logger=quiet())
        try:
            await asyncio.gather(*(one(c, mode) for mode in ROUTING_MODES))
        finally:
            await c.close()

    asyncio.run(run())


def test_multi_topic_and_regex_consumers(client: pulsar.Client, topic: str) -> None:
    names = [f"{topic}-a", f"{topic}-b", f"{topic}-c"]
    producers = [client.create_producer(n) for n in names]
    multi = client.subscribe(names[:2], "m", initial_position=pulsar.InitialPosition.Earliest)
    pattern = client.subscribe(
        re.compile(f"persistent://public/default/{re.escape(topic)}-.*"),
        "r",
        initial_position=pulsar.InitialPosition.Earliest,
    )
    for p in producers:
        p.send(p.topic().encode())
    assert sorted(m.data() for m in _all(multi, 2)) == sorted(
        f"persistent://public/default/{n}".encode() for n in names[:2]
    )
    assert len(_all(pattern, 3)) == 3
    for c in (multi, pattern):
        c.close()
    for p in producers:
        p.close()


class Order(Record):
    item = String()
    count = Integer()


class OrderV2(Record):
    _avro_namespace = None
    item = String()
    count = Integer()


def test_schemas_string_json_avro_and_an_incompatible_one(
    client: pulsar.Client, topic: str
) -> None:
    s = client.create_producer(f"{topic}-s", schema=StringSchema())
    sc = client.subscribe(
        f"{topic}-s", "s", schema=StringSchema(), initial_position=pulsar.InitialPosition.Earliest
    )
    s.send("héllo")
    assert sc.receive(5000).value() == "héllo"
    for schema in (JsonSchema(Order), AvroSchema(Order)):
        name = f"{topic}-{schema.schema_info().schema_type()}"
        p = client.create_producer(name, schema=schema)
        c = client.subscribe(
            name, "s", schema=schema, initial_position=pulsar.InitialPosition.Earliest
        )
        p.send(Order(item="pen", count=3))
        v = c.receive(5000).value()
        assert (v.item, v.count) == ("pen", 3)
        with pytest.raises(Exception, match=r"(?i)incompatible"):
            client.create_producer(name, schema=StringSchema())
        for x in (p, c):
            x.close()
    for x in (s, sc):
        x.close()


def test_exclusive_access_modes_and_fencing(client: pulsar.Client, topic: str) -> None:
    first = client.create_producer(
        topic, producer_name="a", access_mode=pulsar.ProducerAccessMode.Exclusive
    )
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(
            topic, producer_name="b", access_mode=pulsar.ProducerAccessMode.Shared
        )
    fencer = client.create_producer(
        topic, producer_name="c", access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing
    )
    fencer.send(b"mine")
    with pytest.raises(Exception):  # noqa: B017 - fenced: the old one may not write again
        first.send(b"late")
    fencer.close()


def test_asyncio_api(pulsar_server: ServerProcess, topic: str) -> None:
    import pulsar.asyncio as apulsar

    async def run() -> list[bytes]:
        c = apulsar.Client(pulsar_server.pulsar_url, operation_timeout_seconds=5)
        producer = await c.create_producer(topic)
        consumer = await c.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        for i in range(3):
            await producer.send(b"%d" % i)
        out = []
        for _ in range(3):
            m = await consumer.receive()
            await consumer.acknowledge(m)
            out.append(m.data())
        await consumer.close()
        await producer.close()
        await c.close()
        return out

    assert asyncio.run(run()) == [b"0", b"1", b"2"]


def test_asyncio_api_acks_seek_readers_and_several_topics(
    pulsar_server: ServerProcess, topic: str
) -> None:
    """The asyncio twins of the sync calls the other tests make: batched concurrent
    sends, cumulative / negative acks with a redelivery count, last message id, seek by id
    and by time, readers (inclusive, seek), several topics, partitions, unsubscribe."""
    import pulsar.asyncio as apulsar

    other = f"{topic}-other"

    async def run() -> None:
        c = apulsar.Client(pulsar_server.pulsar_url, operation_timeout_seconds=5)
        try:
            producer = await c.create_producer(topic, batching_enabled=False)
            ids = [
                await producer.send(b"%d" % i, partition_key=f"k{i}", properties={"i": str(i)})
                for i in range(6)
            ]
            consumer = await c.subscribe(
                topic,
                "s",
                initial_position=pulsar.InitialPosition.Earliest,
                negative_ack_redelivery_delay_ms=100,
            )
            got = [await consumer.receive() for _ in range(6)]
            assert [m.data() for m in got] == [b"%d" % i for i in range(6)]
            assert [m.properties()["i"] for m in got] == [str(i) for i in range(6)]
            assert got[5].partition_key() == "k5"
            await consumer.acknowledge_cumulative(got[2])  # 0..2
            await consumer.negative_acknowledge(got[3])
            await consumer.acknowledge(got[4])
            await consumer.acknowledge(got[5])
            again = await asyncio.wait_for(consumer.receive(), 10)
            assert (again.data(), again.redelivery_count()) == (b"3", 1)
            await consumer.acknowledge(again)
            last = await consumer.get_last_message_id()
            assert last.entry_id() == ids[5].entry_id()
            await consumer.seek(ids[2])
            assert (await asyncio.wait_for(consumer.receive(), 10)).data() in (b"2", b"3")
            await consumer.seek(got[0].publish_timestamp())
            assert (await asyncio.wait_for(consumer.receive(), 10)).data() == b"0"
            await consumer.unsubscribe()
            await consumer.close()

            reader = await c.create_reader(topic, ids[2], start_message_id_inclusive=True)
            assert await reader.has_message_available()
            assert (await reader.read_next()).data() == b"2"
            await reader.seek(got[0].publish_timestamp())  # (it takes no MessageId.earliest)
            assert (await reader.read_next()).data() == b"0"
            await reader.close()

            batched = await c.create_producer(other, batching_max_publish_delay_ms=20)
            batch_ids = await asyncio.gather(*(batched.send(b"b%d" % i) for i in range(8)))
            assert len({m.entry_id() for m in batch_ids}) < 8  # some went as one entry
            both = await c.subscribe(
                [topic, other], "both", initial_position=pulsar.InitialPosition.Earliest
            )
            seen = set()
            for _ in range(14):
                m = await asyncio.wait_for(both.receive(), 10)
                await both.acknowledge(m)
                seen.add(m.data())
            assert seen == {b"%d" % i for i in range(6)} | {b"b%d" % i for i in range(8)}
            await both.close()
            assert await c.get_topic_partitions(other) == [f"persistent://public/default/{other}"]
            await batched.close()
            await producer.close()
        finally:
            await c.close()

    asyncio.run(run())
    with weir.Client(pulsar_server.endpoint) as native:
        assert [s.name for s in native.list_subscriptions(topic)] == ["both"]


def test_asyncio_api_regex_access_modes_and_schemas(
    pulsar_server: ServerProcess, topic: str
) -> None:
    """The asyncio twins of the regex consumer, exclusive producers and schemas."""
    import pulsar.asyncio as apulsar

    async def run() -> None:
        c = apulsar.Client(pulsar_server.pulsar_url, operation_timeout_seconds=5)
        try:
            names = [f"{topic}-a", f"{topic}-b"]
            producers = [
                await c.create_producer(
                    n, producer_name=f"only-{n}", access_mode=pulsar.ProducerAccessMode.Exclusive
                )
                for n in names
            ]
            with pytest.raises(apulsar.PulsarException) as busy:
                await c.create_producer(names[0], producer_name="second")
            assert busy.value.error() == pulsar.Result.ProducerBusy
            pattern = await c.subscribe(
                f"persistent://public/default/{re.escape(topic)}-.*",
                "r",
                is_pattern_topic=True,
                initial_position=pulsar.InitialPosition.Earliest,
            )
            for p in producers:
                await p.send(p.topic().encode())
            got = sorted([(await asyncio.wait_for(pattern.receive(), 10)).data() for _ in names])
            assert got == sorted(f"persistent://public/default/{n}".encode() for n in names)
            await pattern.close()
            for p in producers:
                await p.close()

            schema = JsonSchema(Order)
            typed = await c.create_producer(f"{topic}-json", schema=schema)
            reader = await c.subscribe(
                f"{topic}-json",
                "s",
                schema=schema,
                initial_position=pulsar.InitialPosition.Earliest,
            )
            await typed.send(Order(item="ink", count=2))
            v = (await asyncio.wait_for(reader.receive(), 10)).value()
            assert (v.item, v.count) == ("ink", 2)
            with pytest.raises(apulsar.PulsarException, match=r"(?i)incompatible"):
                await c.create_producer(f"{topic}-json", schema=StringSchema())
            await reader.close()
            await typed.close()
        finally:
            await c.close()

    asyncio.run(run())


def test_asyncio_api_dedup_delays_dead_letters_chunks_and_compaction(
    pulsar_server: ServerProcess, topic: str
) -> None:
    """More asyncio twins: dedup across a producer's reconnect, deliver_after and
    deliver_at on a Shared subscription of two consumers, a dead-letter policy, a chunked
    message, a partitioned topic, a compacted reader."""
    import pulsar.asyncio as apulsar

    with weir.Client(pulsar_server.endpoint) as native:
        native.create_topic(f"{topic}-parts", partitions=3)

    async def run() -> None:
        c = apulsar.Client(pulsar_server.pulsar_url, operation_timeout_seconds=5)
        try:
            p = await c.create_producer(topic, producer_name="w", batching_enabled=False)
            for i in range(3):
                await p.send(b"%d" % i, sequence_id=i)
            await p.close()
            p = await c.create_producer(topic, producer_name="w", batching_enabled=False)
            assert p.last_sequence_id() == 2  # it learns where it was
            await p.send(b"2 again", sequence_id=2)  # dropped
            reader = await c.create_reader(topic, pulsar.MessageId.earliest)
            seen = []
            while await reader.has_message_available():
                seen.append((await reader.read_next()).data())
            assert seen == [b"0", b"1", b"2"]
            await reader.close()

            shared = [
                await c.subscribe(
                    f"{topic}-d",
                    "s",
                    consumer_type=pulsar.ConsumerType.Shared,
                    negative_ack_redelivery_delay_ms=50,
                    dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(
                        max_redeliver_count=1, dead_letter_topic=f"{topic}-dlq"
                    ),
                )
                for _ in range(2)
            ]
            dead = await c.subscribe(
                f"{topic}-dlq", "d", initial_position=pulsar.InitialPosition.Earliest
            )
            d = await c.create_producer(f"{topic}-d", batching_enabled=False)
            now = int(time.time() * 1000)
            await d.send(b"after", deliver_after=datetime.timedelta(milliseconds=600))
            await d.send(b"at", deliver_at=now + 300)
            await d.send(b"poison")
            got: dict[bytes, int] = {}
            nacks = 0
            # one receive pending per consumer (a cancelled receive would lose its message)
            pending = {asyncio.ensure_future(x.receive()): x for x in shared}
            deadline = time.monotonic() + 20
            while (len(got) < 2 or nacks < 2) and time.monotonic() < deadline:
                done, _ = await asyncio.wait(
                    pending, timeout=1, return_when=asyncio.FIRST_COMPLETED
                )
                for task in done:
                    consumer = pending.pop(task)
                    m = task.result()
                    if m.data() == b"poison":
                        await consumer.negative_acknowledge(m)
                        nacks += 1
                    else:
                        got[m.data()] = int(time.time() * 1000)
                        await consumer.acknowledge(m)
                    pending[asyncio.ensure_future(consumer.receive())] = consumer
            for task in pending:
                task.cancel()
            assert got.keys() == {b"at", b"after"}
            assert got[b"at"] >= now + 300 and got[b"after"] >= now + 600
            buried = await asyncio.wait_for(dead.receive(), 10)
            assert buried.data() == b"poison"  # after it came twice (redelivered once)
            for x in (*shared, dead, d):
                await x.close()

            big = bytes(range(256)) * (6 * 4096)  # 6 MiB: over the 5 MiB a message may be
            chunked = await c.create_producer(
                f"{topic}-big", chunking_enabled=True, batching_enabled=False
            )
            whole = await c.subscribe(
                f"{topic}-big", "s", initial_position=pulsar.InitialPosition.Earliest
            )
            await chunked.send(big)
            assert (await asyncio.wait_for(whole.receive(), 20)).data() == big
            for x in (chunked, whole):
                await x.close()

            parts = await c.create_producer(
                f"{topic}-parts",
                message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
                batching_enabled=False,
            )
            ids = [await parts.send(b"%d" % i) for i in range(6)]
            assert {m.partition() for m in ids} == {0, 1, 2}
            await parts.close()

            keyed = await c.create_producer(f"{topic}-kv", batching_enabled=False)
            for k, v in (("a", b"1"), ("b", b"1"), ("a", b"2")):
                await keyed.send(v, partition_key=k)
            await keyed.close()
        finally:
            await c.close()

    asyncio.run(run())
    with weir.Client(pulsar_server.endpoint) as native:
        native.compact(f"{topic}-kv", wait=True)

    async def compacted() -> list[tuple[str, bytes]]:
        c = apulsar.Client(pulsar_server.pulsar_url, operation_timeout_seconds=5)
        try:
            r = await c.create_reader(
                f"{topic}-kv", pulsar.MessageId.earliest, is_read_compacted=True
            )
            out = []
            while await r.has_message_available():
                m = await r.read_next()
                out.append((m.partition_key(), m.data()))
            await r.close()
            return out
        finally:
            await c.close()

    assert asyncio.run(compacted()) == [("b", b"1"), ("a", b"2")]


def test_asyncio_api_subscription_types_fencing_and_avro(
    pulsar_server: ServerProcess, topic: str
) -> None:
    """More asyncio twins: Failover and Key_Shared subscriptions of two consumers, a
    fencing producer, an Avro schema."""
    import pulsar.asyncio as apulsar

    async def collect(consumers: list[apulsar.Consumer], n: int) -> list[list[pulsar.Message]]:
        got: list[list[pulsar.Message]] = [[] for _ in consumers]
        # one receive pending per consumer (a cancelled receive would lose its message)
        pending = {asyncio.ensure_future(c.receive()): i for i, c in enumerate(consumers)}
        deadline = time.monotonic() + 20
        while sum(map(len, got)) < n and time.monotonic() < deadline:
            done, _ = await asyncio.wait(pending, timeout=1, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                i = pending.pop(task)
                await consumers[i].acknowledge(task.result())
                got[i].append(task.result())
                pending[asyncio.ensure_future(consumers[i].receive())] = i
        for task in pending:
            task.cancel()
        return got

    async def run() -> None:
        c = apulsar.Client(pulsar_server.pulsar_url, operation_timeout_seconds=5)
        try:
            fo = [
                await c.subscribe(
                    f"{topic}-fo", "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name=n
                )
                for n in "ab"
            ]
            ks = [
                await c.subscribe(f"{topic}-ks", "ks", consumer_type=pulsar.ConsumerType.KeyShared)
                for _ in range(2)
            ]
            for name in (f"{topic}-fo", f"{topic}-ks"):
                p = await c.create_producer(name, batching_enabled=False)
                for i in range(12):
                    await p.send(b"%d" % i, partition_key=f"k{i % 4}")
                await p.close()
            got = await collect(fo, 12)
            assert [m.data() for m in got[0]] == [b"%d" % i for i in range(12)] and not got[1]
            got = await collect(ks, 12)
            assert sorted(m.data() for m in got[0] + got[1]) == sorted(b"%d" % i for i in range(12))
            keys = [{m.partition_key() for m in g} for g in got]
            assert not keys[0] & keys[1]  # each key goes to one consumer
            for x in (*fo, *ks):
                await x.close()

            first = await c.create_producer(
                topic, producer_name="a", access_mode=pulsar.ProducerAccessMode.Exclusive
            )
            fencer = await c.create_producer(
                topic,
                producer_name="b",
                access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing,
            )
            await fencer.send(b"mine")
            with pytest.raises(apulsar.PulsarException):  # fenced: it may not write again
                await first.send(b"late")
            await fencer.close()

            schema = AvroSchema(Order)
            typed = await c.create_producer(f"{topic}-avro", schema=schema)
            reader = await c.subscribe(
                f"{topic}-avro",
                "s",
                schema=schema,
                initial_position=pulsar.InitialPosition.Earliest,
            )
            await typed.send(Order(item="pad", count=7))
            v = (await asyncio.wait_for(reader.receive(), 10)).value()
            assert (v.item, v.count) == ("pad", 7)
            await reader.close()
            await typed.close()
        finally:
            await c.close()

    asyncio.run(run())
