"""`weir serve` in storage.mode = "replicated": two broker processes of one cluster (real
ZooKeeper, three real bookies), the native SDK. A topic created on one broker is seen by
both; the broker that claimed its partition takes writes and serves them back; the other
answers with the retryable not-owner error naming the owner; what a replicated partition
lacks is refused per request with a clear error."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TypeVar

import pytest
from kazoo.client import KazooClient

import weir.aio
from tests.cluster.claims import Claims
from tests.conftest import ServerProcess, cluster_servers
from weir.broker.cluster import partition_key
from weir.errors import (
    AlreadyExistsError,
    BadRequestError,
    DeliveryTimeoutError,
    NotOwnerError,
    PartitionOverflowError,
    UnknownTopicError,
    WeirError,
)
from weir.replication.ledger.metadata import ledger_path
from weir.replication.local_cluster import BookieProcess
from weir.replication.managed_log.metadata import ManagedLogStore
from weir.replication.zkserver import ZooKeeperServer

TOPIC = "public/default/replicated"
T = TypeVar("T")


async def until(check: Callable[[], Awaitable[T]], timeout: float = 30) -> T:
    """``check()``'s answer once it raises no AssertionError / WeirError, polled to a
    deadline (a broker's catalog watch is on its way)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await check()
        except (AssertionError, WeirError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


@pytest.fixture(scope="module")
def brokers(
    zookeeper: ZooKeeperServer,
    shared_root: str,
    shared_bookies: list[BookieProcess],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, ServerProcess]]:
    with cluster_servers(("a", "b"), zookeeper.hosts, shared_root, tmp_path_factory) as out:
        yield out


@pytest.fixture
async def claims(zookeeper: ZooKeeperServer, shared_root: str) -> AsyncIterator[Claims]:
    c = Claims(KazooClient(hosts=zookeeper.hosts, timeout=10), shared_root)
    await asyncio.to_thread(c.zk.start, 30)
    try:
        yield c
    finally:
        await asyncio.to_thread(c.zk.stop)
        await asyncio.to_thread(c.zk.close)


async def write_n(endpoint: str, topic: str, first: int, n: int) -> None:
    async with (
        weir.aio.Client(endpoint) as client,
        client.writer(topic, producer_id="w", partition=0) as writer,
    ):
        for i in range(first, first + n):
            await writer.write(b"m%d" % i)
        await writer.flush(timeout=60)


async def read_n(
    endpoint: str, n: int, topic: str = TOPIC, timeout: float = 60
) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    async with weir.aio.Client(endpoint) as client:
        reader = client.reader(topic)
        try:
            deadline = time.monotonic() + timeout
            while len(out) < n and time.monotonic() < deadline:
                msg = await reader.receive_message(timeout=1.0)
                if msg is not None:
                    out.append((msg.offset, msg.data))
        finally:
            await reader.close()
    return out


async def test_the_owner_serves_the_topic_and_the_other_broker_names_it(
    brokers: dict[str, ServerProcess], claims: Claims
) -> None:
    async with weir.aio.Client(brokers["a"].endpoint) as admin:
        await admin.create_topic(TOPIC, partitions=1)
    owner = await claims.owner(partition_key(TOPIC, 0))
    other = "b" if owner == "a" else "a"

    await write_n(brokers[owner].endpoint, TOPIC, 0, 20)
    got = await read_n(brokers[owner].endpoint, 20)
    assert got == [(i, b"m%d" % i) for i in range(20)]

    # the other broker knows the topic (from the catalog; its watch may still be on its
    # way) and lists no partition of it: it serves none
    async with weir.aio.Client(brokers[other].endpoint) as client:
        deadline = time.monotonic() + 30
        while True:
            try:
                info = await client.describe_topic(TOPIC, timeout=2)
                break
            except UnknownTopicError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        assert info.partitions == 1
        assert [p.partition for p in info.partition_info] == []
        # a write there is answered with the typed not-owner error naming the owner and
        # where to reach it: the writer looks the owner up and writes there
        writer = client.writer(TOPIC, producer_id="x", partition=0, delivery_timeout=30)
        fut = await writer.write_future(b"elsewhere")
        assert (await fut).offset == 20
        assert isinstance(writer.last_error, NotOwnerError)
        assert f"owned by broker {owner} " in writer.last_error.message
        assert writer.last_error.owner == owner
        assert writer.last_error.endpoints["native"] == brokers[owner].endpoint
        await writer.close(timeout=10)
        # and so does a reader
        assert await read_n(brokers[other].endpoint, 21) == [*got, (20, b"elsewhere")]


async def test_a_writer_on_another_broker_right_after_the_create_finds_the_topic(
    brokers: dict[str, ServerProcess],
) -> None:
    # the other broker's catalog watch may not have brought the topic yet: its
    # auto-create finds it in the catalog and uses it (was AlreadyExistsError, fatal)
    for i in range(5):
        name = f"{TOPIC}-fresh-{i}"
        async with weir.aio.Client(brokers["a"].endpoint) as admin:
            await admin.create_topic(name, partitions=1)
        async with (
            weir.aio.Client(brokers["b"].endpoint) as client,
            client.writer(name, producer_id="w", partition=0, delivery_timeout=60) as writer,
        ):
            await writer.write(b"first")
            await writer.flush(timeout=60)


async def test_what_a_replicated_partition_lacks_is_refused_per_request(
    brokers: dict[str, ServerProcess], claims: Claims
) -> None:
    name = TOPIC + "-lacks"
    async with weir.aio.Client(brokers["a"].endpoint) as admin:
        await admin.create_topic(name, partitions=1, consumers=["c"])
    owner = await claims.owner(partition_key(name, 0))
    async with weir.aio.Client(brokers[owner].endpoint) as client:
        with pytest.raises(BadRequestError, match=r"seeking by time .* replicated partition"):
            await client.offsets_for_time(name, 0, timeout=10)
        # durable subscriptions are served (tests/cluster/test_replicated_subscriptions.py),
        # but not from a time, nor over a consumer's committed offsets
        with pytest.raises(BadRequestError, match=r"initial position by time .* replicated"):
            await client.create_subscription(name, "s", initial_position=1, timeout=10)
        consumer = client.subscribe(name, "c")
        try:
            with pytest.raises(
                BadRequestError, match=r"consumer's committed offsets .* replicated"
            ):
                await consumer.wait_connected(timeout=10)
        finally:
            with contextlib.suppress(WeirError):
                await consumer.close(timeout=1)
        # and the broker still serves the topic
        async with client.writer(name, producer_id="w", partition=0) as writer:
            await writer.write(b"still here")
            await writer.flush(timeout=60)


async def test_a_moved_partition_leaves_the_old_owner_and_keeps_everything(
    brokers: dict[str, ServerProcess], claims: Claims
) -> None:
    name = TOPIC + "-moved"
    key = partition_key(name, 0)
    async with weir.aio.Client(brokers["b"].endpoint) as admin:
        await admin.create_topic(name, partitions=1)
    first = await claims.owner(key)
    second = "b" if first == "a" else "a"
    await write_n(brokers[first].endpoint, name, 0, 10)
    async with weir.aio.Client(brokers[first].endpoint) as client:
        assert await client.commit_offset(name, 0, "c", 6)

    await claims.unload(key, to=second)
    assert await claims.owner(key, other_than=first) == second
    assert await committed(brokers[second].endpoint, name, "c") == 6  # it moved with the log
    # the consumer dropped and registered again on the broker that does not serve the
    # partition: on the owner it starts afresh (the old position is an old registration's)
    async with weir.aio.Client(brokers[first].endpoint) as admin:
        await admin.alter_topic(name, drop_consumers=["c"])
        await admin.alter_topic(name, add_consumers=["c"])

    async def afresh() -> None:
        assert await committed(brokers[second].endpoint, name, "c") == 0

    await until(afresh)
    # the new owner continues the log where the old one left it
    await write_n(brokers[second].endpoint, name, 10, 10)
    assert await read_n(brokers[second].endpoint, 20, name) == [(i, b"m%d" % i) for i in range(20)]
    # the old owner's actor left with its claim: it names the new owner, and a writer
    # given the old owner's endpoint goes on at the new one (its producer state moved)
    async with weir.aio.Client(brokers[first].endpoint) as client:
        writer = client.writer(name, producer_id="w", partition=0, delivery_timeout=30)
        fut = await writer.write_future(b"m20")
        assert (await fut).offset == 20
        assert isinstance(writer.last_error, NotOwnerError)
        assert writer.last_error.owner == second
        await writer.close(timeout=10)
    assert await read_n(brokers[second].endpoint, 21, name) == [(i, b"m%d" % i) for i in range(21)]


async def test_a_claimed_partition_opens_with_its_topics_limits(
    brokers: dict[str, ServerProcess], claims: Claims
) -> None:
    name = TOPIC + "-limits"
    async with weir.aio.Client(brokers["a"].endpoint) as admin:
        await admin.create_topic(name, partitions=1, max_partition_messages=3)
    owner = await claims.owner(partition_key(name, 0))
    await write_n(brokers[owner].endpoint, name, 0, 3)
    async with weir.aio.Client(brokers[owner].endpoint) as client:
        writer = client.writer(name, producer_id="w", partition=0, delivery_timeout=2)
        fut = await writer.write_future(b"one too many")
        with pytest.raises(DeliveryTimeoutError, match="3"):
            await fut
        assert isinstance(writer.last_error, PartitionOverflowError)
        with contextlib.suppress(WeirError):
            await writer.close(timeout=1)


async def test_a_topic_altered_on_one_broker_changes_on_every_broker(
    brokers: dict[str, ServerProcess], claims: Claims
) -> None:
    name = TOPIC + "-altered"
    async with weir.aio.Client(brokers["a"].endpoint) as admin:
        await admin.create_topic(name, partitions=1, consumers=["c"])
    async with weir.aio.Client(brokers["b"].endpoint) as admin:
        deadline = time.monotonic() + 30
        while True:  # b's catalog watch may still be on its way
            try:
                altered = await admin.alter_topic(name, partitions=2, timeout=2)
                break
            except UnknownTopicError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
    assert altered.partitions == 2
    new_owner = await claims.owner(partition_key(name, 1))  # the new partition is placed
    async with weir.aio.Client(brokers["a"].endpoint) as client:
        deadline = time.monotonic() + 30
        while (await client.describe_topic(name)).partitions != 2:
            assert time.monotonic() < deadline, "broker a never saw the new partition"
            await asyncio.sleep(0.1)
    async with (
        weir.aio.Client(brokers[new_owner].endpoint) as client,
        client.writer(name, producer_id="w", partition=1) as writer,
    ):
        assert (await writer.write_with_result(b"on the new partition")).offset == 0
    # each broker describes (and exports metrics of) the partitions it serves
    for srv in brokers.values():
        text = await asyncio.to_thread(get, srv.http_url + "/metrics")
        assert b"weir_topics" in text


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as r:
        return bytes(r.read())


async def committed(endpoint: str, topic: str, consumer: str, partition: int = 0) -> int:
    """The consumer's committed offset of ``partition`` as the broker at ``endpoint``
    describes it, once it serves the partition (its claim is seen in ZooKeeper before the
    log is open: polled to a deadline)."""

    async def described() -> int:
        async with weir.aio.Client(endpoint) as client:
            info = await client.describe_consumer(topic, consumer)
        lags = [p for p in info.partitions if p.partition == partition]
        assert len(lags) == 1, f"{endpoint} does not serve {topic}/{partition} yet"
        return lags[0].committed_offset

    return await until(described)


async def test_a_killed_owner_hands_its_partition_over_with_acks_dedup_and_offsets(
    brokers: dict[str, ServerProcess], claims: Claims
) -> None:
    """kill -9 of the owning `weir serve`: the other broker claims the partition once the
    session expires, fences the ledger, and serves every acknowledged message in order;
    the producer's state moved too (its next seq_no follows the last acknowledged one),
    and so did the consumers' committed offsets (no snapshot taken: replayed from the
    log); a read session of the consumer starts there."""
    name = TOPIC + "-killed"
    key = partition_key(name, 0)
    async with weir.aio.Client(brokers["a"].endpoint) as admin:
        await admin.create_topic(name, partitions=1, consumers=["c", "d"])
    owner = await claims.owner(key)
    other = "b" if owner == "a" else "a"
    await write_n(brokers[owner].endpoint, name, 0, 10)
    async with weir.aio.Client(brokers[owner].endpoint) as client:
        assert await client.commit_offset(name, 0, "c", 4)
        assert await client.commit_offset(name, 0, "c", 7)
        assert not await client.commit_offset(name, 0, "c", 5)  # never backwards
        assert await client.commit_offset(name, 0, "d", 9)
        assert await client.commit_offset(name, 0, "d", 2, allow_backwards=True)
    assert await committed(brokers[owner].endpoint, name, "c") == 7
    brokers[owner].kill()
    try:
        assert await claims.owner(key, other_than=owner) == other
        assert await committed(brokers[other].endpoint, name, "c") == 7
        assert await committed(brokers[other].endpoint, name, "d") == 2
        async with weir.aio.Client(brokers[other].endpoint) as client:
            reader = client.reader(name, consumer="c")
            try:
                msg = await reader.receive_message(timeout=30)
                assert msg is not None and (msg.offset, msg.data) == (7, b"m7")
            finally:
                await reader.close()
        async with (
            weir.aio.Client(brokers[other].endpoint) as client,
            client.writer(name, producer_id="w", partition=0) as writer,
        ):
            await writer.wait_init(timeout=60)
            assert writer.last_seq_no == 10  # the dedup state survived the kill
            for i in range(10, 15):
                await writer.write(b"m%d" % i)
            await writer.flush(timeout=60)
        got = await read_n(brokers[other].endpoint, 15, name)
        assert got == [(i, b"m%d" % i) for i in range(15)]
    finally:
        brokers[owner].start()  # the module's other tests may still want two brokers


async def test_a_consumer_added_again_on_another_broker_keeps_its_committed_offsets(
    brokers: dict[str, ServerProcess], claims: Claims
) -> None:
    """A consumer registered by its first commit on the owner, then added again through
    the other broker (as a second broker's reader registering the same consumer at once
    does): the registration keeps its time, so the committed offsets (tagged with it in
    the partition's log) stay readable, and later commits are acknowledged."""
    name = TOPIC + "-readded"
    key = partition_key(name, 0)
    async with weir.aio.Client(brokers["a"].endpoint) as admin:
        await admin.create_topic(name, partitions=1)
    owner = await claims.owner(key)
    other = "b" if owner == "a" else "a"
    await write_n(brokers[owner].endpoint, name, 0, 10)
    async with weir.aio.Client(brokers[owner].endpoint) as client:
        assert await client.commit_offset(name, 0, "late", 6)  # registers "late"
    assert await committed(brokers[owner].endpoint, name, "late") == 6
    async with weir.aio.Client(brokers[other].endpoint) as client:
        await until(lambda: client.alter_topic(name, add_consumers=["late"]))
    assert await committed(brokers[owner].endpoint, name, "late") == 6
    async with weir.aio.Client(brokers[owner].endpoint) as client:
        assert await client.commit_offset(name, 0, "late", 8)
    assert await committed(brokers[owner].endpoint, name, "late") == 8


async def test_a_topic_dropped_on_one_broker_goes_everywhere_with_its_ledgers(
    brokers: dict[str, ServerProcess], claims: Claims
) -> None:
    """Dropped on one broker: the owners let the partitions go, the managed logs and their
    ledgers are deleted, the other broker forgets the topic; a topic made again under the
    name starts empty (it inherits nothing)."""
    name = TOPIC + "-dropped"
    keys = [partition_key(name, p) for p in range(2)]
    async with weir.aio.Client(brokers["a"].endpoint) as admin:
        await admin.create_topic(name, partitions=2, consumers=["c"])
    owners = [await claims.owner(k) for k in keys]
    for p, owner in enumerate(owners):
        async with (
            weir.aio.Client(brokers[owner].endpoint) as client,
            client.writer(name, producer_id=f"w{p}", partition=p) as writer,
        ):
            for i in range(5):
                await writer.write(b"m%d" % i)
            await writer.flush(timeout=60)
        async with weir.aio.Client(brokers[owner].endpoint) as client:
            assert await client.commit_offset(name, p, "c", 3)
    logs = ManagedLogStore(claims.zk, claims.records.root)
    ledgers = set()
    for k in keys:
        got = await logs.read(k)
        assert got is not None
        ledgers |= {li.ledger_id for li in got[0].ledgers}
    assert ledgers and all(claims.zk.exists(ledger_path(claims.records.root, i)) for i in ledgers)

    async def drop_on_b() -> None:
        async with weir.aio.Client(brokers["b"].endpoint) as admin:
            await admin.drop_topic(name, timeout=60)

    await until(drop_on_b)  # b's watch may not have brought the topic yet

    async def gone_from(srv: ServerProcess) -> None:
        async with weir.aio.Client(srv.endpoint) as client:
            try:
                await client.describe_topic(name, timeout=5)
            except UnknownTopicError:
                pass
            else:
                raise AssertionError(f"{srv.endpoint} still has {name}")
            assert name not in [t.name for t in await client.list_topics()]

    for srv in brokers.values():
        await until(functools.partial(gone_from, srv))
    for k in keys:
        assert await logs.read(k) is None  # the managed log is gone, and its ledgers
        assert not any(claims.zk.exists(ledger_path(claims.records.root, i)) for i in ledgers)
        assert await claims.records.owner(k) is None
        assert await claims.records.assignment(k) is None

    # the same name again: a new topic, from offset 0, with no committed offset
    async with weir.aio.Client(brokers["a"].endpoint) as admin:
        await admin.create_topic(name, partitions=1, consumers=["c"])
    owner = await claims.owner(keys[0])
    async with (
        weir.aio.Client(brokers[owner].endpoint) as client,
        client.writer(name, producer_id="w", partition=0) as writer,
    ):
        assert (await writer.write_with_result(b"new")).offset == 0
    assert await committed(brokers[owner].endpoint, name, "c") == 0


async def test_namespaces_and_their_policies_are_the_clusters(
    brokers: dict[str, ServerProcess], claims: Claims
) -> None:
    """A tenant and namespace made on one broker exist on the other; a policy set there
    reaches the topics served here; a name is made once across brokers."""
    async with weir.aio.Client(brokers["a"].endpoint) as a:
        await a.create_tenant("acme")
        await a.create_namespace("acme/orders", {"retention_ms": 3_600_000})
        with pytest.raises(AlreadyExistsError):
            await a.create_namespace("acme/orders")
    async with weir.aio.Client(brokers["b"].endpoint) as b:
        with pytest.raises(AlreadyExistsError):  # ZooKeeper says so, whatever b has seen
            await b.create_namespace("acme/orders")

        async def seen_on_b() -> None:
            info = await b.describe_namespace("acme/orders")
            assert info.policies["retention_ms"] == 3_600_000

        await until(seen_on_b)
        await b.create_topic("acme/orders/t", partitions=1)
        await b.set_namespace_policies("acme/orders", {"retention_ms": 7_200_000})

    async with weir.aio.Client(brokers["a"].endpoint) as a:

        async def followed_on_a() -> None:
            info = await a.describe_namespace("acme/orders")
            assert info.policies["retention_ms"] == 7_200_000
            topic = await a.describe_topic("acme/orders/t")
            assert topic.retention_ms == 7_200_000  # the topic follows its namespace

        await until(followed_on_a)
