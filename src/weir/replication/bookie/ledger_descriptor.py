"""One ledger as a bookie sees it: fenced or not, the LAC writers told it, the fence in flight.

BookKeeper's `LedgerDescriptor`: every add, read and fence of a ledger goes
through it, so the fencing rule lives in one place. A fence takes effect at once
in memory (no add is accepted after it, except a recoverer's) and is answered
only once durable, after every add accepted before it (the committer is FIFO).
"""

from __future__ import annotations

from concurrent.futures import Future

from weir.replication.bookie.ledger_storage import LedgerStorage, StoredLedger
from weir.replication.errors import LedgerFencedError


class LedgerDescriptor:
    __slots__ = ("_fence", "fenced", "lac", "ledger", "storage")

    def __init__(self, storage: LedgerStorage, ledger: int, stored: StoredLedger | None) -> None:
        self.storage = storage
        self.ledger = ledger
        self.fenced = stored.fenced if stored else False
        self.lac = stored.lac if stored else -1
        self._fence: Future[None] | None = None
        if self.fenced:
            self._fence = Future()
            self._fence.set_result(None)

    def add(self, entry: int, payload: bytes, lac: int, *, recovery: bool) -> Future[None]:
        """Journal the entry; refused on a fenced ledger unless the add is a recoverer's."""
        if self.fenced and not recovery:
            raise LedgerFencedError(f"ledger {self.ledger} is fenced")
        self.lac = max(self.lac, lac)
        return self.storage.add_entry(
            self.ledger, entry, payload, StoredLedger(self.fenced, self.lac)
        )

    def fence(self) -> Future[None]:
        """Fence now; the future resolves once the fence (and every add before it) is durable."""
        failed = self._fence is not None and self._fence.done() and self._fence.exception()
        if self._fence is None or failed:
            self.fenced = True
            self._fence = self.storage.put_state(self.ledger, StoredLedger(True, self.lac))
        return self._fence

    def read(self, entry: int) -> bytes | None:
        return self.storage.read_entry(self.ledger, entry)
