"""The cluster's tenants and namespaces in a real ZooKeeper: what one broker's admin
creates or changes, another broker's `ClusterTenancy` sees; admins racing on two
brokers neither lose a policy change, nor make a namespace twice, nor leave a
namespace in a deleted tenant."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence

import pytest
from kazoo.client import KazooClient

from weir.broker.cluster.namespace_catalog import ClusterTenancy, NamespaceCatalog
from weir.broker.cluster.topic_catalog import TopicCatalog
from weir.broker.tenancy.registry import Namespace
from weir.broker.topics import TopicConfig
from weir.errors import (
    AlreadyExistsError,
    BadRequestError,
    NotEmptyError,
    UnknownNamespaceError,
    UnknownTenantError,
)
from weir.replication.zkserver import ZooKeeperServer
from weir.storage.kv import Op

_roots = itertools.count()


async def no_commit(ops: Sequence[Op]) -> None:
    raise AssertionError(f"a cluster tenancy wrote to the broker's LMDB: {ops}")


@pytest.fixture
async def tenancies(zookeeper: ZooKeeperServer) -> AsyncIterator[tuple[ClusterTenancy, ...]]:
    """Two brokers' tenancies, each with its own ZooKeeper session, on a root of their own."""
    root = f"/namespaces-test-{next(_roots)}"
    clients = [KazooClient(hosts=zookeeper.hosts) for _ in range(2)]
    try:
        for zk in clients:
            await asyncio.to_thread(zk.start, 10)
        out = tuple(
            ClusterTenancy(NamespaceCatalog(zk, root), TopicCatalog(zk, root).names)
            for zk in clients
        )
        for t in out:
            await t.catalog.ensure_layout()
            await TopicCatalog(t.catalog.zk, root).ensure_layout()
            await t.load()
        yield out
    finally:
        for zk in clients:
            zk.stop()
            zk.close()


async def test_what_one_broker_creates_the_other_sees_and_the_default_always_exists(
    tenancies: tuple[ClusterTenancy, ClusterTenancy],
) -> None:
    a, b = tenancies
    assert [ns.path for ns in b.list_namespaces()] == ["public/default"]
    await a.create_tenant("acme", no_commit)
    made = await a.create_namespace("acme/orders", {"retention_ms": 60_000}, no_commit)
    await b.load()
    assert b.namespace("acme/orders") == made
    assert b.namespace("acme/orders").policies["retention_ms"] == 60_000
    assert b.tenant("acme").name == "acme"
    with pytest.raises(BadRequestError, match="always exists"):
        await b.delete_namespace("public/default", [], no_commit)
    with pytest.raises(BadRequestError, match="always exists"):
        await b.delete_tenant("public", no_commit)
    with pytest.raises(UnknownNamespaceError):
        await b.set_policies("acme/missing", {"retention_ms": 1}, (), no_commit)


async def test_admins_racing_on_two_brokers_keep_every_policy_change(
    tenancies: tuple[ClusterTenancy, ClusterTenancy],
) -> None:
    a, b = tenancies
    await a.create_tenant("race", no_commit)
    await a.create_namespace("race/ns", {}, no_commit)
    await b.load()
    # each admin sets its own policy, many times over, both brokers at once: every
    # read-modify-write that lost the race is applied again to the winner's record
    changes = [
        (t, {key: value})
        for value in range(1, 6)
        for t, key in ((a, "retention_ms"), (b, "max_producers_per_topic"))
    ]
    await asyncio.gather(*(t.set_policies("race/ns", c, (), no_commit) for t, c in changes))
    for t in (a, b):
        await t.load()
        policies = t.namespace("race/ns").policies
        assert policies["retention_ms"] in range(1, 6)
        assert policies["max_producers_per_topic"] in range(1, 6)
    # and a last change from each at once: both kept
    await asyncio.gather(
        a.set_policies("race/ns", {"retention_ms": 1000}, (), no_commit),
        b.set_policies("race/ns", {"max_producers_per_topic": 7}, (), no_commit),
    )
    await a.load()
    final = a.namespace("race/ns").policies
    assert (final["retention_ms"], final["max_producers_per_topic"]) == (1000, 7)


async def test_racing_creates_make_one_namespace_and_a_tenant_with_one_cannot_go(
    tenancies: tuple[ClusterTenancy, ClusterTenancy],
) -> None:
    a, b = tenancies
    results = await asyncio.gather(
        *(t.create_tenant("dup", no_commit) for t in (a, b, a, b)), return_exceptions=True
    )
    assert sum(isinstance(r, AlreadyExistsError) for r in results) == 3, results
    made = await asyncio.gather(
        *(t.create_namespace("dup/ns", {}, no_commit) for t in (a, b, a, b)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, Namespace) for r in made) == 1
    assert sum(isinstance(r, AlreadyExistsError) for r in made) == 3, made
    # b has not heard of the namespace yet: ZooKeeper refuses the delete all the same
    with pytest.raises(NotEmptyError, match="ns"):
        await b.delete_tenant("dup", no_commit)
    # deleting the tenant and creating a namespace in it at once: never both
    await a.delete_namespace("dup/ns", [], no_commit)
    deleted, created = await asyncio.gather(
        a.delete_tenant("dup", no_commit),
        b.create_namespace("dup/late", {}, no_commit),
        return_exceptions=True,
    )
    assert (deleted is None) != isinstance(created, Namespace), (deleted, created)
    if deleted is None:
        assert isinstance(created, UnknownTenantError)
    else:
        assert isinstance(deleted, NotEmptyError)


async def test_a_namespace_deleted_while_a_topic_is_created_in_it_keeps_one_of_them(
    tenancies: tuple[ClusterTenancy, ClusterTenancy],
) -> None:
    """Broker a deletes a namespace while broker b creates a topic in it (b has the
    namespace in its view): either the topic was made and the delete refused, or the
    delete went and the topic was refused; never a topic in a deleted namespace."""
    a, b = tenancies
    topics = TopicCatalog(b.catalog.zk, b.catalog.root)
    await a.create_tenant("del", no_commit)
    for i in range(8):
        path = f"del/ns-{i}"
        await a.create_namespace(path, {}, no_commit)
        name = f"{path}/t"
        deleted, created = await asyncio.gather(
            a.delete_namespace(path, [], no_commit),
            topics.create(
                TopicConfig(name=name, topic_id=0, partitions=1), guard=lambda n=name: b.guard(n)
            ),
            return_exceptions=True,
        )
        exists = await topics.get(name) is not None
        if deleted is None:  # the namespace went: the topic was refused
            assert isinstance(created, UnknownNamespaceError), created
            assert not exists
            assert await a.catalog.get_namespace("del", f"ns-{i}") is None
        else:  # the topic was made first: the delete was refused, the namespace stays
            assert isinstance(deleted, NotEmptyError), deleted
            assert isinstance(created, TopicConfig) and exists
            got = await a.catalog.get_namespace("del", f"ns-{i}")
            assert got is not None
            assert got[0].path == path and (await b.guard(name))[0]  # not left marked
