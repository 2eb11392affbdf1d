"""Ledger metadata in ZooKeeper, changed only by versioned compare-and-set.

A ledger is the znode ``{root}/ledgers/L<10 digits>`` (a sequential node: the
digits are the ledger id, so creating the node allocates the id). Its value is
JSON: quorums, state, last entry, creation time and the ensembles, each the list
of bookies that holds entries from its first entry id on. Every change names the
version it read, so of two clients racing (a writer closing and a recoverer, or
two recoverers) exactly one wins and the other reads again.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field, replace
from enum import StrEnum

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError
from kazoo.protocol.states import ZnodeStat

from weir.errors import BadRequestError
from weir.replication.errors import (
    LeadershipLostError,
    MetadataConflictError,
    NoSuchLedgerError,
)
from weir.replication.registry import ledgers_path


class LedgerState(StrEnum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


@dataclass(frozen=True, slots=True)
class Fragment:
    """Entries from ``first_entry`` on (until the next fragment) live on ``bookies``."""

    first_entry: int
    bookies: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    ensembles: tuple[Fragment, ...]
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1  # meaningful once CLOSED; -1: the ledger is empty
    ctime_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    def __post_init__(self) -> None:
        e, wq, aq = self.ensemble_size, self.write_quorum, self.ack_quorum
        if not (e >= wq >= aq >= 1):
            raise BadRequestError(f"quorums must be E >= WQ >= AQ >= 1, got E={e} WQ={wq} AQ={aq}")
        for frag in self.ensembles:
            if len(frag.bookies) != e or len(set(frag.bookies)) != e:
                raise BadRequestError(f"an ensemble needs {e} distinct bookies: {frag.bookies}")

    def fragment_of(self, entry: int) -> Fragment:
        """The fragment (ensemble) holding ``entry``: the last one starting at or before it."""
        chosen = self.ensembles[0]
        for frag in self.ensembles:
            if frag.first_entry <= entry:
                chosen = frag
        return chosen

    def write_set(self, entry: int) -> tuple[str, ...]:
        """The WQ bookies of ``entry``: striped round-robin over its ensemble."""
        bookies = self.fragment_of(entry).bookies
        e = len(bookies)
        return tuple(bookies[(entry + i) % e] for i in range(self.write_quorum))

    def with_state(self, state: LedgerState, last_entry_id: int | None = None) -> LedgerMetadata:
        last = self.last_entry_id if last_entry_id is None else last_entry_id
        return replace(self, state=state, last_entry_id=last)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "ensemble_size": self.ensemble_size,
                "write_quorum": self.write_quorum,
                "ack_quorum": self.ack_quorum,
                "state": self.state.value,
                "last_entry_id": self.last_entry_id,
                "ctime_ms": self.ctime_ms,
                "ensembles": [[f.first_entry, list(f.bookies)] for f in self.ensembles],
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> LedgerMetadata:
        d = json.loads(data)
        return cls(
            ensemble_size=d["ensemble_size"],
            write_quorum=d["write_quorum"],
            ack_quorum=d["ack_quorum"],
            state=LedgerState(d["state"]),
            last_entry_id=d["last_entry_id"],
            ctime_ms=d["ctime_ms"],
            ensembles=tuple(Fragment(first, tuple(bs)) for first, bs in d["ensembles"]),
        )


def ledger_path(root: str, ledger_id: int) -> str:
    return f"{ledgers_path(root)}/L{ledger_id:010d}"


class MetadataStore:
    """Ledger metadata in ZooKeeper (kazoo's blocking calls, run off the event loop)."""

    def __init__(self, zk: KazooClient, root: str) -> None:
        self.zk = zk
        self.root = root

    async def create(self, md: LedgerMetadata) -> tuple[int, int]:
        """Store a new ledger; returns (ledger id, version)."""
        path = await asyncio.to_thread(
            self.zk.create,
            f"{ledgers_path(self.root)}/L",
            md.encode(),
            sequence=True,
            makepath=True,
        )
        return int(path.rsplit("L", 1)[1]), 0

    async def read(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        try:
            data, stat = await asyncio.to_thread(self.zk.get, ledger_path(self.root, ledger_id))
        except NoNodeError:
            raise NoSuchLedgerError(f"no ledger {ledger_id}") from None
        return LedgerMetadata.decode(data), int(stat.version)

    async def write(
        self, ledger_id: int, md: LedgerMetadata, version: int, *, guard: str | None = None
    ) -> int:
        """Compare-and-set: store ``md`` if the ledger is still at ``version``; the new version.

        ``guard``: a znode that must still exist (an elected auditor's lock node), checked in
        the same ZooKeeper transaction, so a leader whose session ended records nothing
        (`LeadershipLostError`)."""
        if guard is not None:
            return await self._guarded_write(ledger_id, md, version, guard)
        try:
            stat = await asyncio.to_thread(
                self.zk.set, ledger_path(self.root, ledger_id), md.encode(), version=version
            )
        except BadVersionError:
            raise MetadataConflictError(
                f"ledger {ledger_id}: metadata changed since version {version}"
            ) from None
        except NoNodeError:
            raise NoSuchLedgerError(f"no ledger {ledger_id}") from None
        return int(stat.version)

    async def _guarded_write(
        self, ledger_id: int, md: LedgerMetadata, version: int, guard: str
    ) -> int:
        def commit() -> list[object]:
            t = self.zk.transaction()
            t.check(guard, 0)  # a lock node is never written: version 0 while it exists
            t.set_data(ledger_path(self.root, ledger_id), md.encode(), version=version)
            return list(t.commit())

        guard_result, set_result = await asyncio.to_thread(commit)
        if isinstance(guard_result, Exception):
            raise LeadershipLostError(
                f"ledger {ledger_id}: not recorded, {guard} is gone (leadership lost)"
            )
        if isinstance(set_result, BadVersionError):
            raise MetadataConflictError(
                f"ledger {ledger_id}: metadata changed since version {version}"
            )
        if isinstance(set_result, NoNodeError):
            raise NoSuchLedgerError(f"no ledger {ledger_id}")
        if isinstance(set_result, Exception):
            raise set_result
        assert isinstance(set_result, ZnodeStat)
        return int(set_result.version)

    async def delete(self, ledger_id: int) -> None:
        try:
            await asyncio.to_thread(self.zk.delete, ledger_path(self.root, ledger_id))
        except NoNodeError:
            raise NoSuchLedgerError(f"no ledger {ledger_id}") from None

    async def list(self) -> list[int]:
        try:
            children = await asyncio.to_thread(self.zk.get_children, ledgers_path(self.root))
        except NoNodeError:
            return []
        return sorted(int(c[1:]) for c in children if c.startswith("L"))
