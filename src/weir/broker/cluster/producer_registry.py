"""Producer ids and producer epochs of a cluster, in ZooKeeper.

In embedded mode both are rows of the broker's LMDB (`weir.broker.producer_ids`,
`weir.broker.producer_admission`). In a cluster a partition moves between brokers,
and both must mean the same thing on every broker:

- **producer ids** (Kafka's InitProducerId): a Kafka idempotent producer's writes are
  deduplicated by its id, so two producers given the same id by two brokers would
  drop each other's records as resends. ``{root}/cluster/producer-ids`` holds the end
  of the last block handed out; a broker takes a block by compare-and-set on the
  node's version before it gives any id of it (at worst the rest of a block is
  skipped when a broker stops).
- **producer epochs** (access modes, `weir.broker.access`): a topic's epoch grows each
  time an exclusive producer takes it, and a producer coming back with an older epoch
  is fenced. ``{root}/cluster/producer-epochs/{topic id}`` holds ``{"epoch", "holder"}``;
  a broker reads it before it admits a producer (so a stale epoch is refused on the
  new owner after a move) and grows it by compare-and-set (two brokers growing it at
  once: one wins, the other reads again), in one transaction with a change of the
  ``producer-epochs`` node's data, which every broker watches: when another broker's
  exclusive producer took the topic, a broker fences its own sessions of other
  producers at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
)

from weir.broker.cluster.claims import cluster_path
from weir.broker.cluster.zk_transactions import write_at_version
from weir.errors import UnavailableError
from weir.replication.zk_folders import read_children

BLOCK = 100  # ids per block taken from ZooKeeper


def _unavailable(what: str, exc: Exception) -> UnavailableError:
    """ZooKeeper did not answer (a lost connection, a session moving): retryable."""
    return UnavailableError(f"cannot reach the cluster's {what} in ZooKeeper: {exc!r}")


def producer_ids_path(root: str) -> str:
    return f"{cluster_path(root)}/producer-ids"


def producer_epochs_path(root: str) -> str:
    return f"{cluster_path(root)}/producer-epochs"


class ClusterProducerIds:
    """Allocates producer ids unique across the cluster; `allocate` is safe to call concurrently."""

    def __init__(self, zk: KazooClient, root: str, block: int = BLOCK) -> None:
        self.zk = zk
        self.path = producer_ids_path(root)
        self.block = block
        self._next = self._end = 0
        self._lock = asyncio.Lock()

    async def allocate(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                try:
                    self._next, self._end = await asyncio.to_thread(self._take_block)
                except KazooException as exc:
                    raise _unavailable("producer ids", exc) from None
            pid = self._next
            self._next += 1
            return pid

    def _take_block(self) -> tuple[int, int]:
        while True:
            try:
                raw, stat = self.zk.get(self.path)
            except NoNodeError:
                with contextlib.suppress(NodeExistsError):
                    self.zk.create(self.path, b"0", makepath=True)
                continue
            start = int(raw or b"0")
            try:
                self.zk.set(self.path, str(start + self.block).encode(), version=stat.version)
            except BadVersionError:
                continue  # another broker took a block: take the next one
            return start, start + self.block


class ClusterEpochs:
    """The producer epoch of each topic (by its cluster-wide topic id)."""

    def __init__(self, zk: KazooClient, root: str) -> None:
        self.zk = zk
        self.path = producer_epochs_path(root)

    def _node(self, topic_id: int) -> str:
        return f"{self.path}/{topic_id}"

    async def get(self, topic_id: int) -> tuple[int, str | None, int]:
        """(epoch, holder, node version): (0, None, -1) when no exclusive producer ever took it."""
        try:
            raw, stat = await asyncio.to_thread(self.zk.get, self._node(topic_id))
        except NoNodeError:
            return 0, None, -1
        except KazooException as exc:
            raise _unavailable("producer epochs", exc) from None
        doc = json.loads(raw or b"{}")
        return int(doc.get("epoch", 0)), doc.get("holder"), stat.version

    async def grow(self, topic_id: int, epoch: int, holder: str, version: int) -> bool:
        """Record ``epoch`` if the node is still at ``version`` (-1: absent); False when
        another broker changed it since (read it again)."""
        data = json.dumps({"epoch": epoch, "holder": holder}).encode()
        try:
            return await asyncio.to_thread(self._grow, topic_id, data, version)
        except KazooException as exc:
            raise _unavailable("producer epochs", exc) from None

    def _grow(self, topic_id: int, data: bytes, version: int) -> bool:
        # the change mark names the topic: brokers watching it re-read that record
        return write_at_version(
            self.zk, self._node(topic_id), data, version, self.path, str(topic_id).encode()
        )

    async def ensure_layout(self) -> None:
        await asyncio.to_thread(self.zk.ensure_path, self.path)

    async def all(self) -> dict[int, tuple[int, str | None]]:
        """Every topic's (epoch, holder)."""
        return await asyncio.to_thread(self._read_all)

    def _read_all(self) -> dict[int, tuple[int, str | None]]:
        out: dict[int, tuple[int, str | None]] = {}
        for child, raw in read_children(self.zk, self.path).items():
            doc = json.loads(raw or b"{}")
            out[int(child)] = (int(doc.get("epoch", 0)), doc.get("holder"))
        return out

    async def drop(self, topic_id: int) -> None:
        """The topic is gone (its id is never used again)."""
        with contextlib.suppress(NoNodeError):
            await asyncio.to_thread(self.zk.delete, self._node(topic_id))
