"""One entry being added: sent to its write set, done after AQ acks (BookKeeper's `PendingAddOp`)."""

from __future__ import annotations

import asyncio

from weir.errors import WeirError
from weir.replication.errors import LedgerFencedError
from weir.replication.ledger.bookie_client import BookiePool


class PendingAddOp:
    """Owns the entry's acks and failures per bookie; the handle completes ops in entry order."""

    def __init__(
        self, ledger: int, entry: int, payload: bytes, write_set: tuple[str, ...], ack_quorum: int
    ) -> None:
        self.ledger = ledger
        self.entry = entry
        self.payload = payload
        self.write_set = write_set
        self.ack_quorum = ack_quorum
        self.acked: set[str] = set()
        self.failed: dict[str, WeirError] = {}
        self.future: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    @property
    def quorum_reached(self) -> bool:
        return len(self.acked) >= self.ack_quorum

    @property
    def quorum_lost(self) -> bool:
        """More bookies failed than WQ - AQ: this entry can no longer get AQ acks."""
        return len(self.failed) > len(self.write_set) - self.ack_quorum

    @property
    def fenced(self) -> LedgerFencedError | None:
        for exc in self.failed.values():
            if isinstance(exc, LedgerFencedError):
                return exc
        return None

    async def send(
        self, pool: BookiePool, bookie: str, lac: int, *, recovery: bool = False
    ) -> None:
        """Send to one bookie and record its answer (unless it left the write set meanwhile)."""
        try:
            await pool.get(bookie).add(
                self.ledger, self.entry, lac, self.payload, recovery=recovery
            )
        except WeirError as exc:
            if bookie in self.write_set:
                self.failed[bookie] = exc
        else:
            if bookie in self.write_set:
                self.acked.add(bookie)

    def retarget(self, write_set: tuple[str, ...]) -> list[str]:
        """After an ensemble change: forget the answers of bookies that left the write set
        (their copy is not where the metadata says the entry lives); the bookies to send to."""
        joined = [b for b in write_set if b not in self.write_set]
        self.write_set = write_set
        self.acked &= set(write_set)
        self.failed = {b: e for b, e in self.failed.items() if b in write_set}
        return joined
