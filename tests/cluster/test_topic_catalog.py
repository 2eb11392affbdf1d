"""The cluster's topic catalog in a real ZooKeeper: what one broker (admin) creates or
changes, another sees; concurrent admins neither lose a change nor make a topic twice."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import AsyncIterator, Callable

import pytest
from kazoo.client import KazooClient

from weir.broker.cluster import partition_key
from weir.broker.cluster.claims import ClusterRecords
from weir.broker.cluster.topic_catalog import TopicCatalog
from weir.broker.topics import ConsumerConfig, TopicConfig
from weir.errors import AlreadyExistsError, BadRequestError, UnknownTopicError
from weir.replication.zkserver import ZooKeeperServer

_roots = itertools.count()


@pytest.fixture
async def catalogs(zookeeper: ZooKeeperServer) -> AsyncIterator[tuple[TopicCatalog, ...]]:
    """Two brokers' catalogs, each with its own ZooKeeper session, on a root of their own."""
    root = f"/catalog-test-{next(_roots)}"
    clients = [KazooClient(hosts=zookeeper.hosts) for _ in range(2)]
    try:
        for zk in clients:
            await asyncio.to_thread(zk.start, 10)
        out = tuple(TopicCatalog(zk, root) for zk in clients)
        for c in out:
            await c.ensure_layout()
        yield out
    finally:
        for zk in clients:
            zk.stop()
            zk.close()


def topic(name: str, partitions: int = 2) -> TopicConfig:
    return TopicConfig(name=name, topic_id=0, partitions=partitions)


async def test_a_topic_one_broker_creates_the_other_sees_with_its_partitions(
    catalogs: tuple[TopicCatalog, TopicCatalog],
) -> None:
    a, b = catalogs
    created = await a.create(topic("public/default/orders", 3))
    got = await b.get("public/default/orders")
    assert got is not None
    assert got[0] == created and created.partitions == 3 and created.topic_id >= 1
    assert await b.names() == ["public/default/orders"]
    keys = await ClusterRecords(b.zk, b.root).partition_keys()
    assert keys == [partition_key("public/default/orders", p) for p in range(3)]


async def test_concurrent_creates_of_one_name_make_one_topic_and_ids_stay_unique(
    catalogs: tuple[TopicCatalog, TopicCatalog],
) -> None:
    a, b = catalogs
    results = await asyncio.gather(
        *(c.create(topic("t/n/same")) for c in (a, b, a, b)), return_exceptions=True
    )
    made = [r for r in results if isinstance(r, TopicConfig)]
    refused = [r for r in results if isinstance(r, AlreadyExistsError)]
    assert (len(made), len(refused)) == (1, 3), results
    others = await asyncio.gather(
        *(c.create(topic(f"t/n/other-{i}")) for i, c in enumerate((a, b, a, b)))
    )
    ids = [made[0].topic_id, *(o.topic_id for o in others)]
    assert len(set(ids)) == len(ids), ids


async def test_concurrent_changes_are_all_kept(
    catalogs: tuple[TopicCatalog, TopicCatalog],
) -> None:
    a, b = catalogs
    await a.create(topic("t/n/policies", 1))

    def set_consumer(name: str) -> Callable[[TopicConfig], TopicConfig]:
        def change(cfg: TopicConfig) -> TopicConfig:
            return dataclasses.replace(
                cfg, consumers={**cfg.consumers, name: ConsumerConfig(name=name)}
            )

        return change

    names = [f"c{i}" for i in range(8)]
    await asyncio.gather(
        *(
            c.update("t/n/policies", set_consumer(n))
            for c, n in zip(itertools.cycle((a, b)), names, strict=False)
        )
    )
    got = await b.get("t/n/policies")
    assert got is not None
    cfg, version = got
    assert sorted(cfg.consumers) == names  # no admin's change overwrote another's
    assert version == len(names)


async def test_growing_a_topic_records_the_new_partitions_and_shrinking_is_refused(
    catalogs: tuple[TopicCatalog, TopicCatalog],
) -> None:
    a, b = catalogs
    await a.create(topic("t/n/grow", 1))
    await b.update("t/n/grow", lambda c: dataclasses.replace(c, partitions=3))
    keys = await ClusterRecords(a.zk, a.root).partition_keys()
    assert keys == [partition_key("t/n/grow", p) for p in range(3)]
    with pytest.raises(BadRequestError, match="only added"):
        await a.update("t/n/grow", lambda c: dataclasses.replace(c, partitions=2))
    got = await a.get("t/n/grow")
    assert got is not None and got[0].partitions == 3


async def test_unknown_and_deleted_topics(catalogs: tuple[TopicCatalog, TopicCatalog]) -> None:
    a, b = catalogs
    with pytest.raises(UnknownTopicError):
        await a.update("t/n/nope", lambda c: c)
    await a.create(topic("t/n/gone"))
    await b.delete("t/n/gone")
    assert await a.get("t/n/gone") is None
    assert await ClusterRecords(a.zk, a.root).partition_keys() == []
    with pytest.raises(UnknownTopicError):
        await b.delete("t/n/gone")
