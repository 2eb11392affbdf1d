"""Handles on a ledger: `LedgerHandle` writes (one writer per ledger), `ReadHandle` reads.

The writer keeps its adds in entry order: an add completes only after AQ bookies
of its write set acknowledged it AND every earlier add completed, so the last
add confirmed (LAC) only ever covers a gap-free prefix. Each add carries the
current LAC to the bookies (piggybacked), which is how readers and recoverers
learn it.

Fencing: once any bookie answers FENCED (a recoverer took the ledger over), the
handle fails every add in flight and every later one with `LedgerFencedError`;
nothing is acknowledged after that answer, and a recoverer closes the ledger at
an entry >= everything this writer acknowledged before.
"""

from __future__ import annotations

import asyncio
from collections import deque

from weir.errors import BadRequestError, WeirError
from weir.replication.errors import (
    BookieUnavailableError,
    LedgerClosedError,
    LedgerFencedError,
    MetadataConflictError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    ReadBeyondLastConfirmedError,
)
from weir.replication.ledger.add_op import PendingAddOp
from weir.replication.ledger.bookie_client import BookiePool
from weir.replication.ledger.metadata import LedgerMetadata, LedgerState, MetadataStore
from weir.replication.protocol import MAX_ENTRY


class ReadHandle:
    """Reads entries up to the last add confirmed, from any bookie of each entry's write set."""

    def __init__(
        self, ledger_id: int, metadata: LedgerMetadata, pool: BookiePool, store: MetadataStore
    ) -> None:
        self.ledger_id = ledger_id
        self.metadata = metadata
        self.pool = pool
        self.store = store
        self._lac = metadata.last_entry_id if metadata.state == LedgerState.CLOSED else -1

    @property
    def closed(self) -> bool:
        return self.metadata.state == LedgerState.CLOSED

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry known readable (the last entry of a closed ledger)."""
        return self._lac

    async def read_lac(self) -> int:
        """Ask the bookies of the current ensemble for the LAC writers piggybacked; the max."""
        if self.closed:
            return self._lac
        bookies = self.metadata.ensembles[-1].bookies
        results = await asyncio.gather(
            *(self.pool.get(b).read_lac(self.ledger_id) for b in bookies), return_exceptions=True
        )
        lacs = [r for r in results if isinstance(r, int)]
        if not lacs and not any(isinstance(r, NoSuchLedgerError) for r in results):
            raise BookieUnavailableError(f"ledger {self.ledger_id}: no bookie answered read LAC")
        self._lac = max([self._lac, *lacs])
        return self._lac

    async def read(self, entry: int) -> bytes:
        if entry < 0:
            raise ReadBeyondLastConfirmedError(f"entry ids start at 0, not {entry}")
        if entry > self._lac and not self.closed:
            await self.read_lac()
        if entry > self._lac:
            raise ReadBeyondLastConfirmedError(
                f"entry {entry} of ledger {self.ledger_id} is past the last add confirmed "
                f"({self._lac}{', closed' if self.closed else ''})"
            )
        errors: list[WeirError] = []
        for bookie in self.metadata.write_set(entry):
            try:
                return (await self.pool.get(bookie).read(self.ledger_id, entry)).payload
            except (NoSuchEntryError, NoSuchLedgerError, BookieUnavailableError) as exc:
                errors.append(exc)
        if all(isinstance(e, NoSuchEntryError | NoSuchLedgerError) for e in errors):
            raise NoSuchEntryError(
                f"entry {entry} of ledger {self.ledger_id} is on none of its bookies"
            )
        raise BookieUnavailableError(
            f"entry {entry} of ledger {self.ledger_id}: {'; '.join(e.message for e in errors)}"
        )

    async def read_range(self, first: int, last: int) -> list[bytes]:
        return [await self.read(e) for e in range(first, last + 1)]


class LedgerHandle(ReadHandle):
    """The writer of an open ledger."""

    def __init__(
        self,
        ledger_id: int,
        metadata: LedgerMetadata,
        version: int,
        pool: BookiePool,
        store: MetadataStore,
    ) -> None:
        super().__init__(ledger_id, metadata, pool, store)
        self.version = version
        self._next_entry = 0
        self._pending: deque[PendingAddOp] = deque()
        self._error: WeirError | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def add(self, payload: bytes) -> int:
        """Append an entry; returns its id once AQ bookies have it durably (and all before it)."""
        return await self.add_async(payload)

    def add_async(self, payload: bytes) -> asyncio.Future[int]:
        """Start an add without waiting: adds pipeline and complete in entry order."""
        if self._error is not None:
            raise self._error
        if self.closed:
            raise LedgerClosedError(f"ledger {self.ledger_id} is closed")
        if len(payload) > MAX_ENTRY:
            raise BadRequestError(f"entry of {len(payload)} bytes is over the limit of {MAX_ENTRY}")
        entry = self._next_entry
        self._next_entry += 1
        op = PendingAddOp(
            self.ledger_id,
            entry,
            bytes(payload),
            self.metadata.write_set(entry),
            self.metadata.ack_quorum,
        )
        self._pending.append(op)
        for bookie in op.write_set:
            task = asyncio.create_task(self._send(op, bookie))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return op.future

    async def _send(self, op: PendingAddOp, bookie: str) -> None:
        await op.send(self.pool, bookie, self._lac)
        fenced = op.fenced
        if fenced is not None:
            self._fail(
                LedgerFencedError(
                    f"ledger {self.ledger_id} was fenced by a recoverer ({fenced.message})"
                )
            )
        elif op.quorum_lost:
            reasons = "; ".join(e.message for e in op.failed.values())
            self._fail(
                NotEnoughBookiesError(
                    f"entry {op.entry} of ledger {self.ledger_id} cannot reach {op.ack_quorum} acks: {reasons}"
                )
            )
        self._complete_in_order()

    def _complete_in_order(self) -> None:
        if self._error is not None:
            return
        while self._pending and self._pending[0].quorum_reached:
            op = self._pending.popleft()
            self._lac = op.entry
            if not op.future.done():
                op.future.set_result(op.entry)

    def _fail(self, error: WeirError) -> None:
        """The handle is done for: every add not yet completed fails, no later one is accepted."""
        if self._error is not None:
            return
        self._error = error
        while self._pending:
            op = self._pending.popleft()
            if not op.future.done():
                op.future.set_exception(error)

    async def close(self) -> None:
        """Wait for the adds in flight, then record the last entry in the metadata: CLOSED."""
        pending = [op.future for op in self._pending]
        await asyncio.gather(*pending, return_exceptions=True)
        if self._error is not None:
            raise self._error
        if self.closed:
            return
        closed = self.metadata.with_state(LedgerState.CLOSED, self._lac)
        while True:
            try:
                self.version = await self.store.write(self.ledger_id, closed, self.version)
                self.metadata = closed
                return
            except MetadataConflictError:
                current, version = await self.store.read(self.ledger_id)
                if current.state == LedgerState.CLOSED and current.last_entry_id == self._lac:
                    self.metadata, self.version = current, version
                    return
                if current.state != LedgerState.OPEN:
                    self._error = LedgerFencedError(
                        f"ledger {self.ledger_id} was taken over ({current.state.value}, "
                        f"last entry {current.last_entry_id}) before this writer closed it"
                    )
                    raise self._error from None
                self.version = version
