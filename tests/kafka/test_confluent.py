"""confluent-kafka 2.16 (librdkafka) and Debian's kcat against a real weir server."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

import weir
from tests.conftest import ServerProcess


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _create(bootstrap: str, name: str, partitions: int) -> None:
    admin = _admin(bootstrap)  # kept alive until its futures are done
    for f in admin.create_topics([NewTopic(name, partitions)]).values():
        f.result(10)


def _produce(bootstrap: str, topic: str, n: int, **conf: object) -> list:
    p = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2, **conf}
    )
    acked: list = []
    errors: list = []

    def done(err: object, msg: object) -> None:
        (errors if err else acked).append(err or msg)

    for i in range(n):
        p.produce(
            topic,
            key=b"k%d" % (i % 5),
            value=b"v%d" % i,
            headers={"n": b"%d" % i},
            on_delivery=done,
        )
        p.poll(0)
    assert p.flush(30) == 0
    assert errors == []
    return acked


def _poll(c: Consumer, n: int, timeout: float = 30) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        for m in c.consume(num_messages=500, timeout=0.5):
            assert m.error() is None, m.error()
            out.append(m)
    return out


def test_idempotent_producer_and_group_consumer(bootstrap: str) -> None:
    _create(bootstrap, "cf", 3)
    acked = _produce(bootstrap, "cf", 3000, acks="all")
    # the offsets acked are exactly the stored ones: per partition 0..n-1, no gap, no repeat
    by_part: dict[int, list[int]] = {}
    for m in acked:
        by_part.setdefault(m.partition(), []).append(m.offset())
    assert all(sorted(v) == list(range(len(v))) for v in by_part.values())
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "cfg",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe(["cf"])
    got = _poll(c, 3000)
    assert sorted(m.value() for m in got) == sorted(b"v%d" % i for i in range(3000))
    assert all(m.headers() == [("n", m.value()[1:])] for m in got)
    c.commit(asynchronous=False)
    committed = c.committed([TopicPartition("cf", p) for p in range(3)], timeout=10)
    assert sum(tp.offset for tp in committed) == 3000
    c.close()


def test_auto_commit_seek_and_offsets_for_times(bootstrap: str) -> None:
    _create(bootstrap, "cft", 1)
    before = int(time.time() * 1000)
    _produce(bootstrap, "cft", 10)
    time.sleep(0.02)  # two writes at distinct write times, not a synchronisation
    middle = int(time.time() * 1000)
    _produce(bootstrap, "cft", 10)
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "cft-g",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 100,
        }
    )
    c.assign([TopicPartition("cft", 0, 0)])
    assert len(_poll(c, 20)) == 20
    # offsets_for_times: by write time, as weir records it
    (tp,) = c.offsets_for_times([TopicPartition("cft", 0, middle)], timeout=10)
    assert tp.offset == 10
    (tp,) = c.offsets_for_times([TopicPartition("cft", 0, before)], timeout=10)
    assert tp.offset == 0
    c.seek(TopicPartition("cft", 0, 15))
    again = _poll(c, 5)
    assert [m.offset() for m in again] == [15, 16, 17, 18, 19]
    low, high = c.get_watermark_offsets(TopicPartition("cft", 0), timeout=10)
    assert (low, high) == (0, 20)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the auto commit reaches the server
        (tp,) = c.committed([TopicPartition("cft", 0)], timeout=10)
        if tp.offset == 20:
            break
    assert tp.offset == 20
    c.close()


def test_admin_client(bootstrap: str) -> None:
    admin = _admin(bootstrap)
    _create(bootstrap, "cfa", 1)
    with pytest.raises(KafkaException):
        admin.create_topics([NewTopic("cfa", 1)])["cfa"].result(10)
    admin.create_partitions([NewPartitions("cfa", 4)])["cfa"].result(10)
    md = admin.list_topics(timeout=10)
    assert len(md.topics["cfa"].partitions) == 4
    res = ConfigResource("topic", "cfa", set_config={"retention.ms": "60000"})
    admin.alter_configs([res])[res].result(10)
    desc = admin.describe_configs([ConfigResource("topic", "cfa")])
    (configs,) = [f.result(10) for f in desc.values()]
    assert configs["retention.ms"].value == "60000"
    _produce(bootstrap, "cfa", 4)
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "cfa-g", "auto.offset.reset": "earliest"}
    )
    c.subscribe(["cfa"])
    _poll(c, 4)
    c.commit(asynchronous=False)
    groups = admin.list_consumer_groups().result(10)
    assert "cfa-g" in {g.group_id for g in groups.valid}
    (described,) = admin.describe_consumer_groups(["cfa-g"]).values()
    assert len(described.result(10).members) == 1
    c.close()
    admin.delete_consumer_groups(["cfa-g"])["cfa-g"].result(10)
    admin.delete_topics(["cfa"])["cfa"].result(10)
    assert "cfa" not in admin.list_topics(timeout=10).topics


def test_admin_delete_records(bootstrap: str) -> None:
    """AdminClient.delete_records moves the low watermark; a consumer below it is reset
    to it (auto.offset.reset), one with auto.offset.reset=error is told."""
    admin = _admin(bootstrap)
    _create(bootstrap, "cfdr", 1)
    _produce(bootstrap, "cfdr", 20)
    (fut,) = admin.delete_records([TopicPartition("cfdr", 0, 13)]).values()
    assert fut.result(10).low_watermark == 13
    (fut,) = admin.delete_records([TopicPartition("cfdr", 0, 25)]).values()
    with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE"):
        fut.result(10)
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "cfdr-g", "auto.offset.reset": "earliest"}
    )
    assert c.get_watermark_offsets(TopicPartition("cfdr", 0), timeout=10) == (13, 20)
    c.assign([TopicPartition("cfdr", 0, 2)])
    assert [m.offset() for m in _poll(c, 7)] == list(range(13, 20))
    c.close()
    strict = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "cfdr-s", "auto.offset.reset": "error"}
    )
    strict.assign([TopicPartition("cfdr", 0, 2)])
    deadline = time.monotonic() + 20
    err = None
    while err is None and time.monotonic() < deadline:
        for m in strict.consume(num_messages=10, timeout=0.5):
            err = m.error()
    strict.close()
    assert err is not None and "out of range" in str(err).lower(), err
    (fut,) = admin.delete_records([TopicPartition("cfdr", 0, -1)]).values()
    assert fut.result(10).low_watermark == 20


def test_delete_records_on_a_compacted_topic_deletes_from_its_view(
    kafka_server: ServerProcess, bootstrap: str
) -> None:
    """DeleteRecords on a cleanup.policy=compact topic deletes the compacted records below
    it too, as Kafka does: a consumer from the beginning starts at the new low watermark
    and gets only the latest values at or past it."""
    admin = _admin(bootstrap)
    for f in admin.create_topics(
        [NewTopic("cfdc", 1, config={"cleanup.policy": "compact"})]
    ).values():
        f.result(10)
    _produce(bootstrap, "cfdc", 20)  # keys k0..k4 four times over: v15..v19 are the latest
    with weir.Client(kafka_server.endpoint) as native:
        native.compact("cfdc", wait=True)
    (fut,) = admin.delete_records([TopicPartition("cfdc", 0, 17)]).values()
    assert fut.result(10).low_watermark == 17
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "cfdc-g", "auto.offset.reset": "earliest"}
    )
    assert c.get_watermark_offsets(TopicPartition("cfdc", 0), timeout=10) == (17, 20)
    c.subscribe(["cfdc"])
    got = [(m.key(), m.value(), m.offset()) for m in _poll(c, 3)]
    assert got == [(b"k2", b"v17", 17), (b"k3", b"v18", 18), (b"k4", b"v19", 19)]
    c.close()


def test_deleted_compacted_records_stay_deleted_after_kill_9(server: ServerProcess) -> None:
    """The trim floor is committed with the trim: a server killed right after the
    DeleteRecords answer serves the compacted view from the new low watermark on."""
    admin = _admin(server.kafka)
    for f in admin.create_topics(
        [NewTopic("cfdk", 1, config={"cleanup.policy": "compact"})]
    ).values():
        f.result(10)
    _produce(server.kafka, "cfdk", 20)
    with weir.Client(server.endpoint) as native:
        native.compact("cfdk", wait=True)
    (fut,) = admin.delete_records([TopicPartition("cfdk", 0, 18)]).values()
    assert fut.result(10).low_watermark == 18
    server.kill()
    server.start()
    c = Consumer(
        {"bootstrap.servers": server.kafka, "group.id": "cfdk-g", "auto.offset.reset": "earliest"}
    )
    assert c.get_watermark_offsets(TopicPartition("cfdk", 0), timeout=10) == (18, 20)
    c.subscribe(["cfdk"])
    got = [(m.key(), m.value(), m.offset()) for m in _poll(c, 2)]
    assert got == [(b"k3", b"v18", 18), (b"k4", b"v19", 19)]
    c.close()


@pytest.mark.skipif(
    shutil.which("kcat") is None, reason="kcat is installed by tools/system-packages.sh"
)
def test_kcat_list_produce_consume_with_keys_and_headers(bootstrap: str) -> None:
    _create(bootstrap, "kc", 1)
    listing = subprocess.run(
        ["kcat", "-b", bootstrap, "-L"], capture_output=True, text=True, check=True
    )
    assert 'topic "kc" with 1 partitions' in listing.stdout
    subprocess.run(
        ["kcat", "-b", bootstrap, "-P", "-t", "kc", "-K:", "-H", "src=kcat"],
        input="k1:hello\nk2:world\n",
        text=True,
        check=True,
        timeout=30,
    )
    out = subprocess.run(
        ["kcat", "-b", bootstrap, "-C", "-t", "kc", "-o", "beginning", "-e", "-f", "%k|%s|%h|%o\n"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    assert out.splitlines() == ["k1|hello|src=kcat|0", "k2|world|src=kcat|1"]


def test_cleanup_policy_compact_is_weir_compaction(
    kafka_server: ServerProcess, bootstrap: str
) -> None:
    """A topic created with cleanup.policy=compact is compacted by weir (its threshold
    policy, or a run asked for) and fetched as Kafka serves a compacted log: the latest
    value of each key at its own offset, then the tail. Back to delete: the whole log."""
    admin = _admin(bootstrap)
    conf = {"cleanup.policy": "compact", "delete.retention.ms": "0"}
    for f in admin.create_topics([NewTopic("cfc", 1, config=conf)]).values():
        f.result(10)
    (configs,) = [
        f.result(10) for f in admin.describe_configs([ConfigResource("topic", "cfc")]).values()
    ]
    assert (configs["cleanup.policy"].value, configs["delete.retention.ms"].value) == (
        "compact",
        "1",  # weir's limits are positive: 0 is 1 ms
    )
    _produce(bootstrap, "cfc", 20)  # keys k0..k4 four times over: v15..v19 are the latest
    with weir.Client(kafka_server.endpoint) as native:
        native.compact("cfc", wait=True)

    def consume(group: str, n: int) -> tuple[Consumer, list[tuple[bytes, bytes, int]]]:
        c = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
        )
        c.subscribe(["cfc"])
        return c, [(m.key(), m.value(), m.offset()) for m in _poll(c, n)]

    c, got = consume("cfc-g", 5)
    assert got == [(b"k%d" % (i % 5), b"v%d" % i, i) for i in range(15, 20)]
    _produce(bootstrap, "cfc", 1)  # the tail: k0 = v0 at offset 20
    assert [(m.key(), m.value(), m.offset()) for m in _poll(c, 1)] == [(b"k0", b"v0", 20)]
    c.close()
    res = ConfigResource("topic", "cfc", set_config={"cleanup.policy": "delete"})
    admin.alter_configs([res])[res].result(10)
    (configs,) = [
        f.result(10) for f in admin.describe_configs([ConfigResource("topic", "cfc")]).values()
    ]
    assert configs["cleanup.policy"].value == "delete"
    c, got = consume("cfc-whole", 21)
    assert [o for _, _, o in got] == list(range(21))
    c.close()
    bad = ConfigResource("topic", "cfc", set_config={"cleanup.policy": "shred"})
    with pytest.raises(KafkaException):
        admin.alter_configs([bad])[bad].result(10)
