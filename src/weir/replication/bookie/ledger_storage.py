"""Where a bookie keeps entries: keyed (ledger id, entry id), durable before the ack.

BookKeeper writes each entry twice, to a journal (fsync'd, for the ack) and to
ledger storage (flushed later at checkpoints). On LMDB one copy-on-write
transaction is both: the storage layer's `GroupCommitter` takes every pending
add of every ledger, applies them in one transaction and fsyncs once, exactly the
journal's group commit, and what it committed is already indexed for reads. A
kill -9 leaves the last committed transaction, so "replay" on start is reading
back each ledger's state (fenced, LAC) from the ``ledgers`` table.

Jobs commit in submission order, which the fencing rule relies on: an add
submitted before a fence is durable no later than the fence.
"""

from __future__ import annotations

import os
import struct
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from weir.storage import kv
from weir.storage.committer import CommitObserver, GroupCommitter
from weir.storage.kv import LmdbKV, Usage

ENTRIES = "entries"
LEDGERS = "ledgers"
TABLES = (ENTRIES, LEDGERS)

_ENTRY_KEY = struct.Struct(">QQ")
_LEDGER_KEY = struct.Struct(">Q")
_LEDGER_STATE = struct.Struct(">Bq")  # fenced, LAC


def entry_key(ledger: int, entry: int) -> bytes:
    return _ENTRY_KEY.pack(ledger, entry)


def _ledger_end(ledger: int) -> bytes:
    """The first key after every entry of ``ledger``."""
    return _LEDGER_KEY.pack(ledger + 1) if ledger < 2**64 - 1 else b"\xff" * 17


@dataclass(frozen=True, slots=True)
class StoredLedger:
    """What a bookie knows durably about a ledger."""

    fenced: bool
    lac: int  # the highest LAC a writer has piggybacked on an add; -1: none


class LedgerStorage(Protocol):
    """Entries and per-ledger state of one bookie. Writes resolve their future once durable."""

    def add_entry(
        self, ledger: int, entry: int, payload: bytes, state: StoredLedger
    ) -> Future[None]:
        """Store the entry and the ledger's state after it, in one durable commit."""
        ...

    def put_state(self, ledger: int, state: StoredLedger) -> Future[None]: ...

    def read_entry(self, ledger: int, entry: int) -> bytes | None: ...

    def ledgers(self) -> dict[int, StoredLedger]:
        """Every ledger this bookie has stored something for (the replay on start)."""
        ...

    def usage(self) -> Usage: ...

    def delete_ledgers(self, ledgers: list[int]) -> Future[None]:
        """Remove every entry and the state of these ledgers, in one durable commit."""
        ...

    def close(self) -> None: ...


class LmdbLedgerStorage:
    """`LedgerStorage` on the storage layer's LMDB KV and its one group committer."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        sync: bool = True,
        observer: CommitObserver | None = None,
    ) -> None:
        """``observer``: told (jobs, bytes, seconds) of each group commit (metrics)."""
        self.kv = LmdbKV(path, TABLES, sync=sync)
        self.committer = GroupCommitter(self.kv, observer=observer, name="weir-bookie-journal")

    def add_entry(
        self, ledger: int, entry: int, payload: bytes, state: StoredLedger
    ) -> Future[None]:
        ops = [
            kv.put(ENTRIES, entry_key(ledger, entry), payload),
            kv.put(LEDGERS, _LEDGER_KEY.pack(ledger), _LEDGER_STATE.pack(state.fenced, state.lac)),
        ]
        return self.committer.submit(ops, len(payload) + 64)

    def put_state(self, ledger: int, state: StoredLedger) -> Future[None]:
        value = _LEDGER_STATE.pack(state.fenced, state.lac)
        return self.committer.submit([kv.put(LEDGERS, _LEDGER_KEY.pack(ledger), value)], 32)

    def read_entry(self, ledger: int, entry: int) -> bytes | None:
        return self.kv.get(ENTRIES, entry_key(ledger, entry))

    def ledgers(self) -> dict[int, StoredLedger]:
        out: dict[int, StoredLedger] = {}
        for key, value in self.kv.scan(LEDGERS):
            (ledger,) = _LEDGER_KEY.unpack(key)
            fenced, lac = _LEDGER_STATE.unpack(value)
            out[ledger] = StoredLedger(bool(fenced), lac)
        return out

    def usage(self) -> Usage:
        return self.kv.usage()

    def delete_ledgers(self, ledgers: list[int]) -> Future[None]:
        ops = []
        for lid in ledgers:
            ops.append(kv.delete_range(ENTRIES, entry_key(lid, 0), _ledger_end(lid)))
            ops.append(kv.delete(LEDGERS, _LEDGER_KEY.pack(lid)))
        return self.committer.submit(ops, 64 * len(ops))

    def entry_ids(self, ledger: int) -> list[int]:
        """The entries stored for a ledger, in order (for tests and tools)."""
        keys = self.kv.scan(ENTRIES, entry_key(ledger, 0), _ledger_end(ledger))
        return [_ENTRY_KEY.unpack(k)[1] for k, _ in keys]

    def close(self) -> None:
        self.committer.close()
        self.kv.close()
