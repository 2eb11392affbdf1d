"""`TopicCatalog`: the cluster's topics in ZooKeeper, so every broker sees the same ones.

Under ``{root}/cluster``:

- ``topics/{name}`` (the name quoted): persistent, the topic's `TopicConfig` as
  JSON (partition count, retention, limits, consumers, policies). The node's
  ZooKeeper version is the record's version.
- ``topics`` itself: its data changes with every change of a record (brokers watch
  its children for topics created or deleted and its data for topics changed).
- ``topic-ids``: the last topic id handed out (ids are cluster-wide: a partition's
  managed log and its claims are named after the topic).

Creating a topic is one ZooKeeper transaction: the id counter moves (compare-and-set
on its version) and the topic node is created, so two admins creating the same name
at once get one topic (the other `AlreadyExistsError`) and two different topics never
share an id. A change is read-modify-write on the node's version, retried on a
conflict: two admins changing one topic at once both get their change, applied one
after the other to the latest record, and neither overwrites the other. Creating or
growing a topic records its new partitions for placement (`ClusterRecords`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from weir.broker.cluster.claims import ClusterRecords, cluster_path, partition_key
from weir.broker.topics import TopicConfig
from weir.errors import AlreadyExistsError, BadRequestError, UnknownTopicError


def topics_path(root: str) -> str:
    return f"{cluster_path(root)}/topics"


def topic_ids_path(root: str) -> str:
    return f"{cluster_path(root)}/topic-ids"


def _node(root: str, name: str) -> str:
    return f"{topics_path(root)}/{quote(name, safe='')}"


class TopicCatalog:
    """Topics of the cluster (kazoo's blocking calls, off the event loop)."""

    def __init__(self, zk: KazooClient, root: str) -> None:
        self.zk = zk
        self.root = root
        self.records = ClusterRecords(zk, root)

    async def ensure_layout(self) -> None:
        await self.records.ensure_layout()
        await asyncio.to_thread(self.zk.ensure_path, topics_path(self.root))
        with contextlib.suppress(NodeExistsError):
            await asyncio.to_thread(self.zk.create, topic_ids_path(self.root), b"0")

    async def create(
        self,
        config: TopicConfig,
        guard: Callable[[], Awaitable[tuple[str, int]]] | None = None,
    ) -> TopicConfig:
        """Record a new topic with a fresh cluster-wide id (``config.topic_id`` is
        ignored) and its partitions; AlreadyExistsError if the name is taken.
        ``guard()``: a node and its version (the topic's namespace) that must not change
        meanwhile: checked in the same transaction, read again on a conflict (it raises
        when the namespace is gone or going)."""
        ids = topic_ids_path(self.root)
        while True:
            checked = None if guard is None else await guard()
            raw, stat = await asyncio.to_thread(self.zk.get, ids)
            topic_id = int(raw or b"0") + 1
            created = dataclasses.replace(config, topic_id=topic_id)
            tx = self.zk.transaction()
            tx.set_data(ids, str(topic_id).encode(), version=stat.version)
            tx.create(_node(self.root, config.name), created.to_json())
            if checked is not None:
                tx.check(*checked)
            results = await asyncio.to_thread(tx.commit)
            if not any(isinstance(r, Exception) for r in results):
                break
            if isinstance(results[1], NodeExistsError):
                raise AlreadyExistsError(f"topic {config.name!r} already exists in the cluster")
            if isinstance(results[0], BadVersionError):
                continue  # another topic took this id meanwhile
            if checked is not None and isinstance(results[2], (BadVersionError, NoNodeError)):
                continue  # the namespace changed: the guard reads it again
            raise next(r for r in results if not isinstance(r, RolledBackError))
        await self._record_partitions(created, 0)
        return created

    async def get(self, name: str) -> tuple[TopicConfig, int] | None:
        """The topic's record and its version, or None."""
        try:
            raw, stat = await asyncio.to_thread(self.zk.get, _node(self.root, name))
        except NoNodeError:
            return None
        return TopicConfig.from_json(raw), int(stat.version)

    async def names(self) -> list[str]:
        try:
            children = await asyncio.to_thread(self.zk.get_children, topics_path(self.root))
        except NoNodeError:
            return []
        return sorted(unquote(c) for c in children)

    async def topics(self) -> dict[str, TopicConfig]:
        out: dict[str, TopicConfig] = {}
        for name in await self.names():
            got = await self.get(name)
            if got is not None:
                out[name] = got[0]
        return out

    async def update(
        self, name: str, change: Callable[[TopicConfig], TopicConfig]
    ) -> tuple[TopicConfig, int]:
        """Apply ``change`` to the latest record and store it if nobody changed it since it
        was read (else read again and reapply): the new record and its version.
        UnknownTopicError if there is no such topic. Partitions are only ever added."""
        while True:
            got = await self.get(name)
            if got is None:
                raise UnknownTopicError(f"topic {name!r} does not exist in the cluster")
            old, version = got
            new = change(old)
            if (new.name, new.topic_id, new.kind) != (old.name, old.topic_id, old.kind):
                raise BadRequestError("a topic's name, id and kind do not change")
            if new.partitions < old.partitions:
                raise BadRequestError(
                    f"topic {name!r} has {old.partitions} partitions; partitions are only added"
                )
            # the record and the parent's data change together: brokers watch the parent
            tx = self.zk.transaction()
            tx.set_data(_node(self.root, name), new.to_json(), version=version)
            tx.set_data(topics_path(self.root), f"{name} {version + 1}".encode())
            results = await asyncio.to_thread(tx.commit)
            if isinstance(results[0], BadVersionError):
                continue
            if isinstance(results[0], NoNodeError):
                raise UnknownTopicError(f"topic {name!r} does not exist in the cluster")
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:
                raise next((r for r in failed if not isinstance(r, RolledBackError)), failed[0])
            await self._record_partitions(new, old.partitions)
            return new, version + 1

    async def delete(self, name: str) -> None:
        """Forget the topic and its partitions' placement records."""
        got = await self.get(name)
        if got is None:
            raise UnknownTopicError(f"topic {name!r} does not exist in the cluster")
        with contextlib.suppress(NoNodeError):
            await asyncio.to_thread(self.zk.delete, _node(self.root, name))
        cfg = got[0]
        await self.records.remove_partitions(
            [partition_key(cfg.name, p) for p in range(cfg.partitions)]
        )

    async def _record_partitions(self, cfg: TopicConfig, before: int) -> None:
        keys = [partition_key(cfg.name, p) for p in range(before, cfg.partitions)]
        if keys:
            await self.records.add_partitions(keys)
