"""`ClusterSchemas`: topic schemas (Pulsar's schema registry) of a cluster, in ZooKeeper.

A topic's schema is what every producer and consumer of it is checked against; in a
cluster the topic's partitions move between brokers, so a schema registered through
one broker must hold on all of them. Under ``{root}/cluster``:

- ``schemas/{topic id}``: the topic's versions, the same JSON list the embedded
  registry keeps in LMDB; the node's ZooKeeper version is the record's version;
- ``schemas`` itself: its data changes in the same transaction as every change below
  it; brokers watch it and read the schemas again (for `get`, which is synchronous).

Adding a version reads the topic's node from ZooKeeper (not the broker's copy, which
a watch may not have refreshed yet), checks compatibility against what it read, and
writes at the version it read: two brokers adding incompatible schemas at once get
one each way, never both (the loser reads again and is checked against the winner).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    KazooException,
    NoNodeError,
)

from weir.broker.cluster.claims import cluster_path
from weir.broker.cluster.zk_transactions import write_at_version
from weir.broker.schemas import (
    SchemaInfo,
    SchemaRegistry,
    admissible,
    decode_versions,
    encode_versions,
    next_versions,
)
from weir.errors import UnavailableError
from weir.replication.zk_folders import read_children
from weir.storage.kv import Op


def schemas_path(root: str) -> str:
    return f"{cluster_path(root)}/schemas"


async def _noop_commit(_: Any) -> None:
    return None


class ClusterSchemas(SchemaRegistry):
    """The schema registry of a replicated broker (kazoo's blocking calls, off the loop)."""

    def __init__(self, zk: KazooClient, root: str) -> None:
        super().__init__(kv=None, commit=_noop_commit)  # type: ignore[arg-type]
        self.zk = zk
        self.path = schemas_path(root)

    def _node(self, topic_id: int) -> str:
        return f"{self.path}/{topic_id}"

    async def ensure_layout(self) -> None:
        await asyncio.to_thread(self.zk.ensure_path, self.path)

    def load(self) -> None:
        """Nothing local: `reload` reads ZooKeeper (at connect and on every change)."""

    async def reload(self) -> None:
        """Every topic's versions, as ZooKeeper has them now."""
        self._versions = await asyncio.to_thread(self._read_all)

    def _read_all(self) -> dict[int, list[SchemaInfo]]:
        return {
            int(child): decode_versions(raw)
            for child, raw in read_children(self.zk, self.path).items()
        }

    async def ensure(self, topic_id: int, schema: SchemaInfo) -> int | None:
        if not admissible(schema):
            return None
        try:
            return await self._ensure(topic_id, schema)
        except KazooException as exc:  # ZooKeeper did not answer: retryable
            raise UnavailableError(
                f"cannot reach the cluster's schemas in ZooKeeper: {exc!r}"
            ) from None

    async def _ensure(self, topic_id: int, schema: SchemaInfo) -> int | None:
        async with self._lock:
            while True:
                try:
                    raw, stat = await asyncio.to_thread(self.zk.get, self._node(topic_id))
                    vs, version = decode_versions(raw), stat.version
                except NoNodeError:
                    vs, version = [], -1
                self._versions[topic_id] = vs
                found, new = next_versions(vs, schema)
                if new is None:
                    return found
                if await asyncio.to_thread(self._write, topic_id, new, version):
                    self._versions[topic_id] = new
                    return found

    def _write(self, topic_id: int, vs: list[SchemaInfo], version: int) -> bool:
        """Write at ``version`` (-1: create), with the change mark; False on a conflict."""
        return write_at_version(
            self.zk,
            self._node(topic_id),
            encode_versions(vs),
            version,
            self.path,
            str(topic_id).encode(),
        )

    async def delete(self, topic_id: int) -> None:
        async with self._lock:
            self._versions.pop(topic_id, None)
            await asyncio.to_thread(self._delete, topic_id)

    def _delete(self, topic_id: int) -> None:
        tx = self.zk.transaction()
        tx.delete(self._node(topic_id))
        tx.set_data(self.path, str(topic_id).encode())
        tx.commit()  # absent already: nothing to delete

    def drop_ops(self, topic_id: int) -> list[Op]:
        return []  # not in LMDB; `ClusterMode.drop_topic` deletes the node
