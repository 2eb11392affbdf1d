"""Durable subscriptions on replicated partitions: two `weir serve` processes of one
cluster (real ZooKeeper, three real bookies). A subscription's cursor lives in its
partition's managed log (`weir.broker.cluster.log_cursors`), so when the partition
moves (an unload, a kill -9 of its owner) the new owner serves the subscription from
the acknowledged position. pulsar-client consumers (Shared and Failover) stay open
across both moves; the history checker finds nothing acknowledged delivered again and
everything acknowledged at the end. The native SDK's subscription admin works on the
owner."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Iterator

import pulsar
import pytest
from kazoo.client import KazooClient

import weir.aio
from tests.cluster.claims import Claims
from tests.cluster.cluster_topics import known_everywhere
from tests.conftest import ServerProcess, cluster_servers
from tests.pulsar.test_admin_rest import call
from tests.reliability.checker import check
from tests.reliability.history import History, make_data, message_id
from weir.broker.cluster import partition_key
from weir.errors import (
    AlreadyExistsError,
    NotOwnerError,
    UnknownSubscriptionError,
    WeirError,
)
from weir.replication.local_cluster import BookieProcess
from weir.replication.zkserver import ZooKeeperServer

NAMES = ("a", "b")
SHARED, FAILOVER = "shared", "failover"


@pytest.fixture(scope="module")
def brokers(
    zookeeper: ZooKeeperServer,
    shared_root: str,
    shared_bookies: list[BookieProcess],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, ServerProcess]]:
    with cluster_servers(NAMES, zookeeper.hosts, shared_root, tmp_path_factory, "subs") as out:
        yield out


class Cluster(Claims):
    """The cluster's claims and its brokers."""

    def __init__(self, zk: KazooClient, root: str, brokers: dict[str, ServerProcess]) -> None:
        super().__init__(zk, root)
        self.brokers = brokers

    async def created(self, name: str) -> str:
        """Create ``name`` (one partition); its owner once every broker knows it."""
        async with weir.aio.Client(self.brokers["a"].endpoint) as admin:
            await admin.create_topic(name, partitions=1)
        owner = await self.owner(partition_key(name, 0))
        await known_everywhere(self.brokers, name)
        return owner


@pytest.fixture
async def cluster(
    zookeeper: ZooKeeperServer, shared_root: str, brokers: dict[str, ServerProcess]
) -> AsyncIterator[Cluster]:
    zk = KazooClient(hosts=zookeeper.hosts, timeout=10)
    await asyncio.to_thread(zk.start, 30)
    try:
        yield Cluster(zk, shared_root, brokers)
    finally:
        for srv in brokers.values():  # a killed broker comes back for the next test
            if srv.proc is None:
                await asyncio.to_thread(srv.start)
        await asyncio.to_thread(zk.stop)
        await asyncio.to_thread(zk.close)


async def backlog(endpoint: str, topic: str, sub: str) -> int:
    async with weir.aio.Client(endpoint) as client:
        info = await client.describe_subscription(topic, sub, timeout=10)
        return info.backlog


async def attached(endpoint: str, topic: str, want: dict[str, int], timeout: float = 60) -> None:
    """Poll until each subscription has its consumers attached at ``endpoint`` (the
    owner): an ack sent while a consumer reconnects is lost, as Pulsar's are."""
    deadline = time.monotonic() + timeout
    async with weir.aio.Client(endpoint) as client:
        for sub, n in want.items():
            while True:
                with contextlib.suppress(WeirError):
                    info = await client.describe_subscription(topic, sub, timeout=10)
                    if len(info.consumers) == n:
                        break
                assert time.monotonic() < deadline, f"{sub}: consumers never came back"
                await asyncio.sleep(0.1)


async def write(endpoint: str, topic: str, producer: str, first: int, n: int, h: History) -> None:
    """``n`` messages of ``producer`` (ids ``first``..), each recorded in the history."""
    async with (
        weir.aio.Client(endpoint) as client,
        client.writer(topic, producer_id=producer, partition=0, delivery_timeout=60) as w,
    ):
        for i in range(first, first + n):
            data = make_data(producer, i, 20)
            h.attempted(message_id(data))
            res = await w.write_with_result(data)
            h.acked(message_id(data), res.partition, res.offset)


async def test_pulsar_subscriptions_go_on_across_an_unload_and_a_kill_9_of_the_owner(
    cluster: Cluster,
) -> None:
    """A Shared subscription (two consumers) and a Failover one (one consumer) of
    pulsar-client acknowledge part of what they get, with gaps (individually
    acknowledged ranges above mark-delete); then the partition is unloaded to the other
    broker, and later its owner is killed with SIGKILL. The consumers stay open and go on
    at each new owner. Acks count as answered once the broker has them (its backlog
    shows them) and a later write is acknowledged after every cursor store they caused
    (two writes: the stores queued behind one are done before the next). The checker
    finds no acknowledged message delivered by a later owner, every message
    acknowledged in the end, nothing delivered that was never written."""
    brokers = cluster.brokers
    name = "public/default/subs-move"
    topic = f"persistent://{name}"
    key = partition_key(name, 0)
    owner = await cluster.created(name)
    home = next(n for n in NAMES if n != owner)
    h = History()
    rng = random.Random(7)
    await write(brokers[home].endpoint, name, "w", 0, 60, h)
    offset_of = {f"id:w:{n}": n for n in range(60)}
    markers = 0

    # both brokers in the service URL: lookups go on at the other when one is killed
    urls = [brokers[n].pulsar_url.removeprefix("pulsar://") for n in (home, owner)]
    client = pulsar.Client(
        "pulsar://" + ",".join(urls),
        operation_timeout_seconds=15,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    epoch = 1  # the owner's lifetime: 1, then the unload's new owner, then the kill's
    opened = h.clock()
    acked: dict[str, set[int]] = {SHARED: set(), FAILOVER: set()}
    answered: dict[str, set[int]] = {SHARED: set(), FAILOVER: set()}

    def subscribe(sub: str, kind: pulsar.ConsumerType, n: int) -> pulsar.Consumer:
        return client.subscribe(
            topic,
            sub,
            consumer_type=kind,
            consumer_name=f"{sub}-{n}",
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=5,
        )

    consumers = [
        (SHARED, subscribe(SHARED, pulsar.ConsumerType.Shared, 0)),
        (SHARED, subscribe(SHARED, pulsar.ConsumerType.Shared, 1)),
        (FAILOVER, subscribe(FAILOVER, pulsar.ConsumerType.Failover, 0)),
    ]

    def consume(budget: int, fraction: float) -> None:
        """Each consumer receives up to ``budget`` messages and acknowledges about
        ``fraction`` of them (all with 1.0), recording deliveries and acks sent."""
        for sub, c in consumers:
            for _ in range(budget):
                try:
                    m = c.receive(timeout_millis=300)
                except pulsar.Timeout:
                    break
                mid = message_id(m.data())
                off = offset_of[mid]
                h.sub_delivered(
                    sub,
                    0,
                    off,
                    mid,
                    generation=epoch,
                    redelivery_count=m.redelivery_count(),
                    opened=opened,
                )
                if rng.random() < fraction:
                    c.acknowledge(m)
                    acked[sub].add(off)

    async def settle() -> None:
        """Wait until the owner has every ack sent, and they are stored: then they count
        as answered."""
        nonlocal markers
        now = await cluster.owner(key)
        deadline = time.monotonic() + 60
        for sub in (SHARED, FAILOVER):
            want = len(offset_of) - len(acked[sub])
            while (got := await backlog(brokers[now].endpoint, name, sub)) != want:
                # more: acknowledged messages are unacknowledged again (a lost cursor)
                assert time.monotonic() < deadline, f"{sub} at {now}: backlog {got}, not {want}"
                await asyncio.sleep(0.05)
        for _ in range(2):  # behind every cursor store of those acks (see the docstring)
            await write(brokers[now].endpoint, name, "m", markers, 1, h)
            offset_of[f"id:m:{markers}"] = len(offset_of)
            markers += 1
        for sub in (SHARED, FAILOVER):
            new = acked[sub] - answered[sub]
            h.sub_acked(sub, sorted((0, o) for o in new), generation=epoch)
            answered[sub] |= new

    try:
        consume(12, 0.6)
        await settle()
        assert any(
            o > min(set(range(len(offset_of))) - acked[s]) for s in acked for o in acked[s]
        ), "no gap: the test would not store acked ranges above mark-delete"
        # the unload: the new owner serves the subscriptions from their stored cursors
        await cluster.unload(key, to=home)
        owner = await cluster.owner(key, other_than=owner)
        assert owner == home
        epoch = 2
        await attached(brokers[owner].endpoint, name, {SHARED: 2, FAILOVER: 1})
        consume(12, 0.6)
        await settle()
        # kill -9 of the owner, consumers open: the other broker claims the partition
        h.fault(f"kill -9 {owner}")
        await asyncio.to_thread(brokers[owner].kill)
        owner = await cluster.owner(key, other_than=owner)
        epoch = 3
        await attached(brokers[owner].endpoint, name, {SHARED: 2, FAILOVER: 1})
        # and everything is acknowledged in the end
        deadline = time.monotonic() + 120
        while any(len(acked[s]) < len(offset_of) for s in acked):
            assert time.monotonic() < deadline, {s: len(a) for s, a in acked.items()}
            await asyncio.to_thread(consume, 20, 1.0)
        for _, c in consumers:  # a close is answered once its acks are stored
            await asyncio.to_thread(c.close)
        for sub in (SHARED, FAILOVER):
            h.sub_acked(sub, sorted((0, o) for o in acked[sub]), generation=epoch)
            assert await backlog(brokers[owner].endpoint, name, sub) == 0
    finally:
        await asyncio.to_thread(client.close)

    rows: list[tuple[int, str]] = []
    async with weir.aio.Client(brokers[owner].endpoint) as reader:
        async for chunk in reader.read_range(name, 0, 0):
            rows += [(m.offset, message_id(m.data)) for m in chunk.messages()]
    assert len(rows) == len(offset_of)
    report = check(h, {0: rows}, {0: 0}, subscriptions={SHARED: {0: 0}, FAILOVER: {0: 0}})
    assert not report.lost and not report.phantoms, report.summary()
    assert not report.sub_acked_redelivered, report.sub_acked_redelivered
    assert not report.sub_unacked, report.sub_unacked
    assert report.sub_acked and report.sub_delivered


async def test_subscription_admin_works_on_the_owner_and_moves_with_the_partition(
    cluster: Cluster,
) -> None:
    """Create, list, skip, seek and delete a subscription over the native SDK and the
    Pulsar admin REST API at the owner; an unload keeps the cursors and their metadata,
    and the other broker serves them."""
    brokers = cluster.brokers
    name = "public/default/subs-admin"
    key = partition_key(name, 0)
    owner = await cluster.created(name)
    other = next(n for n in NAMES if n != owner)
    h = History()
    await write(brokers[owner].endpoint, name, "w", 0, 10, h)
    async with weir.aio.Client(brokers[owner].endpoint) as client:
        info = await client.create_subscription(
            name, "adm", type="shared", initial_position="earliest", timeout=10
        )
        assert info.backlog == 10
        with pytest.raises(AlreadyExistsError):
            await client.create_subscription(name, "adm", timeout=10)
        assert [s.name for s in await client.list_subscriptions(name, timeout=10)] == ["adm"]
        assert await client.skip_subscription(name, "adm", count=4, timeout=10) == 4
        await client.seek_subscription(name, "adm", offsets={0: 6}, timeout=10)
        await client.create_subscription(name, "gone", timeout=10)
        await client.delete_subscription(name, "gone", timeout=10)
    # the Pulsar admin REST API at the owner: create, list, skip, reset by message id
    base = brokers[owner].http_url
    t = f"/persistent/{name}/subscription"
    assert (await asyncio.to_thread(call, base, "PUT", t + "/r", "earliest"))[0] == 204
    got = await asyncio.to_thread(call, base, "GET", f"/persistent/{name}/subscriptions")
    assert sorted(got[1]) == ["adm", "r"]
    assert (await asyncio.to_thread(call, base, "POST", t + "/r/skip/3"))[0] == 204
    at = {"ledgerId": 0, "entryId": 2, "batchIndex": -1}  # message ids: (0, offset)
    assert (await asyncio.to_thread(call, base, "POST", t + "/r/resetcursor", at))[0] == 204
    assert (await asyncio.to_thread(call, base, "PUT", t + "/doomed", "latest"))[0] == 204
    assert (await asyncio.to_thread(call, base, "DELETE", t + "/doomed"))[0] == 204
    await cluster.unload(key, to=other)
    assert await cluster.owner(key, other_than=owner) == other
    async with weir.aio.Client(brokers[other].endpoint) as client:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(WeirError):
                subs = await client.list_subscriptions(name, timeout=10)
                if subs:
                    break
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        assert [s.name for s in subs] == ["adm", "r"]
        info = await client.describe_subscription(name, "adm", timeout=10)
        assert info.type == "shared"
        assert [p.mark_delete for p in info.partitions] == [6]
        assert info.backlog == 4
        info = await client.describe_subscription(name, "r", timeout=10)
        assert info.type == "exclusive"
        assert [p.mark_delete for p in info.partitions] == [2]
        for gone in ("gone", "doomed"):
            with pytest.raises(UnknownSubscriptionError):
                await client.describe_subscription(name, gone, timeout=10)
        async with weir.aio.Client(brokers[owner].endpoint) as old:  # serves it no more
            with pytest.raises(NotOwnerError, match=f"owned by broker {other}"):
                await old.describe_subscription(name, "adm", timeout=10)
        await client.delete_subscription(name, "adm", timeout=10)
        await client.delete_subscription(name, "r", timeout=10)
        assert await client.list_subscriptions(name, timeout=10) == []


async def test_a_native_consumer_follows_its_subscription_across_an_unload_and_a_kill_9(
    cluster: Cluster,
) -> None:
    """The native SDK's consumer (Exclusive) given both brokers, its own not the owner:
    told NOT_OWNER, it looks the partition up and subscribes at the owner; when the
    partition is unloaded, and later when its owner is killed with SIGKILL, it goes on
    at the new owner. A message whose ack was answered (`acknowledge` returns once the
    cursor is stored) is never delivered again; every message is acknowledged in the end."""
    brokers = cluster.brokers
    name = "public/default/subs-native"
    key = partition_key(name, 0)
    owner = await cluster.created(name)
    home = next(n for n in NAMES if n != owner)
    total = 30
    await write(brokers[home].endpoint, name, "w", 0, total, History())
    acked: set[int] = set()
    again: list[int] = []  # acknowledged messages delivered again: must stay empty
    async with weir.aio.Client([brokers[home].endpoint, brokers[owner].endpoint]) as client:
        c = client.subscribe(
            name, "ex", type="exclusive", initial_position="earliest", receiver_queue_size=5
        )

        async def take(n: int, everything: bool) -> None:
            """Receive ``n`` messages (or until all are acknowledged), acknowledging two of
            three (all with ``everything``)."""
            got = 0
            deadline = time.monotonic() + 90
            while got < n and len(acked) < total:
                assert time.monotonic() < deadline, (sorted(acked), c.last_error)
                try:
                    msgs = await c.receive_batch(n - got, timeout=0.5)
                except WeirError as err:
                    assert err.retryable, err
                    continue
                again.extend(m.offset for m in msgs if m.offset in acked)
                got += len(msgs)
                todo = [m for m in msgs if everything or m.offset % 3]
                if not todo:
                    continue
                try:
                    await c.acknowledge(todo)
                except WeirError as err:  # the stream broke: applied or not, unknown
                    assert err.retryable, err
                    continue
                acked.update(m.offset for m in todo)

        try:
            await take(10, False)
            assert acked and max(acked) > min(set(range(total)) - acked)  # gaps stored
            await cluster.unload(key, to=home)
            owner = await cluster.owner(key, other_than=owner)
            await take(10, False)
            await asyncio.to_thread(brokers[owner].kill)
            owner = await cluster.owner(key, other_than=owner)
            await take(total, True)
        finally:
            await c.close()
    assert again == [], f"acknowledged messages delivered again: {again}"
    assert acked == set(range(total))
    assert await backlog(brokers[owner].endpoint, name, "ex") == 0
