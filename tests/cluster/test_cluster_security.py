"""Users and grants of a cluster live in ZooKeeper (`weir.security.cluster_store`), and
brokers authenticate to each other with ``auth.cluster_secret``: two `weir serve`
processes of one cluster (real ZooKeeper, the module's real bookies), anonymous access
off, one static superuser; the native SDK and kafka-python with SASL PLAIN."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
from kazoo.client import KazooClient

import weir
from tests.cluster.claims import in_zk, owner_of
from tests.cluster.kafka_members import group_member
from tests.conftest import ServerProcess, cluster_servers
from weir.broker.cluster import partition_key
from weir.broker.config import BrokerConfig
from weir.config import ConfigError, load
from weir.errors import (
    AlreadyExistsError,
    NotFoundError,
    PermissionDeniedError,
    TokenRejectedError,
    UnauthorizedError,
    WeirError,
)
from weir.protocols.kafka.cluster_view import coordinator_of
from weir.replication.local_cluster import BookieProcess
from weir.replication.zkserver import ZooKeeperServer
from weir.security.authenticator import BearerToken
from weir.security.cluster_store import ClusterSecurity, decode_grants, encode_grants
from weir.security.grants import make_grant
from weir.security.peer_tokens import PeerTokens
from weir.server import Server

NAMES = ("a", "b")
ROOT, ROOT_PW = "root", "root-password"
PW = "user-password-1"
SECRET = "cluster-secret-of-the-tests"
T = TypeVar("T")


@pytest.fixture(scope="module")
def brokers(
    zookeeper: ZooKeeperServer,
    shared_root: str,
    shared_bookies: list[BookieProcess],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, ServerProcess]]:
    env = {
        "WEIR_AUTH_USERS": f"{ROOT}:{ROOT_PW}",
        "WEIR_AUTH_ALLOW_ANONYMOUS": "false",
        "WEIR_AUTH_SUPERUSERS": ROOT,
        "WEIR_AUTH_CLUSTER_SECRET": SECRET,
    }
    with cluster_servers(NAMES, zookeeper.hosts, shared_root, tmp_path_factory, "sec", env) as out:
        yield out


def admin(srv: ServerProcess) -> weir.Client:
    return weir.Client(srv.endpoint, credentials=(ROOT, ROOT_PW))


def until(fn: Callable[[], T], what: str, timeout: float = 30) -> T:
    """``fn()`` once it stops raising a weir error, polled to a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except WeirError:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} in {timeout} s") from None
        time.sleep(0.1)


def topic_owned(
    brokers: dict[str, ServerProcess], zookeeper: ZooKeeperServer, root: str, name: str
) -> str:
    """Create ``name`` (one partition); its owner, once every broker knows the topic."""
    with admin(brokers["a"]) as c:
        c.create_topic(name, partitions=1, consumers=["c"])
    owner = in_zk(zookeeper, root, lambda r: owner_of(r, partition_key(name, 0)))
    for srv in brokers.values():
        with admin(srv) as c:
            until(lambda c=c: c.describe_topic(name, timeout=10), f"{srv.endpoint} sees {name}")
    return owner


def whoami(endpoint: str, user: str) -> str:
    with weir.Client(endpoint, credentials=(user, PW)) as c:
        return c.whoami().principal


def write_one(endpoint: str, user: str, topic: str, data: bytes) -> None:
    with (
        weir.Client(endpoint, credentials=(user, PW)) as c,
        c.writer(topic, producer_id=f"{user}-{data.decode()}") as w,
    ):
        w.write(data)
        w.flush(timeout=30)


def test_a_user_added_and_granted_on_one_broker_produces_through_every_broker(
    brokers: dict[str, ServerProcess], zookeeper: ZooKeeperServer, shared_root: str
) -> None:
    """The user is added and granted through the broker that does not own the partition;
    it writes at the owner (which checks the grant) and through the other broker (which
    logs it in and sends it to the owner with the token it issued)."""
    name = "public/default/sec-produce"
    owner = topic_owned(brokers, zookeeper, shared_root, name)
    other = next(n for n in NAMES if n != owner)
    with admin(brokers[other]) as c:
        c.add_user("ann", PW)
        assert c.grant("ann", "produce", name)
    until(lambda: write_one(brokers[owner].endpoint, "ann", name, b"1"), "the owner admits ann")
    write_one(brokers[other].endpoint, "ann", name, b"2")  # a token of `other`, at the owner
    with admin(brokers[owner]) as c:
        assert c.describe_topic(name).messages == 2
        names = {u.user for u in c.list_users()}
        assert "ann" in names
        c.add_user("bob", PW)  # known everywhere, granted nothing
    until(lambda: whoami(brokers[other].endpoint, "bob"), "bob logs in at the other broker")
    with pytest.raises(PermissionDeniedError):
        write_one(brokers[other].endpoint, "bob", name, b"3")


def test_a_revoke_on_one_broker_refuses_the_principal_on_the_other(
    brokers: dict[str, ServerProcess], zookeeper: ZooKeeperServer, shared_root: str
) -> None:
    """Granted through the owner, revoked through the other broker: the owner refuses the
    principal's next write, and its open write stream ends; the user deleted through the
    other broker can no longer log in at the owner."""
    name = "public/default/sec-revoke"
    owner = topic_owned(brokers, zookeeper, shared_root, name)
    other = next(n for n in NAMES if n != owner)
    with admin(brokers[owner]) as c:
        c.add_user("rob", PW)
        c.grant("rob", "produce", name)
    with weir.Client(brokers[owner].endpoint, credentials=("rob", PW)) as rob:
        writer = rob.writer(name, producer_id="rob")
        try:
            writer.write(b"before")
            writer.flush(timeout=30)
            with admin(brokers[other]) as c:
                assert c.revoke("rob", "produce", name)
            with pytest.raises(PermissionDeniedError, match="write to topic"):
                for _ in range(300):  # bounded; ends once the owner has seen the revoke
                    writer.write(b"after")
                    writer.flush(timeout=30)
                    time.sleep(0.1)
        finally:
            writer.close()
        with pytest.raises(PermissionDeniedError):
            write_one(brokers[owner].endpoint, "rob", name, b"new")
    # deleting the user through the other broker: the owner refuses its password, then
    with admin(brokers[other]) as c:
        c.delete_user("rob")
    deadline = time.monotonic() + 30
    with pytest.raises(UnauthorizedError):
        while time.monotonic() < deadline:  # bounded: until the owner has seen the delete
            whoami(brokers[owner].endpoint, "rob")
            time.sleep(0.1)


def test_admins_racing_on_two_brokers_lose_no_grant(brokers: dict[str, ServerProcess]) -> None:
    """Two admins, one per broker, grant one principal 12 topics each at once (every grant
    a compare-and-set of the principal's record): all 24 land, as both brokers see them;
    two admins adding one user at once: one gets it, the other AlreadyExistsError."""
    n = 12
    start = threading.Barrier(len(NAMES))
    errors: list[BaseException] = []

    def grant_all(broker: str) -> None:
        try:
            with admin(brokers[broker]) as c:
                c.whoami()
                start.wait(timeout=30)
                for i in range(n):
                    assert c.grant("racer", "consume", f"race-{broker}-{i}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=grant_all, args=(b,)) for b in NAMES]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    want = {f"race-{b}-{i}" for b in NAMES for i in range(n)}
    for srv in brokers.values():
        with admin(srv) as c:
            deadline = time.monotonic() + 30
            while {g.resource for g in c.list_grants("racer")} != want:
                assert time.monotonic() < deadline, sorted(g.resource for g in c.list_grants())
                time.sleep(0.1)

    outcomes: list[str] = []
    start = threading.Barrier(len(NAMES))

    def add_user(broker: str) -> None:
        with admin(brokers[broker]) as c:
            c.whoami()
            start.wait(timeout=30)
            try:
                c.add_user("twin", PW)
                outcomes.append("added")
            except AlreadyExistsError:
                outcomes.append("exists")

    threads = [threading.Thread(target=add_user, args=(b,)) for b in NAMES]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(outcomes) == ["added", "exists"]


def test_a_kafka_group_reads_offsets_across_brokers_with_authentication_required(
    brokers: dict[str, ServerProcess], zookeeper: ZooKeeperServer, shared_root: str
) -> None:
    """kafka-python with SASL PLAIN, in a group coordinated by the broker that does not own
    the partition: its commit and offset fetch go from the coordinator to the owner
    (authenticated with the cluster secret), and a new member starts at the commit."""
    name, kname = "public/default/sec-group", "sec-group"
    owner = topic_owned(brokers, zookeeper, shared_root, name)
    group = next(g for g in (f"sg{i}" for i in range(64)) if coordinator_of(g, NAMES) != owner)
    with admin(brokers[owner]) as c:
        with c.writer(name, producer_id="w") as w:
            for i in range(40):
                w.write(b"m%d" % i)
        c.add_user("kay", PW)
        c.grant("kay", "consume", name)
        c.grant("kay", "consume", f"group:{group}")
    tp = TopicPartition(kname, 0)

    def member() -> KafkaConsumer:
        return group_member(
            brokers[owner],
            group,
            tp,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="kay",
            sasl_plain_password=PW,
        )

    first = member()
    try:
        first.commit({tp: OffsetAndMetadata(30, "", -1)})
        assert first.committed(tp) == 30
    finally:
        first.close()
    second = member()
    try:
        deadline = time.monotonic() + 60
        got: list[int] = []
        while not got and time.monotonic() < deadline:
            for recs in second.poll(timeout_ms=500).values():
                got.extend(r.offset for r in recs)
        assert got and got[0] == 30
    finally:
        second.close()
    with admin(brokers[owner]) as c:
        [part] = c.describe_consumer(name, group).partitions
        assert part.committed_offset == 30


def test_a_peer_token_holds_only_with_the_same_secret() -> None:
    a, other = PeerTokens(SECRET, "a"), PeerTokens(SECRET + "x", "b")
    principal = a.authenticate(BearerToken(a.token()))
    assert principal is not None and principal.name == "broker:a"
    with pytest.raises(TokenRejectedError):
        other.authenticate(BearerToken(a.token()))
    assert a.authenticate(BearerToken("not-a-peer-token")) is None


def test_a_secured_replicated_broker_needs_the_cluster_secret() -> None:
    env = {
        "WEIR_STORAGE_MODE": "replicated",
        "WEIR_CLUSTER_ZOOKEEPER": "127.0.0.1:1",
        "WEIR_AUTH_ALLOW_ANONYMOUS": "false",
    }
    with pytest.raises(ConfigError, match=r"auth\.cluster_secret"):
        load(None, env=env)
    with pytest.raises(ConfigError, match="16 characters"):
        load(None, env={**env, "WEIR_AUTH_CLUSTER_SECRET": "short"})
    assert load(None, env={**env, "WEIR_AUTH_CLUSTER_SECRET": SECRET}).auth.cluster_secret


async def test_a_read_older_than_the_brokers_own_change_does_not_undo_it(
    zookeeper: ZooKeeperServer,
) -> None:
    """A revoke answered on this broker is not undone by a read of the records that began
    before it (a watch's read under way): only reads from its change mark on apply."""
    zk = KazooClient(hosts=zookeeper.hosts)
    await asyncio.to_thread(zk.start, 30)
    try:
        shared = ClusterSecurity(zk, "/test-cluster-security-marks", lambda: None)
        shared.load()
        grant = make_grant("eve", "produce", "orders")
        shared.grants.add(grant)
        before = await asyncio.to_thread(shared.catalog.read_all)
        assert grant in before.grants
        assert shared.grants.remove(grant)
        shared.apply(before)  # the stale read arrives after the revoke's answer
        assert shared.grants.permissions("eve", "public/default/orders") == set()
        after = await asyncio.to_thread(shared.catalog.read_all)
        shared.apply(after)
        assert grant not in after.grants and shared.grants.list("eve") == []
        odd = make_grant("..", "consume", "*")  # a principal name ZooKeeper would refuse
        assert shared.grants.add(odd)
        assert odd in (await asyncio.to_thread(shared.catalog.read_all)).grants
        shared.stop()
    finally:
        await asyncio.to_thread(zk.stop)
        await asyncio.to_thread(zk.close)


@given(
    st.sets(
        st.tuples(
            st.sampled_from(["produce", "consume", "admin"]),
            st.sampled_from(
                ["orders", "shop/*", "*", "tenant:acme", "namespace:acme/x", "group:g-*"]
            ),
        ),
        max_size=8,
    )
)
def test_a_principals_grant_record_reads_back_as_written(rows: set[tuple[str, str]]) -> None:
    grants = {make_grant("p", perm, res) for perm, res in rows}
    assert decode_grants("p", encode_grants(grants)) == grants


async def test_a_server_made_in_code_refuses_the_same(tmp_path: Path) -> None:
    """`Server` built without `weir.config` (an embedding program) refuses it too, before it
    opens anything."""
    config = BrokerConfig(
        data_dir=tmp_path / "data",
        storage_mode="replicated",
        cluster_zookeeper="127.0.0.1:1",
        allow_anonymous=False,
    )
    server = Server(config, "127.0.0.1:0", fronts=[])
    with pytest.raises(ValueError, match="cluster_secret"):
        await server.start()
    assert not (tmp_path / "data").exists()


async def test_a_user_deleted_takes_the_grants_of_its_name_along(
    zookeeper: ZooKeeperServer,
) -> None:
    """Deleting a user deletes its grants in the same transaction (another broker's admin
    calling only `delete`): a user added again under the name starts with none."""
    zk = KazooClient(hosts=zookeeper.hosts)
    await asyncio.to_thread(zk.start, 30)
    try:
        shared = ClusterSecurity(zk, "/test-cluster-security-delete", lambda: None)
        shared.load()
        shared.users.add("dan", PW)
        shared.grants.add(make_grant("dan", "produce", "orders"))
        shared.users.delete("dan")
        with pytest.raises(NotFoundError):
            shared.users.delete("dan")
        shared.users.add("dan", PW)
        snapshot = await asyncio.to_thread(shared.catalog.read_all)
        assert "dan" in snapshot.users
        assert [g for g in snapshot.grants if g.principal == "dan"] == []
        shared.stop()
    finally:
        await asyncio.to_thread(zk.stop)
        await asyncio.to_thread(zk.close)
