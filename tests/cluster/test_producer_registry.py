"""Producer ids, producer epochs and schemas of a cluster in a real ZooKeeper, raced by
two brokers (each its own ZooKeeper session): ids are never handed out twice, an epoch
grows once per winner, two incompatible schemas never both become versions, and a
broker whose ZooKeeper is gone gets the retryable UnavailableError."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator

import pytest
from kazoo.client import KazooClient

from weir.broker.cluster.producer_registry import ClusterEpochs, ClusterProducerIds
from weir.broker.cluster.schema_catalog import ClusterSchemas
from weir.broker.schemas import IncompatibleSchemaError, SchemaInfo
from weir.errors import UnavailableError
from weir.replication.zkserver import ZooKeeperServer

_roots = itertools.count()


@pytest.fixture
async def sessions(zookeeper: ZooKeeperServer) -> AsyncIterator[tuple[str, list[KazooClient]]]:
    """Two brokers' ZooKeeper sessions and a root of their own."""
    root = f"/registry-test-{next(_roots)}"
    clients = [KazooClient(hosts=zookeeper.hosts) for _ in range(2)]
    try:
        for zk in clients:
            await asyncio.to_thread(zk.start, 30)
        yield root, clients
    finally:
        for zk in clients:
            zk.stop()
            zk.close()


async def test_two_brokers_never_hand_out_one_producer_id(
    sessions: tuple[str, list[KazooClient]],
) -> None:
    root, (za, zb) = sessions
    a, b = ClusterProducerIds(za, root, block=7), ClusterProducerIds(zb, root, block=7)
    got = await asyncio.gather(*(x.allocate() for _ in range(60) for x in (a, b)))
    assert len(set(got)) == len(got) == 120
    later = ClusterProducerIds(za, root, block=7)  # a broker restarted: a fresh block
    assert await later.allocate() not in got


async def test_an_epoch_grown_at_one_version_has_one_winner(
    sessions: tuple[str, list[KazooClient]],
) -> None:
    root, (za, zb) = sessions
    a, b = ClusterEpochs(za, root), ClusterEpochs(zb, root)
    await a.ensure_layout()  # as a broker does when it connects
    assert await a.get(5) == (0, None, -1)
    won = await asyncio.gather(a.grow(5, 1, "p", -1), b.grow(5, 1, "q", -1))
    assert sorted(won) == [False, True]
    epoch, holder, version = await b.get(5)
    assert epoch == 1 and holder in ("p", "q")
    won = await asyncio.gather(a.grow(5, 2, "p", version), b.grow(5, 2, "q", version))
    assert sorted(won) == [False, True]
    assert (await a.get(5))[0] == 2
    assert await b.all() == {5: (2, (await a.get(5))[1])}  # what every broker's watch reads
    await a.drop(5)
    assert await b.get(5) == (0, None, -1)


def _record(fields: dict[str, str]) -> SchemaInfo:
    doc = {
        "type": "record",
        "name": "R",
        "fields": [{"name": k, "type": v} for k, v in fields.items()],
    }
    return SchemaInfo(type=2, data=json.dumps(doc).encode())


async def test_two_brokers_adding_incompatible_schemas_get_one_each_way(
    sessions: tuple[str, list[KazooClient]],
) -> None:
    root, (za, zb) = sessions
    a, b = ClusterSchemas(za, root), ClusterSchemas(zb, root)
    await a.ensure_layout()
    one, other = _record({"x": "string"}), _record({"x": "int"})  # x changes its type
    got = await asyncio.gather(a.ensure(9, one), b.ensure(9, other), return_exceptions=True)
    assert sorted(type(g).__name__ for g in got) == ["IncompatibleSchemaError", "int"]
    winner = one if got[0] == 0 else other
    await b.reload()  # what GetSchema answers from on the other broker
    found = b.get(9)
    assert found is not None and found[0].same(winner) and found[1] == 0
    with pytest.raises(IncompatibleSchemaError):
        await a.ensure(9, other if winner is one else one)
    await a.delete(9)
    await b.reload()
    assert b.get(9) is None


async def test_a_broker_without_its_zookeeper_gets_a_retryable_error(
    sessions: tuple[str, list[KazooClient]],
) -> None:
    root, (za, _) = sessions
    ids, epochs, schemas = (
        ClusterProducerIds(za, root),
        ClusterEpochs(za, root),
        ClusterSchemas(za, root),
    )
    await asyncio.to_thread(za.stop)
    for call in (ids.allocate(), epochs.get(1), schemas.ensure(1, _record({"x": "string"}))):
        with pytest.raises(UnavailableError) as err:
            await call
        assert err.value.retryable
