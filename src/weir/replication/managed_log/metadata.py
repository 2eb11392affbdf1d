"""A managed log's metadata in ZooKeeper: its ledgers in order, its snapshot, its owner.

One znode per log, ``{root}/managed-logs/{quoted name}``, JSON, changed only by
compare-and-set on the znode's version (Pulsar's ManagedLedgerInfo). Every
owner change (an open) bumps ``generation``; every ledger switch, trim and
snapshot is one CAS. ``claim`` is the highest ownership-claim generation that
opened the log (broker/cluster): an opener with a lower claim is refused, so a
broker whose claim was superseded can never fence the newer owner. An owner
whose CAS fails has been replaced: someone else opened the log since it read
the version it holds.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from weir.replication.errors import MetadataConflictError


class Position(NamedTuple):
    """Where an entry lives: (ledger id, entry id). Ledger ids only grow, so positions
    order as tuples."""

    ledger: int
    entry: int


@dataclass(frozen=True, slots=True)
class LedgerInfo:
    """One ledger of the log: offsets ``[first_offset, end_offset)`` in ``entries`` entries.

    ``entries == -1``: the ledger is the owner's open one (its end is known only to
    its writer, or to whoever recovers it)."""

    ledger_id: int
    first_offset: int
    entries: int = -1
    end_offset: int = -1
    size: int = 0
    ctime_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    @property
    def is_open(self) -> bool:
        return self.entries < 0

    @property
    def last_entry(self) -> int:
        return self.entries - 1

    def closed(self, entries: int, end_offset: int, size: int) -> LedgerInfo:
        return replace(self, entries=entries, end_offset=end_offset, size=size)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.ledger_id,
            "first_offset": self.first_offset,
            "entries": self.entries,
            "end_offset": self.end_offset,
            "size": self.size,
            "ctime_ms": self.ctime_ms,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LedgerInfo:
        return cls(
            d["id"], d["first_offset"], d["entries"], d["end_offset"], d["size"], d["ctime_ms"]
        )


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """A snapshot of derived state covering every entry up to ``covers`` (inclusive),
    stored in ledger ``ledger_id`` (``size`` bytes in ``entries`` entries)."""

    ledger_id: int
    covers: Position
    size: int
    entries: int

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger": self.ledger_id,
            "covers": list(self.covers),
            "size": self.size,
            "entries": self.entries,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SnapshotInfo:
        return cls(d["ledger"], Position(*d["covers"]), d["size"], d["entries"])


@dataclass(frozen=True, slots=True)
class ManagedLogMetadata:
    generation: int = 0
    owner: str = ""
    claim: int = 0
    ledgers: tuple[LedgerInfo, ...] = ()
    snapshot: SnapshotInfo | None = None

    @property
    def end_offset(self) -> int:
        """The end of the closed ledgers (an open last ledger starts there)."""
        if not self.ledgers:
            return 0
        last = self.ledgers[-1]
        return last.first_offset if last.is_open else last.end_offset

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": 1,
                "generation": self.generation,
                "owner": self.owner,
                "claim": self.claim,
                "ledgers": [li.to_json() for li in self.ledgers],
                "snapshot": None if self.snapshot is None else self.snapshot.to_json(),
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> ManagedLogMetadata:
        d = json.loads(data)
        snap = d.get("snapshot")
        return cls(
            generation=d["generation"],
            owner=d.get("owner", ""),
            claim=int(d.get("claim", 0)),
            ledgers=tuple(LedgerInfo.from_json(x) for x in d["ledgers"]),
            snapshot=None if snap is None else SnapshotInfo.from_json(snap),
        )


def managed_logs_path(root: str) -> str:
    return f"{root}/managed-logs"


def log_path(root: str, name: str) -> str:
    return f"{managed_logs_path(root)}/{quote(name, safe='')}"


class ManagedLogStore:
    """The metadata znodes (kazoo's blocking calls run off the event loop)."""

    def __init__(self, zk: KazooClient, root: str) -> None:
        self.zk = zk
        self.root = root

    async def read_or_create(self, name: str) -> tuple[ManagedLogMetadata, int]:
        path = log_path(self.root, name)
        while True:
            try:
                data, stat = await asyncio.to_thread(self.zk.get, path)
                return ManagedLogMetadata.decode(data), int(stat.version)
            except NoNodeError:
                pass
            try:
                await asyncio.to_thread(
                    self.zk.create, path, ManagedLogMetadata().encode(), makepath=True
                )
                return ManagedLogMetadata(), 0
            except NodeExistsError:
                continue  # created by a racing opener: read theirs

    async def read(self, name: str) -> tuple[ManagedLogMetadata, int] | None:
        try:
            data, stat = await asyncio.to_thread(self.zk.get, log_path(self.root, name))
        except NoNodeError:
            return None
        return ManagedLogMetadata.decode(data), int(stat.version)

    async def write(self, name: str, md: ManagedLogMetadata, version: int) -> int:
        """Compare-and-set; the new version. MetadataConflictError: changed since ``version``."""
        try:
            stat = await asyncio.to_thread(
                self.zk.set, log_path(self.root, name), md.encode(), version=version
            )
        except (BadVersionError, NoNodeError):
            raise MetadataConflictError(
                f"managed log {name!r}: metadata changed since version {version}"
            ) from None
        return int(stat.version)

    async def delete(self, name: str, version: int = -1) -> None:
        try:
            await asyncio.to_thread(self.zk.delete, log_path(self.root, name), version=version)
        except BadVersionError:
            raise MetadataConflictError(f"managed log {name!r} changed: not deleted") from None
        except NoNodeError:
            pass

    async def list(self) -> list[str]:
        try:
            children = await asyncio.to_thread(self.zk.get_children, managed_logs_path(self.root))
        except NoNodeError:
            return []
        return sorted(unquote(c) for c in children)
