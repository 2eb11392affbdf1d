"""Non-persistent topics (``non-persistent://``) over the Pulsar front, with the real
pulsar-client: only the consumers connected now get a message, nothing is kept or
redelivered, a slow consumer loses what does not fit its queue, and the name never
reaches the persistent topic of the same name."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pulsar
import pytest

import weir
from tests.conftest import ServerProcess

NS = "non-persistent://public/default"


@pytest.fixture(scope="module")
def native(pulsar_server: ServerProcess) -> Iterator[weir.Client]:
    c = weir.Client(pulsar_server.endpoint)
    yield c
    c.close()


def _take(consumers: list[pulsar.Consumer], n: int) -> dict[int, list[bytes]]:
    """``n`` messages from any of ``consumers`` (index -> data in order), within 20 s."""
    got: dict[int, list[bytes]] = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + 20
    while sum(map(len, got.values())) < n and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            try:
                m = c.receive(100)
            except pulsar.Timeout:
                continue
            c.acknowledge(m)
            got[i].append(m.data())
    return got


def test_round_trip_keys_and_properties(
    client: pulsar.Client, native: weir.Client, topic: str
) -> None:
    name = f"{NS}/{topic}"
    consumer = client.subscribe(name, "s")  # creates the topic, non-persistent
    producer = client.create_producer(name)
    for i in range(5):
        producer.send(b"m%d" % i, partition_key=f"k{i}", properties={"i": str(i)})
    got = [consumer.receive(5000) for _ in range(5)]
    assert [m.data() for m in got] == [b"m%d" % i for i in range(5)]
    assert [m.partition_key() for m in got] == [f"k{i}" for i in range(5)]
    assert [m.properties() for m in got] == [{"i": str(i)} for i in range(5)]
    assert got[0].topic_name() == name
    for m in got:
        consumer.acknowledge(m)  # accepted, changes nothing
    info = native.describe_topic(topic)
    assert info.kind == "non-persistent"
    consumer.close()
    producer.close()


def test_nothing_kept_for_later_consumers_nor_redelivered(
    client: pulsar.Client, topic: str
) -> None:
    name = f"{NS}/{topic}"
    producer = client.create_producer(name)
    producer.send(b"before anyone listens")  # acknowledged, and given to nobody
    consumer = client.subscribe(name, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"first")
    assert consumer.receive(5000).data() == b"first"  # not the one sent before
    producer.send(b"never acknowledged")
    assert consumer.receive(5000).data() == b"never acknowledged"
    consumer.close()
    producer.send(b"while nobody is connected")
    consumer = client.subscribe(name, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"after")
    # neither the unacknowledged message nor the one sent while disconnected comes back
    assert consumer.receive(5000).data() == b"after"
    consumer.close()
    producer.close()


def test_a_name_of_the_other_kind_never_touches_the_topic(
    client: pulsar.Client, native: weir.Client, topic: str
) -> None:
    persistent = f"persistent://public/default/{topic}"
    producer = client.create_producer(persistent)
    for i in range(3):
        producer.send(b"p%d" % i)
    producer.close()
    with pytest.raises(pulsar.NotAllowedError):
        client.create_producer(f"{NS}/{topic}")
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(f"{NS}/{topic}", "s")
    assert native.describe_topic(topic).kind == "persistent"
    consumer = client.subscribe(persistent, "s", initial_position=pulsar.InitialPosition.Earliest)
    assert [consumer.receive(5000).data() for _ in range(3)] == [b"p0", b"p1", b"p2"]
    consumer.close()
    assert [s.name for s in native.list_subscriptions(topic)] == ["s"]

    # the other way round: a non-persistent name creates a non-persistent topic only
    other = f"{topic}-np"
    client.create_producer(f"{NS}/{other}").close()
    assert native.describe_topic(other).kind == "non-persistent"
    with pytest.raises(pulsar.NotAllowedError):
        client.create_producer(f"persistent://public/default/{other}")
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(other, "s")  # the short form is persistent://
    assert native.describe_topic(other).kind == "non-persistent"


def test_unknown_and_invalid_names_get_a_clear_error(client: pulsar.Client, topic: str) -> None:
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer(f"non-persistent://no-such-tenant/default/{topic}")
    with pytest.raises(pulsar.NotAllowedError):  # at once, not retried to a timeout
        client.subscribe(f"non-persistent://public/a-cluster/default/{topic}", "s")


def test_what_needs_stored_messages_is_refused_at_once(client: pulsar.Client, topic: str) -> None:
    name = f"{NS}/{topic}"
    consumer = client.subscribe(name, "s")
    with pytest.raises(pulsar.NotAllowedError):
        consumer.seek(pulsar.MessageId.earliest)
    with pytest.raises(pulsar.NotAllowedError):
        client.create_reader(name, pulsar.MessageId.earliest, is_read_compacted=True)
    sticky = pulsar.ConsumerKeySharedPolicy(
        key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 65535)]
    )
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(
            name, "ks", consumer_type=pulsar.ConsumerType.KeyShared, key_shared_policy=sticky
        )
    consumer.close()


def test_subscription_types(client: pulsar.Client, topic: str) -> None:
    name = f"{NS}/{topic}"
    st = pulsar.ConsumerType
    exclusive = client.subscribe(name, "ex", consumer_type=st.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(name, "ex", consumer_type=st.Exclusive)
    shared = [client.subscribe(name, "sh", consumer_type=st.Shared) for _ in range(2)]
    failover = [
        client.subscribe(name, "fo", consumer_type=st.Failover, consumer_name=n) for n in "ab"
    ]
    keyed = [client.subscribe(name, "ks", consumer_type=st.KeyShared) for _ in range(2)]
    # batches of several keys: each message goes to its key's consumer (the frame's ack
    # set says which messages of the batch are this consumer's)
    producer = client.create_producer(name, batching_enabled=True, batching_max_publish_delay_ms=20)
    sent = [(f"k{i % 4}", b"%d" % i) for i in range(24)]
    for key, data in sent:
        producer.send_async(data, None, partition_key=key)
    producer.flush()
    everything = sorted(d for _, d in sent)

    assert sorted(_take([exclusive], 24)[0]) == everything
    got = _take(shared, 24)
    assert sorted(got[0] + got[1]) == everything
    got = _take(failover, 24)
    assert sorted(got[0]) == everything and got[1] == []  # the active consumer ("a") only
    got = _take(keyed, 24)
    assert sorted(got[0] + got[1]) == everything
    key_of = {d: k for k, d in sent}
    assert not {key_of[d] for d in got[0]} & {key_of[d] for d in got[1]}
    for c in [exclusive, *shared, *failover, *keyed]:
        c.close()
    producer.close()


def test_partitioned_topic_and_readers(
    client: pulsar.Client, native: weir.Client, topic: str
) -> None:
    native.create_topic(topic, partitions=3, kind="non-persistent")
    name = f"{NS}/{topic}"
    assert client.get_topic_partitions(name) == [f"{name}-partition-{p}" for p in range(3)]
    consumer = client.subscribe(name, "s", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(f"{name}-partition-1")
    producer.send(b"before the reader")
    producer.close()
    reader = client.create_reader(f"{name}-partition-1", pulsar.MessageId.earliest)
    assert not reader.has_message_available()  # what was written before is gone
    producer = client.create_producer(
        name, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution
    )
    ids = [producer.send(b"%d" % i) for i in range(12)]
    assert {mid.partition() for mid in ids} == {0, 1, 2}
    assert sorted(_take([consumer], 13)[0]) == sorted(
        [b"before the reader"] + [b"%d" % i for i in range(12)]
    )
    on_one = [b"%d" % i for i, mid in enumerate(ids) if mid.partition() == 1]
    assert [reader.read_next(5000).data() for _ in on_one] == on_one
    assert not reader.has_message_available()  # GetLastMessageId of a live partition
    reader.close()
    # a reader's subscription goes with it; the consumer's stays while it is attached
    assert [s.name for s in native.list_subscriptions(topic)] == ["s"]
    consumer.close()
    producer.close()


def test_a_slow_consumer_loses_what_does_not_fit_its_queue(
    client: pulsar.Client, native: weir.Client, topic: str
) -> None:
    name = f"{NS}/{topic}"
    consumer = client.subscribe(name, "slow", receiver_queue_size=1)
    producer = client.create_producer(name, batching_enabled=False)
    n, size = 16, 512 << 10  # 8 MiB for a queue of 4 MiB (topics.non_persistent_queue_bytes)
    for i in range(n):
        producer.send(bytes([i]) * size)  # acknowledged: handed over or dropped
    got = []
    while True:
        try:
            got.append(consumer.receive(1000).data()[0])
        except pulsar.Timeout:
            break
    assert 0 < len(got) < n
    assert got == sorted(got)  # what arrives comes in order, with gaps
    assert native.describe_topic(topic).dropped_messages == n - len(got)
    consumer.close()
    producer.close()


def test_asyncio_api_round_trip(pulsar_server: ServerProcess, topic: str) -> None:
    import pulsar.asyncio as apulsar

    async def run() -> list[bytes]:
        c = apulsar.Client(pulsar_server.pulsar_url, operation_timeout_seconds=5)
        consumer = await c.subscribe(f"{NS}/{topic}", "s")
        producer = await c.create_producer(f"{NS}/{topic}")
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


# The Python client (3.13) has no consumer event listener: an ActiveConsumerChange the
# C++ client received shows in its debug log. Its logger is process-wide (the first
# client's wins), so the scenario runs in a process of its own and prints what it saw.
_FAILOVER_SCENARIO = r"""
import json, logging, os, re, sys, time
import pulsar

url, name = sys.argv[1:3]
change = re.compile(r"active consumer change, consumer_id: (\d+) isActive: (\d)")
changes = []

class Heard(logging.Handler):
    def emit(self, record):
        m = change.search(record.getMessage())
        if m:
            changes.append((int(m[1]), m[2] == "1"))

def wait_for(n):
    deadline = time.monotonic() + 10
    while len(changes) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return list(changes)

log = logging.getLogger("pulsar")
log.setLevel(logging.DEBUG)
log.addHandler(Heard(logging.DEBUG))
client = pulsar.Client(url, operation_timeout_seconds=5, logger=log)
fo = pulsar.ConsumerType.Failover
seen = {}
a = client.subscribe(name, "fo", consumer_type=fo, consumer_name="a")
seen["a subscribed"] = wait_for(1)
b = client.subscribe(name, "fo", consumer_type=fo, consumer_name="b")
seen["b subscribed"] = wait_for(2)
producer = client.create_producer(name)
producer.send(b"to a")
m = a.receive(5000)
a.acknowledge(m)  # else, on a persistent topic, it goes to b when a leaves
seen["a got"] = m.data().decode()
a.close()
seen["a closed"] = wait_for(3)
producer.send(b"to b")
seen["b got"] = b.receive(5000).data().decode()
b.close()
producer.close()
client.close()
print(json.dumps(seen), flush=True)
os._exit(0)  # skip the client's teardown at exit: see tests/pulsar/test_keep_alive.py
"""


@pytest.mark.parametrize("domain", ["persistent", "non-persistent"])
def test_failover_tells_consumers_when_they_become_active(
    pulsar_server: ServerProcess, topic: str, domain: str
) -> None:
    name = f"{domain}://public/default/{topic}"
    run = subprocess.run(
        [sys.executable, "-c", _FAILOVER_SCENARIO, pulsar_server.pulsar_url, name],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    a, b = 0, 1  # the client's consumer ids, in the order it subscribed them
    assert seen["a subscribed"] == [[a, True]]  # the first consumer is the active one
    assert seen["b subscribed"] == [[a, True], [b, False]]  # a standby hears so at once
    assert seen["a got"] == "to a"
    assert seen["a closed"] == [[a, True], [b, False], [b, True]]  # b takes over
    assert seen["b got"] == "to b"


def test_failover_spreads_partitions_over_its_consumers(
    client: pulsar.Client, native: weir.Client, topic: str
) -> None:
    native.create_topic(topic, partitions=2, kind="non-persistent")
    name = f"{NS}/{topic}"
    fo = pulsar.ConsumerType.Failover
    consumers = [client.subscribe(name, "fo", consumer_type=fo, consumer_name=n) for n in "ab"]
    producer = client.create_producer(
        name, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution
    )
    ids = [producer.send(b"%d" % i) for i in range(8)]
    got = _take(consumers, 8)
    # partition p goes to the p mod n-th consumer by name, as on persistent topics
    for i, who in enumerate("ab"):
        mine = sorted(b"%d" % n for n, mid in enumerate(ids) if mid.partition() == i)
        assert sorted(got[i]) == mine, who
    assert {
        p.partition: p.active_consumer for p in native.list_subscriptions(topic)[0].partitions
    } == {0: "a", 1: "b"}
    for c in consumers:
        c.close()
    producer.close()
