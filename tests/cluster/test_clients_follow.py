"""Clients follow partition owners: three `weir serve` processes of one cluster (real
ZooKeeper, three real bookies) and the native SDK, sync and asyncio. A writer and a
reader given any broker's endpoint reach the partition's owner (told NOT_OWNER, they
ask `Lookup` and go there); when the owner is killed with SIGKILL under load, the
writes go on at the new owner, and the history checker finds every acknowledged
message exactly once, in order."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future

import pulsar
import pytest
import ydb
from kafka import KafkaAdminClient, KafkaProducer

import weir
import weir.aio
from tests.cluster.claims import cluster_records, in_zk, owner_of
from tests.cluster.cluster_topics import created, read_all
from tests.conftest import ServerProcess, cluster_servers
from tests.reliability.checker import check
from tests.reliability.history import History, make_data, message_id
from weir.broker.cluster import ClusterRecords, partition_key
from weir.broker.cluster.broker_mode import node_id
from weir.client.connection import Connection
from weir.client.direct_writer import DirectWriterCore
from weir.errors import NotOwnerError, WeirError
from weir.replication.local_cluster import BookieProcess
from weir.replication.zkserver import ZooKeeperServer

NAMES = ("a", "b", "c")
KEY = 0  # the history's partition key (one topic, partition 0)


class PendingAcks:
    """The writes in flight, oldest first: `settle` records in the history every one whose
    future is done, in order (a sync `Future` or an asyncio one alike)."""

    def __init__(self, history: History) -> None:
        self.history = history
        self.pending: list[
            tuple[str, Future[weir.WriteResult] | asyncio.Future[weir.WriteResult]]
        ] = []
        self.acked = 0

    def add(
        self, mid: str, fut: Future[weir.WriteResult] | asyncio.Future[weir.WriteResult]
    ) -> None:
        self.history.attempted(mid)
        self.pending.append((mid, fut))
        self.settle()

    def settle(self) -> None:
        while self.pending and self.pending[0][1].done():
            mid, fut = self.pending.pop(0)
            res = fut.result()
            self.history.acked(mid, KEY, None if res.skipped else res.offset)
            self.acked += 1

    async def reach(self, count: int, timeout: float = 60) -> None:
        """Until ``count`` writes are acknowledged (asyncio futures): a write loop that ran
        far ahead of its acks (a loaded machine: ci65 wrote all 240 before the 60th ack, so
        it never killed the owner) waits here before it writes on."""
        deadline = time.monotonic() + timeout
        while self.acked < count and self.pending:
            assert time.monotonic() < deadline, f"{self.acked} of {count} writes acknowledged"
            await asyncio.wait({self.pending[0][1]}, timeout=1)  # type: ignore[arg-type]
            self.settle()


@pytest.fixture(scope="module")
def brokers(
    zookeeper: ZooKeeperServer,
    shared_root: str,
    shared_bookies: list[BookieProcess],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, ServerProcess]]:
    # the native TCP port on: the sync client's caller-driven writer (transport="tcp") too
    tcp_on = {"WEIR_NATIVE_TCP_ENABLED": "true"}
    with cluster_servers(NAMES, zookeeper.hosts, shared_root, tmp_path_factory, env=tcp_on) as out:
        yield out


@pytest.fixture
async def records(zookeeper: ZooKeeperServer, shared_root: str) -> AsyncIterator[ClusterRecords]:
    async with cluster_records(zookeeper, shared_root) as found:
        yield found


async def test_an_asyncio_writer_and_reader_reach_the_owner_through_any_broker(
    brokers: dict[str, ServerProcess], records: ClusterRecords
) -> None:
    name = "public/default/follow-aio"
    owner = await created(brokers, records, name)
    home = next(n for n in NAMES if n != owner)
    # over the native TCP port (the asyncio writer's stream; the sync twin's caller-driven
    # writer is the kill test below, gRPC writers the other tests)
    async with weir.aio.Client(brokers[home].endpoint, transport="tcp") as client:
        # the typed lookup: the owner, its claim and where to reach it
        [found] = await client.owners(name)
        assert (found.partition, found.broker, found.local) == (0, owner, False)
        assert found.endpoints["native"] == brokers[owner].endpoint
        assert found.generation >= 1
        async with client.writer(name, producer_id="w", partition=0) as writer:
            for i in range(20):
                await writer.write(make_data("w", i, 16))
            await writer.flush(timeout=60)
            # the writer was told NOT_OWNER once (typed: who owns it) and went there
            assert isinstance(writer.last_error, NotOwnerError)
            assert writer.last_error.owner == owner
            assert writer.last_error.endpoints["native"] == brokers[owner].endpoint
        # an offset-range read (what the Spark connector does) goes to the owner as well
        got = [
            (m.offset, message_id(m.data))
            async for rc in client.read_range(name, 0, 0, timeout=30)
            for m in rc.messages()
        ]
        assert got == [(i, f"id:w:{i}") for i in range(20)]
    rows = await read_all(brokers[home].endpoint, name, 20)  # the reader follows too
    assert rows == [(i, f"id:w:{i}") for i in range(20)]
    async with weir.aio.Client(brokers[owner].endpoint) as client:
        assert [o.local for o in await client.owners(name)] == [True]


def test_a_sync_writer_and_reader_reach_the_owner_through_any_broker(
    brokers: dict[str, ServerProcess],
    zookeeper: ZooKeeperServer,
    shared_root: str,
) -> None:
    name = "public/default/follow-sync"

    owner = in_zk(zookeeper, shared_root, lambda r: created(brokers, r, name))
    home = next(n for n in NAMES if n != owner)
    with weir.Client(brokers[home].endpoint) as client:
        assert client.owners(name)[0].broker == owner
        with client.writer(name, producer_id="s", partition=0) as writer:
            for i in range(10):
                writer.write(make_data("s", i, 16))
            writer.flush(timeout=60)
        reader = client.reader(name, start="earliest")
        got: list[tuple[int, str]] = []
        deadline = time.monotonic() + 60
        while len(got) < 10 and time.monotonic() < deadline:
            msg = reader.receive_message(timeout=1.0)
            if msg is not None:
                got.append((msg.offset, message_id(msg.data)))
        reader.close()
    assert got == [(i, f"id:s:{i}") for i in range(10)]


async def test_writes_through_a_non_owner_go_on_across_kill_9_of_the_owner(
    brokers: dict[str, ServerProcess], records: ClusterRecords
) -> None:
    """The writer talks to a broker that does not own the partition; the owner is killed
    (SIGKILL) while messages are in flight; the partition moves (session timeout, claim,
    fencing); the writer finds the new owner and resends what was not acknowledged. Every
    acknowledged message is stored once, in order (dedup moved with the partition)."""
    name = "public/default/follow-kill"
    key = partition_key(name, 0)
    owner = await created(brokers, records, name)
    home = next(n for n in NAMES if n != owner)
    history = History()
    total, kill_after = 300, 60
    acks = PendingAcks(history)
    killed = False
    try:
        async with (
            weir.aio.Client(brokers[home].endpoint) as client,
            client.writer(name, producer_id="w", partition=0, delivery_timeout=90) as writer,
        ):
            for n in range(total):
                acks.add(f"id:w:{n}", await writer.write_future(make_data("w", n, 32)))
                if n + 1 == 2 * kill_after and not killed:
                    await acks.reach(kill_after)  # the kill comes with messages in flight
                if acks.acked >= kill_after and not killed:
                    brokers[owner].kill()  # under load: requests in flight to it
                    killed = True
                if n % 20 == 19:
                    await asyncio.sleep(0.01)  # let acks come back between bursts
            await writer.flush(timeout=90)
            acks.settle()
            assert killed and not acks.pending
            assert writer.reconnects >= 2  # told NOT_OWNER, then its owner died
        new_owner = await owner_of(records, key, other_than=owner)
        rows = await read_all(brokers[home].endpoint, name, total)
        report = check(history, {KEY: rows}, {KEY: 0})
        assert report.violations() == {}, report.violations()
        assert report.acknowledged == total
        assert [r[0] for r in rows] == list(range(total))  # dense, in write order
        assert [r[1] for r in rows] == [f"id:w:{n}" for n in range(total)]
        assert new_owner != owner
    finally:
        await restarted(brokers[owner], name)


def test_a_direct_tcp_writer_follows_the_owner_across_kill_9(
    brokers: dict[str, ServerProcess],
    zookeeper: ZooKeeperServer,
    shared_root: str,
) -> None:
    """The sync client's caller-driven writer (``transport="tcp"``, one partition: its
    socket driven by the caller's thread) given a broker that does not own the partition:
    told NOT_OWNER it looks the owner up and connects to the owner's native TCP port; the
    owner is killed (SIGKILL) with requests in flight; the writer looks the partition up
    again until another broker claims it and resends what was not acknowledged there.
    Every acknowledged message is stored once, in order."""
    name = "public/default/follow-direct"
    key = partition_key(name, 0)
    owner = in_zk(zookeeper, shared_root, lambda r: created(brokers, r, name))
    home = next(n for n in NAMES if n != owner)
    history = History()
    total, kill_after = 300, 60
    acks = PendingAcks(history)
    killed = False
    try:
        with (
            weir.Client(brokers[home].endpoint, transport="tcp") as client,
            client.writer(name, producer_id="d", partition=0, delivery_timeout=90) as writer,
        ):
            assert isinstance(writer._core, DirectWriterCore)
            for n in range(total):
                fut = writer.write_future(make_data("d", n, 32))
                acks.add(f"id:d:{n}", fut)
                if acks.acked >= kill_after and not killed:
                    brokers[owner].kill()  # under load: requests in flight to it
                    killed = True
                if n % 20 == 19:
                    fut.result(timeout=90)  # drives the socket: acks come in
            writer.flush(timeout=90)
            acks.settle()
            assert killed and not acks.pending
            assert writer.reconnects >= 2  # told NOT_OWNER, then its owner died
        new_owner = in_zk(zookeeper, shared_root, lambda r: owner_of(r, key, other_than=owner))
        assert new_owner != owner
        rows = asyncio.run(read_all(brokers[home].endpoint, name, total))
        report = check(history, {KEY: rows}, {KEY: 0})
        assert report.violations() == {}, report.violations()
        assert report.acknowledged == total
        assert [r[1] for r in rows] == [f"id:d:{n}" for n in range(total)]
        assert [r[0] for r in rows] == list(range(total))  # dense, in write order
    finally:
        asyncio.run(restarted(brokers[owner], name))


async def test_an_asyncio_reader_reads_each_partition_from_its_owner_across_kill_9(
    brokers: dict[str, ServerProcess], records: ClusterRecords
) -> None:
    """A reader with a consumer, given a broker, of a topic whose partitions are served by
    several brokers: one stream per owner, merged; it reads every partition and commits.
    The owner of partition 0 is killed (SIGKILL) while writers go on: the reader's stream
    there ends, the partitions it read are looked up again and read at their new owner
    from the committed offsets (nothing committed is delivered again, nothing is lost);
    the history checker finds every acknowledged message once, in order."""
    name, parts, per = "public/default/follow-read", 6, 10
    # the consumer registered with the topic (each owner's stream would register it at once)
    owner = await created(brokers, records, name, parts, consumers=("c",))
    home = next(n for n in NAMES if n != owner)
    history = History()
    rows: dict[int, list[tuple[int, str]]] = {p: [] for p in range(parts)}

    async def write(client: weir.aio.Client, round_: int) -> None:
        for p in range(parts):
            async with client.writer(name, producer_id=f"p{p}", partition=p) as w:
                futs = []
                for i in range(round_ * per, (round_ + 1) * per):
                    history.attempted(f"id:p{p}:{i}")
                    futs.append((f"id:p{p}:{i}", await w.write_future(make_data(f"p{p}", i, 24))))
                await w.flush(timeout=90)
                for mid, fut in futs:
                    res = fut.result()
                    history.acked(mid, p, None if res.skipped else res.offset)

    async def read(reader: weir.aio.Reader, n: int) -> None:
        got = 0
        deadline = time.monotonic() + 90
        while got < n and time.monotonic() < deadline:
            batch = await reader.receive_batch(timeout=1.0)
            if batch is None:
                continue
            for m in batch.messages:
                rows[m.partition].append((m.offset, message_id(m.data)))
            got += len(batch.messages)
            await reader.commit_with_ack(batch)

    try:
        async with weir.aio.Client(brokers[home].endpoint) as client:
            owners = {o.broker for o in await client.owners(name)}
            assert len(owners) >= 2, owners  # spread: one broker alone would be one stream
            await write(client, 0)
            # from the committed offsets (none yet: the earliest), after a move too
            reader = client.reader(name, consumer="c")
            try:
                await read(reader, parts * per)
                streams = reader._core._cores  # type: ignore[union-attr]
                assert len(streams) == len(owners)  # one stream per owner
                brokers[owner].kill()
                await write(client, 1)  # the writers follow partition 0 to its new owner
                await read(reader, parts * per)
                assert reader.reconnects >= 1
            finally:
                await reader.close()
        report = check(history, rows, {p: 0 for p in range(parts)})
        assert report.violations() == {}, report.violations()
        assert report.acknowledged == 2 * parts * per
        for p in range(parts):  # committed positions kept: nothing read twice
            assert [o for o, _ in rows[p]] == list(range(2 * per)), (p, rows[p])
    finally:
        await restarted(brokers[owner], name)


def test_a_sync_reader_reads_a_topic_spread_over_brokers(
    brokers: dict[str, ServerProcess],
    zookeeper: ZooKeeperServer,
    shared_root: str,
) -> None:
    """The sync twin: a reader (no consumer) given one broker reads every partition of a
    topic served by several brokers, each from its owner."""
    name, parts = "public/default/follow-read-sync", 4
    owner = in_zk(zookeeper, shared_root, lambda r: created(brokers, r, name, parts))
    home = next(n for n in NAMES if n != owner)
    with weir.Client(brokers[home].endpoint) as client:
        assert len({o.broker for o in client.owners(name)}) >= 2
        for p in range(parts):
            with client.writer(name, producer_id=f"s{p}", partition=p) as w:
                for i in range(5):
                    w.write(make_data(f"s{p}", i, 16))
        reader = client.reader(name)
        got: set[tuple[int, int, str]] = set()
        deadline = time.monotonic() + 60
        while len(got) < parts * 5 and time.monotonic() < deadline:
            msg = reader.receive_message(timeout=1.0)
            if msg is not None:
                got.add((msg.partition, msg.offset, message_id(msg.data)))
        reader.close()
    assert got == {(p, i, f"id:s{p}:{i}") for p in range(parts) for i in range(5)}


def kafka_leader(bootstrap: str, topic: str) -> int:
    """The node id Metadata (asked of ``bootstrap``) names as the leader of ``topic``'s
    partition 0 (-1: none now), as kafka-python's admin client reads it."""
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        [meta] = client.describe_topics([topic])
        [part] = meta["partitions"]
        return int(part["leader_id"])
    finally:
        client.close()


def test_kafka_metadata_names_the_owner_and_a_producer_follows_it_across_kill_9(
    brokers: dict[str, ServerProcess],
    zookeeper: ZooKeeperServer,
    shared_root: str,
) -> None:
    """kafka-python bootstrapped at a broker that does not own the partition: Metadata
    names the owner's Kafka listener as the leader; when the owner is killed, the
    producer's requests fail, it refreshes its metadata (LEADER_NOT_AVAILABLE while the
    partition moves) and produces to the new owner; every acknowledged message is stored."""
    name, kname = "public/default/kfollow", "kfollow"
    key = partition_key(name, 0)

    owner = in_zk(zookeeper, shared_root, lambda r: created(brokers, r, name))
    home = next(n for n in NAMES if n != owner)
    assert kafka_leader(brokers[home].kafka, kname) == node_id(owner)
    producer = KafkaProducer(
        bootstrap_servers=brokers[home].kafka,
        acks="all",
        retry_backoff_ms=200,
        max_in_flight_requests_per_connection=1,
        delivery_timeout_ms=90_000,
    )
    acked: list[int] = []
    try:
        futures = []
        for n in range(120):
            futures.append(producer.send(kname, value=b"id:k:%d|" % n, partition=0))
            if n == 40:
                producer.flush(timeout=60)
                brokers[owner].kill()  # the leader dies; 80 more go to whoever owns it next
        producer.flush(timeout=90)
        for n, fut in enumerate(futures):
            fut.get(timeout=1)  # every send was acknowledged in the end
            acked.append(n)
        new_owner = in_zk(zookeeper, shared_root, lambda r: owner_of(r, key, other_than=owner))
        assert kafka_leader(brokers[home].kafka, kname) == node_id(new_owner)
        rows = asyncio.run(read_all(brokers[home].endpoint, name, 120))
        stored = [mid for _, mid in rows]
        assert {f"id:k:{n}" for n in acked} <= set(stored)  # nothing acknowledged is lost
        assert [o for o, _ in rows] == list(range(len(rows)))
    finally:
        producer.close(timeout=10)
        asyncio.run(restarted(brokers[owner], name))


def test_a_pulsar_producer_is_sent_to_the_owner_and_follows_it_across_kill_9(
    brokers: dict[str, ServerProcess],
    zookeeper: ZooKeeperServer,
    shared_root: str,
) -> None:
    """pulsar-client given a broker that does not own the topic: Lookup answers the
    owner's Pulsar URL and the producer connects there; when the owner is killed the
    producer reconnects, looks the topic up again (refused while it moves) and goes to
    the new owner; every acknowledged message is stored once, in order."""
    name = "public/default/pfollow"
    key = partition_key(name, 0)

    owner = in_zk(zookeeper, shared_root, lambda r: created(brokers, r, name))
    home = next(n for n in NAMES if n != owner)
    client = pulsar.Client(
        brokers[home].pulsar_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    acked: list[int] = []
    try:
        producer = client.create_producer(
            f"persistent://{name}", producer_name="pf", send_timeout_millis=90_000
        )
        for n in range(80):
            producer.send(b"id:p:%d|" % n)  # waits for the receipt
            acked.append(n)
            if n == 30:
                brokers[owner].kill()
        new_owner = in_zk(zookeeper, shared_root, lambda r: owner_of(r, key, other_than=owner))
        assert new_owner != owner
        rows = asyncio.run(read_all(brokers[home].endpoint, name, 80))
        assert [mid for _, mid in rows] == [f"id:p:{n}" for n in acked]
        assert [o for o, _ in rows] == list(range(80))
    finally:
        client.close()
        asyncio.run(restarted(brokers[owner], name))


def test_ydb_discovery_lists_every_broker_and_a_ydb_writer_reaches_the_owner(
    brokers: dict[str, ServerProcess],
    zookeeper: ZooKeeperServer,
    shared_root: str,
) -> None:
    """The ydb SDK given a broker that does not own the partition: Discovery lists every
    live broker, the SDK's connections spread over them, and a write session the non-owner
    refuses (UNAVAILABLE) is retried on the next broker until it reaches the owner."""
    name = "public/default/yfollow"

    owner = in_zk(zookeeper, shared_root, lambda r: created(brokers, r, name))
    home = next(n for n in NAMES if n != owner)
    driver = ydb.Driver(endpoint=f"grpc://{brokers[home].endpoint}", database="/local")
    try:
        driver.wait(timeout=15, fail_fast=True)
        listed = driver.discovery_debug_details()
        for srv in brokers.values():
            assert srv.endpoint in listed, listed
        writer = driver.topic_client.writer(
            "/local/yfollow", producer_id="y", partition_id=0, codec=ydb.TopicCodec.RAW
        )
        writer.write([ydb.TopicWriterMessage(b"id:y:%d|" % n) for n in range(10)])
        writer.flush()
        writer.close()
    finally:
        driver.stop(timeout=5)
    rows = asyncio.run(read_all(brokers[home].endpoint, name, 10))
    assert rows == [(n, f"id:y:{n}") for n in range(10)]


def test_ydb_describe_topic_through_any_broker_lists_every_partition(
    brokers: dict[str, ServerProcess],
    zookeeper: ZooKeeperServer,
    shared_root: str,
) -> None:
    """A topic whose partitions several brokers own: the ydb SDK's describe_topic, answered
    by whichever broker, lists every partition (those that broker serves with their stats,
    the others with their owner as location), not only the ones it serves."""
    name = "public/default/ydescribe"
    in_zk(zookeeper, shared_root, lambda r: created(brokers, r, name, partitions=3))
    for srv in brokers.values():
        driver = ydb.Driver(endpoint=f"grpc://{srv.endpoint}", database="/local")
        try:
            driver.wait(timeout=15, fail_fast=True)
            for _ in range(3):  # the SDK spreads its calls over the brokers
                desc = driver.topic_client.describe_topic("/local/ydescribe", include_stats=True)
                assert [p.partition_id for p in desc.partitions] == [0, 1, 2]
                assert desc.min_active_partitions == 3
        finally:
            driver.stop(timeout=5)


async def restarted(srv: ServerProcess, topic: str, timeout: float = 60) -> None:
    """Start a killed broker again and poll until it answers (a later test's first call
    may go to it, and a client that never reached a broker fails fast on a refusal, which
    gRPC may still report from the connection it shares with the clients that saw it die)."""
    if srv.proc is not None:
        return
    await asyncio.to_thread(srv.start)
    deadline = time.monotonic() + timeout
    async with weir.aio.Client(srv.endpoint) as c:
        while True:
            try:
                await c.describe_topic(topic, timeout=5)
                return
            except WeirError as exc:
                alive = srv.proc is not None and srv.proc.poll() is None
                assert time.monotonic() < deadline and alive, (exc, srv.log[-10:])
                await asyncio.sleep(0.1)


async def others_known(conn: Connection, timeout: float = 30) -> None:
    """Poll until the client has learned another broker than its own (the background
    lookup of a writer's first use), so the kill below is not a race with it."""
    deadline = time.monotonic() + timeout
    while not conn.can_fail_over:
        assert time.monotonic() < deadline, "the client never learned the other brokers"
        await asyncio.sleep(0.05)


async def test_an_asyncio_client_given_only_the_owner_goes_on_across_kill_9_of_it(
    brokers: dict[str, ServerProcess], records: ClusterRecords
) -> None:
    """As a Kafka or Pulsar client does: the client is given ONE endpoint, the owner's, and
    learns the cluster's live brokers from a lookup. The owner is killed (SIGKILL) under
    load: its writer, its reader and its admin calls go on through the other brokers (not
    waiting for the dead one). Every acknowledged message is stored once, in order, and
    the reader saw each; a client given the dead broker first in a list reads them too."""
    name = "public/default/failover-aio"
    key = partition_key(name, 0)
    owner = await created(brokers, records, name)
    other = next(n for n in NAMES if n != owner)
    history = History()
    total, kill_after = 240, 60
    seen: dict[int, str] = {}  # offset -> id (restarted from the earliest: offsets repeat)
    acks = PendingAcks(history)
    killed = False
    try:
        async with weir.aio.Client(brokers[owner].endpoint) as client:
            reader = client.reader(name, start="earliest")
            try:
                async with client.writer(
                    name, producer_id="fa", partition=0, delivery_timeout=90
                ) as writer:
                    await writer.wait_init()
                    await others_known(client.conn)
                    for n in range(total):
                        fut = await writer.write_future(make_data("fa", n, 32))
                        acks.add(f"id:fa:{n}", fut)
                        if n + 1 == 2 * kill_after and not killed:
                            await acks.reach(kill_after)  # the kill comes with messages in flight
                        if acks.acked >= kill_after and not killed:
                            brokers[owner].kill()  # the client's only endpoint, mid-load
                            killed = True
                        if n % 20 == 19:
                            await asyncio.sleep(0.01)  # let acks come back between bursts
                    await writer.flush(timeout=90)
                    acks.settle()
                    assert killed and not acks.pending
                deadline = time.monotonic() + 90
                while len(seen) < total and time.monotonic() < deadline:
                    msg = await reader.receive_message(timeout=1.0)
                    if msg is not None:
                        seen[msg.offset] = message_id(msg.data)
            finally:
                await reader.close()
            # an admin call of that client: its own broker is dead, another answers
            assert (await client.describe_topic(name, timeout=30)).partitions == 1
        new_owner = await owner_of(records, key, other_than=owner)
        assert new_owner != owner
        rows = sorted(seen.items())
        report = check(history, {KEY: rows}, {KEY: 0})
        assert report.violations() == {}, report.violations()
        assert report.acknowledged == total
        assert rows == [(n, f"id:fa:{n}") for n in range(total)]  # dense, in write order
        # a list whose first endpoint is the dead broker: the next one is asked
        listed = [brokers[owner].endpoint, brokers[other].endpoint]
        assert await read_all(listed, name, total) == rows
    finally:
        await restarted(brokers[owner], name)


def test_a_sync_tcp_writer_given_only_the_owner_goes_on_across_kill_9_of_it(
    brokers: dict[str, ServerProcess],
    zookeeper: ZooKeeperServer,
    shared_root: str,
) -> None:
    """The sync twin, with the caller-driven writer (``transport="tcp"``): given only the
    owner's endpoint, it goes on at the new owner when that broker is killed (SIGKILL)
    under load; a sync client given "dead,alive" reads every acknowledged message once."""
    name = "public/default/failover-sync"
    owner = in_zk(zookeeper, shared_root, lambda r: created(brokers, r, name))
    other = next(n for n in NAMES if n != owner)
    history = History()
    total, kill_after = 240, 60
    acks = PendingAcks(history)
    killed = False
    try:
        with (
            weir.Client(brokers[owner].endpoint, transport="tcp") as client,
            client.writer(name, producer_id="fs", partition=0, delivery_timeout=90) as writer,
        ):
            assert isinstance(writer._core, DirectWriterCore)
            writer.write(make_data("fs", 0, 32))  # acknowledged: the session is open
            history.attempted("id:fs:0")
            history.acked("id:fs:0", KEY, 0)
            conn = client._aio.conn
            deadline = time.monotonic() + 30
            while not conn.can_fail_over:
                assert time.monotonic() < deadline, "the client never learned the other brokers"
                time.sleep(0.05)
            for n in range(1, total):
                fut = writer.write_future(make_data("fs", n, 32))
                acks.add(f"id:fs:{n}", fut)
                if acks.acked >= kill_after and not killed:
                    brokers[owner].kill()  # the client's only endpoint, mid-load
                    killed = True
                if n % 20 == 19:
                    fut.result(timeout=90)  # drives the socket: acks come in
            writer.flush(timeout=90)
            acks.settle()
            assert killed and not acks.pending
        with weir.Client(f"{brokers[owner].endpoint},{brokers[other].endpoint}") as listed:
            assert listed.describe_topic(name, timeout=30).partitions == 1
            reader = listed.reader(name, start="earliest")
            seen: dict[int, str] = {}
            deadline = time.monotonic() + 60
            while len(seen) < total and time.monotonic() < deadline:
                msg = reader.receive_message(timeout=1.0)
                if msg is not None:
                    seen[msg.offset] = message_id(msg.data)
            reader.close()
        rows = sorted(seen.items())
        report = check(history, {KEY: rows}, {KEY: 0})
        assert report.violations() == {}, report.violations()
        assert report.acknowledged == total
        assert rows == [(n, f"id:fs:{n}") for n in range(total)]
    finally:
        asyncio.run(restarted(brokers[owner], name))
