"""State every broker of a cluster must agree on, across a move of the partition
(an unload, or SIGKILL of its owner): producer epochs (a producer fenced on the old owner stays
fenced on the new one), producer ids (a Kafka idempotent producer's id is unique in
the cluster, and its dedup holds across the move) and schemas (a schema registered
through one broker is enforced by the next owner). Three `weir serve` processes of
one cluster (real ZooKeeper, three real bookies) and the real clients."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pulsar
import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafka.net.compat import KafkaNetClient as KafkaClient
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.producer.transaction import InitProducerIdRequest
from pulsar.schema import Integer, JsonSchema, Record, String, StringSchema

import weir
from tests.client.test_access_modes import raw_init
from tests.cluster.claims import in_zk, owner_of
from tests.cluster.cluster_topics import created, read_all
from tests.cluster.kafka_members import group_member
from tests.conftest import ServerProcess, cluster_servers
from weir.broker.cluster import ClusterRecords, partition_key
from weir.broker.cluster.broker_mode import node_id
from weir.broker.cluster.claims import Assignment
from weir.errors import ProducerFencedError
from weir.protocols.kafka.cluster_view import coordinator_of
from weir.replication.local_cluster import BookieProcess
from weir.replication.zkserver import ZooKeeperServer

NAMES = ("a", "b", "c")


@pytest.fixture(scope="module")
def brokers(
    zookeeper: ZooKeeperServer,
    shared_root: str,
    shared_bookies: list[BookieProcess],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, ServerProcess]]:
    with cluster_servers(NAMES, zookeeper.hosts, shared_root, tmp_path_factory, "shared") as out:
        yield out


def moved(
    brokers: dict[str, ServerProcess], zookeeper: ZooKeeperServer, root: str, name: str, owner: str
) -> str:
    """Kill ``owner`` with SIGKILL; the broker that claims ``name``'s partition next."""
    brokers[owner].kill()
    return in_zk(zookeeper, root, lambda r: owner_of(r, partition_key(name, 0), other_than=owner))


def unloaded(
    zookeeper: ZooKeeperServer, root: str, name: str, owner: str, partition: int = 0
) -> str:
    """Move ``name``'s partition off ``owner`` (an admin's unload, pinned to another
    broker, as `Ownership.unload` writes it); the broker that claims it next."""
    key = partition_key(name, partition)
    to = next(n for n in NAMES if n != owner)

    async def run(records: ClusterRecords) -> str:
        while True:
            got = await records.assignment(key)
            assert got is not None
            a, version = got
            if await records.set_assignment(
                key, Assignment(to, None, a.generation, pinned=True), version
            ):
                await records.bump_epoch()
                break
        return await owner_of(records, key, other_than=owner)

    return in_zk(zookeeper, root, run)


def init_at_owner(endpoint: str, topic: str, producer: str, **fields: Any) -> Any:
    """A raw write session's first answer from the partition's (new) owner: asked again
    while it still opens the partition (NOT_OWNER / UNAVAILABLE)."""
    deadline = time.monotonic() + 60
    while True:
        got = raw_init(endpoint, topic, producer, **fields)
        if not got.HasField("error") or got.error.code not in ("NOT_OWNER", "UNAVAILABLE"):
            return got
        assert time.monotonic() < deadline, got.error.message
        time.sleep(0.1)


def test_a_producer_fenced_on_the_old_owner_stays_fenced_on_the_new_one(
    brokers: dict[str, ServerProcess], zookeeper: ZooKeeperServer, shared_root: str
) -> None:
    """An exclusive producer is fenced by an ExclusiveWithFencing one on the owner; the
    partition is unloaded to another broker; there the old producer coming back with its epoch is
    refused as fenced (the epoch is the cluster's, not the old owner's), and the next
    exclusive producer gets the next epoch."""
    name = "public/default/xepoch"
    owner = in_zk(zookeeper, shared_root, lambda r: created(brokers, r, name))
    try:
        with weir.Client(brokers[owner].endpoint) as c:
            old = c.writer(name, producer_id="old", access_mode="exclusive")
            old_epoch = old.wait_init().producer_epoch
            assert old_epoch is not None
            old.write(b"old")
            new = c.writer(name, producer_id="new", access_mode="exclusive-with-fencing")
            assert new.wait_init().producer_epoch == old_epoch + 1
            new.write(b"new")
            new.close()
            with contextlib.suppress(ProducerFencedError):  # its stream heard the fence
                old.close()
        new_owner = unloaded(zookeeper, shared_root, name, owner)
        stale = init_at_owner(
            brokers[new_owner].endpoint, name, "old", access_mode=3, producer_epoch=old_epoch
        )
        assert stale.HasField("error") and stale.error.code == "PRODUCER_FENCED", stale
        with weir.Client(brokers[new_owner].endpoint) as c:
            third = c.writer(name, producer_id="third", access_mode="exclusive")
            # the next epoch: attempts that met the moving partition (NOT_OWNER) took nothing
            assert third.wait_init().producer_epoch == old_epoch + 2
            third.close()
    finally:
        if brokers[owner].proc is None:
            brokers[owner].start()


def kafka_producer_ids(bootstrap: str, names: Sequence[str]) -> list[int]:
    """The producer id InitProducerId answers at each broker of ``names`` (kafka-python's
    client, sending to each one's node)."""
    client = KafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        client.check_version()  # bootstraps: the cluster's nodes
        out = []
        for name in names:
            req = InitProducerIdRequest(
                transactional_id=None,
                transaction_timeout_ms=60_000,
                producer_id=-1,
                producer_epoch=-1,
            )
            got = client.send_and_receive(node_id(name), req, timeout_ms=10_000)
            assert got.error_code == 0, got
            out.append(int(got.producer_id))
        return out
    finally:
        client.close()


def on_two_brokers(
    brokers: dict[str, ServerProcess], zookeeper: ZooKeeperServer, shared_root: str, name: str
) -> tuple[str, str]:
    """Create ``name`` with two partitions and return their owners, two different brokers
    (partition 1 unloaded to another broker when one broker claimed both)."""
    with weir.Client(brokers["a"].endpoint) as c:
        c.create_topic(name, partitions=2)

    async def owners(records: ClusterRecords) -> str:
        return ",".join([await owner_of(records, partition_key(name, p)) for p in (0, 1)])

    first, second = in_zk(zookeeper, shared_root, owners).split(",")
    if first == second:
        second = unloaded(zookeeper, shared_root, name, first, partition=1)
    return first, second


def test_an_exclusive_producer_of_partitions_on_two_brokers_does_not_fence_itself(
    brokers: dict[str, ServerProcess], zookeeper: ZooKeeperServer, shared_root: str
) -> None:
    """An exclusive producer's sessions on the two partitions of a topic, each owned by
    another broker (as a Pulsar partitioned producer opens them): the second broker
    finds the producer holding the topic in the cluster's record and admits it at the
    same epoch, so its first session coming back with that epoch is not fenced; another
    producer is fenced by neither broker with a stale epoch, and takes the next one."""
    name = "public/default/xtwo"
    first, second = on_two_brokers(brokers, zookeeper, shared_root, name)
    at_first = init_at_owner(brokers[first].endpoint, name, "x", access_mode=1, partition=0)
    epoch = at_first.init.producer_epoch
    at_second = init_at_owner(brokers[second].endpoint, name, "x", access_mode=1, partition=1)
    assert at_second.init.producer_epoch == epoch, at_second
    again = init_at_owner(
        brokers[first].endpoint, name, "x", access_mode=1, partition=0, producer_epoch=epoch
    )
    assert not again.HasField("error") and again.init.producer_epoch == epoch, again
    other = init_at_owner(brokers[second].endpoint, name, "y", access_mode=3, partition=1)
    assert other.init.producer_epoch == epoch + 1, other
    stale = init_at_owner(
        brokers[first].endpoint, name, "x", access_mode=1, partition=0, producer_epoch=epoch
    )
    assert stale.HasField("error") and stale.error.code == "PRODUCER_FENCED", stale


def test_an_exclusive_producer_on_one_broker_fences_the_live_one_on_another(
    brokers: dict[str, ServerProcess], zookeeper: ZooKeeperServer, shared_root: str
) -> None:
    """A live exclusive writer of partition 0 on its owner; an ExclusiveWithFencing
    producer takes the topic at partition 1's owner, another broker: the first broker
    hears of the grown epoch (its watch on the cluster's epochs) and fences its live
    writer, whose next writes fail with ProducerFencedError."""
    name = "public/default/xlive"
    first, second = on_two_brokers(brokers, zookeeper, shared_root, name)
    with weir.Client(brokers[first].endpoint) as c:
        old = c.writer(name, producer_id="old", access_mode="exclusive", partition=0)
        try:
            epoch = old.wait_init().producer_epoch
            assert epoch is not None
            old.write(b"before")
            new = init_at_owner(brokers[second].endpoint, name, "new", access_mode=3, partition=1)
            assert new.init.producer_epoch == epoch + 1, new
            deadline = time.monotonic() + 30
            with pytest.raises(ProducerFencedError):
                while time.monotonic() < deadline:
                    old.write(b"after")
                    old.flush(timeout=10)  # a write at a time, until the fence arrives
        finally:
            with contextlib.suppress(ProducerFencedError):
                old.close()


def test_kafka_producer_ids_are_unique_across_brokers_and_idempotence_survives_kill_9(
    brokers: dict[str, ServerProcess], zookeeper: ZooKeeperServer, shared_root: str
) -> None:
    """InitProducerId asked of each broker (kafka-python's client) never answers an id
    another broker handed out (two producers with one id would drop each other's records
    as resends); idempotent confluent-kafka producers bootstrapped at each broker write
    to one partition and its owner is killed while their records are in flight: every acknowledged record of every
    producer is stored exactly once."""
    name, kname = "public/default/kidem", "kidem"
    owner = in_zk(zookeeper, shared_root, lambda r: created(brokers, r, name))
    acked: dict[str, set[int]] = {n: set() for n in NAMES}
    producers: dict[str, Producer] = {}
    ids = kafka_producer_ids(brokers[NAMES[0]].kafka, [*NAMES, *NAMES])
    assert len(set(ids)) == len(ids), ids  # never the same id twice in the cluster
    try:
        for n in NAMES:  # each bootstrapped at one broker: its InitProducerId asks one of them
            producers[n] = Producer(
                {
                    "bootstrap.servers": brokers[n].kafka,
                    "enable.idempotence": True,
                    "acks": "all",
                    "message.timeout.ms": 90_000,
                    "retry.backoff.ms": 200,
                    "linger.ms": 5,
                }
            )

        def send(n: str, i: int) -> None:
            def done(err: Any, _msg: Any) -> None:
                if err is None:
                    acked[n].add(i)

            producers[n].produce(
                kname, value=b"id:%s:%d|" % (n.encode(), i), partition=0, on_delivery=done
            )

        for i in range(40):
            for n in NAMES:
                send(n, i)
        for p in producers.values():
            assert p.flush(60) == 0
        for i in range(40, 80):
            for n in NAMES:
                send(n, i)
        deadline = time.monotonic() + 60  # kill the owner while records are in flight
        while not any(len(v) > 45 for v in acked.values()):
            assert time.monotonic() < deadline, {n: len(v) for n, v in acked.items()}
            for p in producers.values():
                p.poll(0.01)
        brokers[owner].kill()
        for i in range(80, 120):
            for n in NAMES:
                send(n, i)
        for p in producers.values():
            assert p.flush(90) == 0
        assert all(len(acked[n]) == 120 for n in NAMES), {n: len(v) for n, v in acked.items()}
        home = next(n for n in NAMES if n != owner)
        rows = asyncio.run(read_all(brokers[home].endpoint, name, 3 * 120))
        stored = [mid for _, mid in rows]
        assert sorted(stored) == sorted(f"id:{n}:{i}" for n in NAMES for i in range(120))
        assert [o for o, _ in rows] == list(range(len(rows)))
    finally:
        for p in producers.values():
            p.flush(10)
        if brokers[owner].proc is None:
            brokers[owner].start()


def first_offset(consumer: KafkaConsumer, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for recs in consumer.poll(timeout_ms=500).values():
            if recs:
                return int(recs[0].offset)
    raise AssertionError("nothing consumed")


def test_kafka_group_offsets_survive_kill_9_of_the_partition_owner_and_coordinator(
    brokers: dict[str, ServerProcess], zookeeper: ZooKeeperServer, shared_root: str
) -> None:
    """Two kafka-python groups commit offset 30 of one partition: one coordinated by
    another broker than the partition's owner (its coordinator hands the commit to the
    owner), one coordinated by the owner itself. The owner is killed (the partition and
    the second group's coordinator move): a member of each group starts at 30, commits
    45, and the new owner has 45 for both."""
    name, kname = "public/default/kgroup", "kgroup"
    tp = TopicPartition(kname, 0)
    owner = in_zk(zookeeper, shared_root, lambda r: created(brokers, r, name))
    candidates = [f"kg{i}" for i in range(64)]
    elsewhere = next(g for g in candidates if coordinator_of(g, NAMES) != owner)
    at_owner = next(g for g in candidates if coordinator_of(g, NAMES) == owner)
    with weir.Client(brokers[owner].endpoint) as c, c.writer(name, producer_id="w") as w:
        for i in range(60):
            w.write(b"m%d" % i)
    try:
        for group in (elsewhere, at_owner):
            first = group_member(brokers[owner], group, tp)
            try:
                first.commit({tp: OffsetAndMetadata(30, "", -1)})
                assert first.committed(tp) == 30
            finally:
                first.close()
        new_owner = moved(brokers, zookeeper, shared_root, name, owner)
        for group in (elsewhere, at_owner):
            second = group_member(brokers[new_owner], group, tp)
            try:
                assert first_offset(second) == 30  # the committed offset survived the move
                second.commit({tp: OffsetAndMetadata(45, "", -1)})
                assert second.committed(tp) == 45
            finally:
                second.close()
        with weir.Client(brokers[new_owner].endpoint) as c:
            for group in (elsewhere, at_owner):
                [part] = c.describe_consumer(name, group).partitions
                assert part.committed_offset == 45
    finally:
        if brokers[owner].proc is None:
            brokers[owner].start()


def test_every_broker_names_the_same_coordinator_for_a_kafka_group(
    brokers: dict[str, ServerProcess],
) -> None:
    """FindCoordinator asked of each broker (kafka-python's client, to each node) names one
    coordinator per group, so members bootstrapped at different brokers form one group
    (else each broker would run a group of its own and give each member every
    partition); groups spread over the brokers."""
    client = KafkaClient(bootstrap_servers=brokers[NAMES[0]].kafka, request_timeout_ms=10_000)
    try:
        client.check_version()
        chosen = {}
        for group in (f"g{i}" for i in range(8)):
            answers = set()
            for name in NAMES:
                req = FindCoordinatorRequest(key=group, key_type=0, coordinator_keys=[group])
                got = client.send_and_receive(node_id(name), req, timeout_ms=10_000)
                res = got.coordinators[0] if got.coordinators else got
                assert res.error_code == 0, res
                answers.add(res.node_id)
            assert len(answers) == 1, (group, answers)
            chosen[group] = answers.pop()
        assert len(set(chosen.values())) > 1, chosen
    finally:
        client.close()


class Order(Record):
    item = String()
    count = Integer()


def test_a_schema_registered_through_one_broker_holds_on_the_next_owner(
    brokers: dict[str, ServerProcess], zookeeper: ZooKeeperServer, shared_root: str
) -> None:
    """A JSON schema registered by a pulsar-client producer on the owner; the partition is
    unloaded to another broker; its new owner refuses an incompatible producer and gives a compatible one
    the same schema version."""
    name = "public/default/xschema"
    topic = f"persistent://{name}"
    owner = in_zk(zookeeper, shared_root, lambda r: created(brokers, r, name))
    home = next(n for n in NAMES if n != owner)
    log = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    try:
        client = pulsar.Client(brokers[home].pulsar_url, operation_timeout_seconds=10, logger=log)
        try:
            p = client.create_producer(topic, schema=JsonSchema(Order))
            p.send(Order(item="pen", count=3))
            p.close()
        finally:
            client.close()
        unloaded(zookeeper, shared_root, name, owner)
        client = pulsar.Client(brokers[home].pulsar_url, operation_timeout_seconds=30, logger=log)
        try:
            with pytest.raises(Exception, match=r"(?i)incompatible"):
                client.create_producer(topic, schema=StringSchema())
            p = client.create_producer(topic, schema=JsonSchema(Order))
            p.send(Order(item="ink", count=1))
            p.close()
        finally:
            client.close()
    finally:
        if brokers[owner].proc is None:
            brokers[owner].start()
