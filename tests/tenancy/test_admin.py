"""Tenants, namespaces and policies through the SDK (sync and asyncio twins) against a
real server process: administration, and each policy acting on a topic."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import weir
import weir.aio
from tests.conftest import ServerProcess
from weir.errors import (
    AlreadyExistsError,
    BacklogQuotaExceededError,
    BadRequestError,
    DeliveryTimeoutError,
    MessageTooLargeError,
    NotEmptyError,
    TooManyConsumersError,
    TooManyProducersError,
    UnknownNamespaceError,
    UnknownTenantError,
    UnknownTopicError,
)


@pytest.fixture
def client(shared_server: ServerProcess) -> Iterator[weir.Client]:
    with weir.Client(shared_server.endpoint) as c:
        yield c


def test_tenants_and_namespaces_are_created_listed_described_and_deleted(
    client: weir.Client, topic_name: str
) -> None:
    tenant = f"t-{topic_name}"[:60]
    client.create_tenant(tenant)
    with pytest.raises(AlreadyExistsError):
        client.create_tenant(tenant)
    assert tenant in [t.name for t in client.list_tenants()]
    assert "public" in [t.name for t in client.list_tenants()]
    ns = client.create_namespace(f"{tenant}/shop", {"retention_ms": 3_600_000})
    assert (ns.name, ns.tenant, ns.policies) == (
        f"{tenant}/shop",
        tenant,
        {"retention_ms": 3_600_000},
    )
    assert ns.effective_policies["deduplication"] is True  # the server's, inherited
    assert client.describe_tenant(tenant).namespaces == ["shop"]
    assert [n.name for n in client.list_namespaces(tenant)] == [f"{tenant}/shop"]
    client.create_topic(f"{tenant}/shop/orders", 2)
    described = client.describe_namespace(f"{tenant}/shop")
    assert described.topics == ["orders"]
    topic = client.describe_topic(f"{tenant}/shop/orders")
    assert topic.retention_ms == 3_600_000 and topic.policies == {}
    # not empty: refused, and nothing changed
    with pytest.raises(NotEmptyError, match="drop them first"):
        client.delete_namespace(f"{tenant}/shop")
    with pytest.raises(NotEmptyError, match="delete them first"):
        client.delete_tenant(tenant)
    assert client.describe_topic(f"{tenant}/shop/orders").partitions == 2
    client.drop_topic(f"{tenant}/shop/orders")
    client.delete_namespace(f"{tenant}/shop")
    client.delete_tenant(tenant)
    with pytest.raises(UnknownTenantError):
        client.describe_tenant(tenant)
    with pytest.raises(UnknownTenantError):  # the tenant is gone with it
        client.describe_namespace(f"{tenant}/shop")
    with pytest.raises(UnknownNamespaceError, match="does not exist"):
        client.describe_namespace("public/never-made")
    assert "public/default" in [n.name for n in client.list_namespaces()]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: c.create_tenant("a/b"), "one part"),
        (lambda c: c.create_tenant("bad name"), "bad tenant name"),
        (lambda c: c.create_namespace("a/b/c"), "3 parts"),
        (lambda c: c.create_namespace("public/"), ""),
        (lambda c: c.create_namespace("public//x"), "no empty parts"),
        (lambda c: c.create_topic("a/b/c/d"), "4 parts"),
        (lambda c: c.create_topic("public/default/b@d"), "bad topic name 'b@d'"),
        (lambda c: c.create_namespace("ns-neg", {"retention_bytes": -1}), "must not be negative"),
        (lambda c: c.create_namespace("ns-unknown", {"backlog_quota": 1}), "unknown policy"),
        (lambda c: c.set_namespace_policies("default", {"retention_bytes": -5}), "negative"),
        (lambda c: c.set_namespace_policies("default", {"nope": 1}), "unknown policy 'nope'"),
    ],
)
def test_bad_names_and_policies_are_refused_and_change_nothing(
    client: weir.Client, call: object, message: str
) -> None:
    before = (client.list_tenants(), client.list_namespaces())
    if message:
        with pytest.raises(BadRequestError, match=message):
            call(client)  # type: ignore[operator]
    else:  # a trailing '/' is forgiven: "public/" is the namespace "public" of public
        ns = call(client)  # type: ignore[operator]
        client.delete_namespace(ns.name)
    assert (client.list_tenants(), client.list_namespaces()) == before


async def test_the_asyncio_twins_have_the_same_names(
    shared_server: ServerProcess, topic_name: str
) -> None:
    name = f"aio-{topic_name}"[:60]
    async with weir.aio.Client(shared_server.endpoint) as c:
        await c.create_tenant(name)
        ns = await c.create_namespace(f"{name}/ns", {"deduplication": False})
        assert ns.policies == {"deduplication": False}
        ns = await c.set_namespace_policies(f"{name}/ns", {"max_producers_per_topic": None})
        assert ns.policies == {"deduplication": False, "max_producers_per_topic": None}
        ns = await c.set_namespace_policies(f"{name}/ns", remove=["deduplication"])
        assert ns.policies == {"max_producers_per_topic": None}
        assert (await c.describe_namespace(f"{name}/ns")).name == f"{name}/ns"
        assert (await c.describe_tenant(name)).namespaces == ["ns"]
        assert name in [t.name for t in await c.list_tenants()]
        assert [n.name for n in await c.list_namespaces(name)] == [f"{name}/ns"]
        await c.delete_namespace(f"{name}/ns")
        await c.delete_tenant(name)
    for method in (
        "create_tenant",
        "describe_tenant",
        "delete_tenant",
        "list_tenants",
        "create_namespace",
        "describe_namespace",
        "delete_namespace",
        "list_namespaces",
        "set_namespace_policies",
    ):
        assert hasattr(weir.Client, method) and hasattr(weir.aio.Client, method)


# ---------------------------------------------------------------- each policy acting


def test_a_new_topic_name_just_works_for_producers_and_consumers(
    client: weir.Client, topic_name: str
) -> None:
    client.create_namespace(f"auto-{topic_name}"[:60], {"default_partitions": 3})
    ns = f"auto-{topic_name}"[:60]
    with client.writer(f"{ns}/written", producer_id="p") as w:
        w.write(b"hello")
    assert client.describe_topic(f"{ns}/written").partitions == 3  # the namespace's default
    reader = client.reader(f"{ns}/read", consumer="c")
    assert reader.receive_batch(timeout=0.5) is None
    reader.close()
    assert client.describe_topic(f"{ns}/read").consumers[0].name == "c"
    # the namespace turns it off: the unknown topic error is as before
    client.set_namespace_policies(ns, {"auto_create_topics": False})
    w = client.writer(f"{ns}/other", producer_id="p")
    with pytest.raises(UnknownTopicError, match="does not exist"):
        w.wait_init()
    w.close()
    r = client.reader(f"{ns}/other", consumer="c")
    with pytest.raises(UnknownTopicError):
        r.receive_batch(timeout=10)
    r.close()


def test_the_server_setting_turns_auto_creation_off(tmp_path: object) -> None:
    from pathlib import Path

    srv = ServerProcess(Path(str(tmp_path)) / "data", env={"WEIR_TOPICS_AUTO_CREATE": "false"})
    srv.start()
    try:
        with weir.Client(srv.endpoint) as c:
            w = c.writer("unknown", producer_id="p")
            with pytest.raises(UnknownTopicError, match="'unknown' does not exist"):
                w.wait_init()
            w.close()
            # a namespace may still allow it
            c.create_namespace("open", {"auto_create_topics": True})
            with c.writer("open/t", producer_id="p") as w2:
                w2.write(b"x")
            assert c.describe_topic("open/t").partition_info[0].end_offset == 1
    finally:
        srv.stop()


def test_max_message_bytes_is_enforced_per_namespace_and_topic(
    client: weir.Client, topic_name: str
) -> None:
    ns = f"small-{topic_name}"[:60]
    client.create_namespace(ns, {"max_message_bytes": 1000})
    client.create_topic(f"{ns}/t")
    client.create_topic(f"{ns}/big", policies={"max_message_bytes": 4000})
    with client.writer(f"{ns}/t", producer_id="p") as w:
        assert w.wait_init().max_message_bytes == 1000
        with pytest.raises(MessageTooLargeError):
            w.write(b"x" * 1001)
        w.write(b"x" * 1000)
    with client.writer(f"{ns}/big", producer_id="p") as w:
        w.write(b"x" * 3000)
    assert [client.describe_topic(f"{ns}/{t}").messages for t in ("t", "big")] == [1, 1]


def test_deduplication_off_stores_a_resend_again(client: weir.Client, topic_name: str) -> None:
    ns = f"dup-{topic_name}"[:60]
    client.create_namespace(ns, {"deduplication": False})
    for topic in (f"{ns}/t", topic_name):
        client.create_topic(topic, 1)
        for _ in range(2):  # the same seq_nos twice, as a producer resending after a crash
            with client.writer(topic, producer_id="p") as w:
                for seq in (1, 2, 3):
                    w.write(b"m%d" % seq, seq_no=seq)
    assert client.describe_topic(f"{ns}/t").messages == 6
    assert client.describe_topic(topic_name).messages == 3  # the server's default: on


def test_max_producers_and_consumers_per_topic(client: weir.Client, topic_name: str) -> None:
    ns = f"few-{topic_name}"[:60]
    client.create_namespace(ns, {"max_producers_per_topic": 1, "max_consumers_per_topic": 1})
    topic = f"{ns}/t"
    client.create_topic(topic)
    first = client.writer(topic, producer_id="a").wait_init()
    second = client.writer(topic, producer_id="b")
    with pytest.raises(TooManyProducersError, match="max_producers_per_topic"):
        second.wait_init()
    second.close()
    first.close()
    with client.writer(topic, producer_id="b") as w:  # room again
        w.write(b"x")
    r1 = client.reader(topic, consumer="c1").wait_connected()
    r2 = client.reader(topic, consumer="c2")
    with pytest.raises(TooManyConsumersError, match="max_consumers_per_topic"):
        r2.receive_batch(timeout=10)
    r2.close()
    r1.close()


def test_message_ttl_makes_a_consumer_skip_old_messages(
    client: weir.Client, topic_name: str
) -> None:
    ns = f"ttl-{topic_name}"[:60]
    client.create_namespace(ns, {"message_ttl_ms": 50})
    topic = f"{ns}/t"
    with client.writer(topic, producer_id="p") as w:
        written = w.write_with_result(b"old")
    assert written.offset == 0
    deadline = time.time() + 10
    while time.time() * 1000 < client.describe_topic(topic).partition_info[0].last_write_ms + 100:
        assert time.time() < deadline  # the message ages past its TTL
        time.sleep(0.01)
    with client.writer(topic, producer_id="p") as w:
        w.write(b"new")
    r = client.reader(topic, consumer="late")
    batch = r.receive_batch(timeout=10)
    r.close()
    assert batch is not None and [m.data for m in batch] == [b"new"]
    # a reader without a consumer is not a subscription: it still sees everything
    assert [m.data for c in client.read_range(topic, 0, 0) for m in c.messages()] == [
        b"old",
        b"new",
    ]


def test_namespace_retention_reaches_its_topics_at_once(
    client: weir.Client, topic_name: str
) -> None:
    ns = f"ret-{topic_name}"[:60]
    client.create_namespace(ns, {"retention_ms": 3_600_000})
    client.create_topic(f"{ns}/follows")
    client.create_topic(f"{ns}/own", retention=60_000)
    client.set_namespace_policies(ns, {"retention_ms": 7_200_000, "retention_bytes": 1 << 30})
    follows, own = (client.describe_topic(f"{ns}/{t}") for t in ("follows", "own"))
    assert (follows.retention_ms, follows.retention_bytes) == (7_200_000, 1 << 30)
    assert (own.retention_ms, own.retention_bytes) == (60_000, 1 << 30)
    assert own.policies == {"retention_ms": 60_000}
    own = client.alter_topic(f"{ns}/own", inherit=["retention_ms"])
    assert own.retention_ms == 7_200_000 and own.policies == {}


def test_namespace_retention_removes_data_unless_a_topic_keeps_its_own(tmp_path: object) -> None:
    from pathlib import Path

    srv = ServerProcess(
        Path(str(tmp_path)) / "data",
        env={
            "WEIR_TOPICS_RETENTION_INTERVAL_S": "0.2",
            "WEIR_STORAGE_LOW_WATERMARK": "10000",
            "WEIR_STORAGE_MAX_BLOB_SIZE": "20000",
        },
    )
    srv.start()
    try:
        with weir.Client(srv.endpoint) as c:
            c.create_namespace("short", {"retention_ms": 1})
            c.create_topic("short/kept", retention=None)  # its own: forever
            c.create_topic("short/trimmed")  # follows the namespace: 1 ms
            for topic in ("short/kept", "short/trimmed"):
                with c.writer(topic, producer_id="p") as w:
                    for i in range(300):
                        w.write(b"%04d" % i + b"x" * 200)
            deadline = time.monotonic() + 60
            while c.describe_topic("short/trimmed").partition_info[0].start_offset == 0:
                assert time.monotonic() < deadline, "retention never ran"
                time.sleep(0.05)
            # the same pass went over "kept" (created first) and left it whole
            assert c.describe_topic("short/kept").partition_info[0].start_offset == 0
            assert c.describe_topic("short/kept").messages == 300
    finally:
        srv.stop()


def test_tenants_namespaces_and_policies_survive_kill_9(server: ServerProcess) -> None:
    with weir.Client(server.endpoint) as c:
        c.create_tenant("acme")
        c.create_namespace("acme/shop", {"retention_ms": 60_000, "deduplication": False})
        c.create_topic("acme/shop/orders", 2, policies={"max_message_bytes": 2000})
        c.set_namespace_policies("acme/shop", {"max_producers_per_topic": 3})
    server.kill()  # every call above was acknowledged, so it is on disk
    server.start()
    with weir.Client(server.endpoint) as c:
        ns = c.describe_namespace("acme/shop")
        assert ns.policies == {
            "retention_ms": 60_000,
            "deduplication": False,
            "max_producers_per_topic": 3,
        }
        assert ns.topics == ["orders"]
        t = c.describe_topic("acme/shop/orders")
        assert (t.partitions, t.retention_ms, t.policies) == (
            2,
            60_000,
            {"max_message_bytes": 2000},
        )
        assert t.effective_policies["deduplication"] is False
        assert [x.name for x in c.list_tenants()] == ["acme", "public"]


def test_backlog_quota_holds_writers_back_until_the_consumer_reads(
    client: weir.Client, topic_name: str
) -> None:
    ns = f"quota-{topic_name}"[:60]
    client.create_namespace(ns, {"backlog_quota_bytes": 20_000})
    topic = f"{ns}/t"
    client.create_topic(topic, 1, consumers=[weir.Consumer("audit", important=True)])
    w = client.writer(topic, producer_id="p", delivery_timeout=2)
    with pytest.raises(DeliveryTimeoutError) as caught:
        for i in range(2000):  # 2 MB at most: the quota stops it long before
            w.write(b"%05d" % i + b"x" * 1000)
            if i % 10 == 9:  # one request per 10 KB: a request is checked as a whole
                w.flush()
    assert isinstance(caught.value.reason, BacklogQuotaExceededError)
    w.close()
    stored = client.describe_topic(topic).partition_info[0].end_offset
    assert 0 < stored < 2000
    client.commit_offset(topic, 0, "audit", stored)  # audit catches up
    with client.writer(topic, producer_id="p2") as w2:
        w2.write(b"after")
    assert client.describe_topic(topic).partition_info[0].end_offset == stored + 1


def test_backlog_eviction_keeps_writers_going_and_moves_a_subscription(
    client: weir.Client, topic_name: str
) -> None:
    ns = f"evict-{topic_name}"[:60]
    client.create_namespace(
        ns, {"backlog_quota_bytes": 20_000, "backlog_quota_policy": "consumer_backlog_eviction"}
    )
    assert client.describe_namespace(ns).policies["backlog_quota_policy"] == (
        "consumer_backlog_eviction"
    )
    topic = f"{ns}/t"
    client.create_topic(topic, 1)
    client.create_subscription(topic, "slow", initial_position="earliest")
    with client.writer(topic, producer_id="p", delivery_timeout=10) as w:
        for i in range(500):  # 500 KB through a 20 KB quota: never refused
            w.write(b"%05d" % i + b"x" * 1000)
            if i % 10 == 9:
                w.flush()
    info = client.describe_subscription(topic, "slow")
    assert info.partitions[0].mark_delete > 0 and info.backlog < 500
