"""The cluster's records in ZooKeeper: partitions, their assignment, owners and generations.

Under ``{root}/cluster``:

- ``brokers/{id}``: ephemeral, one per live broker (JSON: its endpoints).
- ``leader``: ephemeral, the broker running placement.
- ``partitions/{key}``: persistent, one per partition (``key`` is
  ``tenant/namespace/topic/partition``, quoted): JSON ``broker`` (where placement
  wants it), ``avoid`` (the broker an unload moves it off), ``generation`` (of
  the last claim).
- ``owners/{key}``: ephemeral, the claim: JSON ``broker`` and ``generation``.
  It lives as long as the owner's ZooKeeper session.
- ``epoch``: bumped by every assignment change, so brokers watch one node.

A claim is one ZooKeeper transaction: the partition node's generation + 1
(compare-and-set on its version) and the owner node created. Two brokers
claiming at once: one transaction wins; every claim has a higher generation than
the one before (the seed's "tablet generation").
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
)


def cluster_path(root: str) -> str:
    return f"{root}/cluster"


def brokers_path(root: str) -> str:
    return f"{cluster_path(root)}/brokers"


def leader_path(root: str) -> str:
    return f"{cluster_path(root)}/leader"


def partitions_path(root: str) -> str:
    return f"{cluster_path(root)}/partitions"


def owners_path(root: str) -> str:
    return f"{cluster_path(root)}/owners"


def epoch_path(root: str) -> str:
    return f"{cluster_path(root)}/epoch"


def partition_key(topic: str, partition: int) -> str:
    """The key of a partition in the cluster: ``tenant/namespace/topic/partition``."""
    return f"{topic}/{partition}"


def split_key(key: str) -> tuple[str, int]:
    topic, _, p = key.rpartition("/")
    return topic, int(p)


def _node(key: str) -> str:
    return quote(key, safe="")


@dataclass(frozen=True, slots=True)
class Assignment:
    """A partition node: where placement wants it, and its claims so far."""

    broker: str | None = None
    avoid: str | None = None
    generation: int = 0
    pinned: bool = False  # placed on ``broker`` by an admin: not moved for balance

    def encode(self) -> bytes:
        return json.dumps(
            {
                "broker": self.broker,
                "avoid": self.avoid,
                "generation": self.generation,
                "pinned": self.pinned,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Assignment:
        d: dict[str, Any] = json.loads(data or b"{}")
        return cls(
            d.get("broker"),
            d.get("avoid"),
            int(d.get("generation", 0)),
            bool(d.get("pinned", False)),
        )


@dataclass(frozen=True, slots=True)
class Owner:
    broker: str
    generation: int

    def encode(self) -> bytes:
        return json.dumps({"broker": self.broker, "generation": self.generation}).encode()

    @classmethod
    def decode(cls, data: bytes) -> Owner:
        d = json.loads(data)
        return cls(str(d["broker"]), int(d["generation"]))


class ClusterRecords:
    """Reads and changes of the records above (kazoo's blocking calls, off the event loop)."""

    def __init__(self, zk: KazooClient, root: str) -> None:
        self.zk = zk
        self.root = root

    async def ensure_layout(self) -> None:
        for path in (brokers_path, partitions_path, owners_path):
            await asyncio.to_thread(self.zk.ensure_path, path(self.root))
        with contextlib.suppress(NodeExistsError):
            await asyncio.to_thread(self.zk.create, epoch_path(self.root), b"0")

    # ------------------------------------------------------------------ partitions

    async def add_partitions(self, keys: list[str]) -> None:
        """Record partitions (already recorded ones are left as they are)."""
        for key in keys:
            with contextlib.suppress(NodeExistsError):
                await asyncio.to_thread(
                    self.zk.create,
                    f"{partitions_path(self.root)}/{_node(key)}",
                    Assignment().encode(),
                    makepath=True,
                )
        await self.bump_epoch()

    async def remove_partitions(self, keys: list[str]) -> None:
        for key in keys:
            with contextlib.suppress(NoNodeError):
                await asyncio.to_thread(
                    self.zk.delete, f"{partitions_path(self.root)}/{_node(key)}"
                )
        await self.bump_epoch()

    async def partition_keys(self) -> list[str]:
        try:
            children = await asyncio.to_thread(self.zk.get_children, partitions_path(self.root))
        except NoNodeError:
            return []
        return sorted(unquote(c) for c in children)

    async def assignment(self, key: str) -> tuple[Assignment, int] | None:
        try:
            data, stat = await asyncio.to_thread(
                self.zk.get, f"{partitions_path(self.root)}/{_node(key)}"
            )
        except NoNodeError:
            return None
        return Assignment.decode(data), int(stat.version)

    async def assignments(self) -> dict[str, tuple[Assignment, int]]:
        out: dict[str, tuple[Assignment, int]] = {}
        for key in await self.partition_keys():
            got = await self.assignment(key)
            if got is not None:
                out[key] = got
        return out

    async def set_assignment(self, key: str, assignment: Assignment, version: int) -> bool:
        """Compare-and-set; False if the node changed since ``version`` (or is gone)."""
        try:
            await asyncio.to_thread(
                self.zk.set,
                f"{partitions_path(self.root)}/{_node(key)}",
                assignment.encode(),
                version=version,
            )
        except (BadVersionError, NoNodeError):
            return False
        return True

    async def bump_epoch(self) -> None:
        """Every broker watches this node: a change makes each reconcile its partitions."""
        await asyncio.to_thread(self.zk.set, epoch_path(self.root), b"changed")

    # ------------------------------------------------------------------ owners

    async def owner(self, key: str) -> tuple[Owner, int] | None:
        """The claim on ``key`` and the ZooKeeper session holding it."""
        try:
            data, stat = await asyncio.to_thread(
                self.zk.get, f"{owners_path(self.root)}/{_node(key)}"
            )
        except NoNodeError:
            return None
        return Owner.decode(data), int(stat.ephemeralOwner)

    async def owners(self) -> dict[str, Owner]:
        try:
            children = await asyncio.to_thread(self.zk.get_children, owners_path(self.root))
        except NoNodeError:
            return {}
        out: dict[str, Owner] = {}
        for child in children:
            got = await self.owner(unquote(child))
            if got is not None:
                out[unquote(child)] = got[0]
        return out

    async def claim(self, key: str, broker: str) -> int | None:
        """Claim ``key`` for ``broker`` (this session): its new generation, or None when
        another claim holds it or placement no longer assigns it to ``broker``."""
        while True:
            got = await self.assignment(key)
            if got is None:
                return None
            assignment, version = got
            if assignment.broker != broker:
                return None
            generation = assignment.generation + 1
            tx = self.zk.transaction()
            tx.set_data(
                f"{partitions_path(self.root)}/{_node(key)}",
                dataclasses.replace(assignment, generation=generation).encode(),
                version=version,
            )
            tx.create(
                f"{owners_path(self.root)}/{_node(key)}",
                Owner(broker, generation).encode(),
                ephemeral=True,
            )
            results = await asyncio.to_thread(tx.commit)
            if not any(isinstance(r, Exception) for r in results):
                return generation
            if isinstance(results[1], NodeExistsError) or isinstance(results[0], NoNodeError):
                return None  # claimed by another (or the partition is gone)
            if isinstance(results[0], BadVersionError):
                continue  # the assignment moved meanwhile: read it again
            raise next(r for r in results if not isinstance(r, RolledBackError))

    async def release(self, key: str, generation: int) -> None:
        """Drop this broker's claim of ``generation`` (a newer claim is left alone)."""
        path = f"{owners_path(self.root)}/{_node(key)}"
        try:
            data, stat = await asyncio.to_thread(self.zk.get, path)
            if Owner.decode(data).generation == generation:
                await asyncio.to_thread(self.zk.delete, path, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass
