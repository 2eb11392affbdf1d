"""Recovery open: take a ledger from a writer that may be dead, and close it safely.

BookKeeper's `LedgerRecoveryOp`, in three steps:

1. Fence: READ_LAC with the fence flag to every bookie of the last ensemble; go
   on once Ensemble Coverage answered, EC = E - AQ + 1. The bookies not fenced
   are then fewer than AQ, so the old writer cannot get another entry
   acknowledged. The highest LAC among the answers is where reading starts.
2. Recovery reads from LAC + 1 on, each to the entry's write set with the fence
   flag: an entry found on any bookie is re-added (recovery adds pass the fence)
   to its write set until AQ have it; an entry that Quorum Coverage (QC = WQ -
   AQ + 1) bookies say they do not have cannot have been acknowledged, and ends
   the ledger. Neither (bookies not answering) is an error to retry later.
3. Close: compare-and-set the metadata to CLOSED with the last entry found. Of
   two recoverers, or a recoverer and the writer closing, one CAS wins; the
   other reads the result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from weir.errors import InternalError
from weir.replication.errors import (
    MetadataConflictError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
)
from weir.replication.ledger.add_op import PendingAddOp
from weir.replication.ledger.bookie_client import BookiePool
from weir.replication.ledger.metadata import LedgerMetadata, LedgerState, MetadataStore
from weir.replication.protocol import ReadResponse

T = TypeVar("T")


async def _until(
    calls: Sequence[Awaitable[T]],
    enough: Callable[[list[T | BaseException]], bool],
    *,
    background: set[asyncio.Future[Any]] | None = None,
) -> list[T | BaseException]:
    """Run ``calls`` together and return the answers so far (results or errors) as soon as
    ``enough`` says they decide, or once all have answered: a slow bookie does not hold
    recovery up when the others already decide (the seed: no need to wait for every
    bookie). The calls still running are cancelled, or left to finish in ``background``."""
    pending = {asyncio.ensure_future(c) for c in calls}
    answers: list[T | BaseException] = []
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            exc = task.exception()
            answers.append(exc if exc is not None else task.result())
        if enough(answers):
            break
    for task in pending:
        if background is None:
            task.cancel()
        else:
            background.add(task)
            task.add_done_callback(background.discard)
    return answers


class LedgerRecoveryOp:
    def __init__(self, ledger_id: int, pool: BookiePool, store: MetadataStore) -> None:
        self.ledger_id = ledger_id
        self.pool = pool
        self.store = store
        self.recovered_entries = 0  # entries past the fenced LAC that were found and re-added
        self._background: set[asyncio.Future[Any]] = set()

    async def run(self) -> tuple[LedgerMetadata, int]:
        """Recover and close; the closed metadata and its version."""
        md, version = await self.store.read(self.ledger_id)
        while md.state == LedgerState.OPEN:
            try:
                version = await self.store.write(
                    self.ledger_id, md.with_state(LedgerState.IN_RECOVERY), version
                )
                md = md.with_state(LedgerState.IN_RECOVERY)
            except MetadataConflictError:
                md, version = await self.store.read(self.ledger_id)
        if md.state == LedgerState.CLOSED:
            return md, version
        lac = await self._fence(md)
        last = await self._recover_tail(md, lac)
        return await self._close(md, version, last)

    async def _fence(self, md: LedgerMetadata) -> int:
        bookies = md.ensembles[-1].bookies
        coverage = md.ensemble_size - md.ack_quorum + 1
        results = await _until(
            [self.pool.get(b).read_lac(self.ledger_id, fence=True) for b in bookies],
            lambda rs: sum(isinstance(r, int) for r in rs) >= coverage,
        )
        lacs = [r for r in results if isinstance(r, int)]
        if len(lacs) < coverage:
            errors = "; ".join(str(r) for r in results if isinstance(r, BaseException))
            raise NotEnoughBookiesError(
                f"ledger {self.ledger_id}: fenced on {len(lacs)} bookies, recovery needs "
                f"{coverage} (E - AQ + 1): {errors}"
            )
        return max(lacs)

    async def _recover_tail(self, md: LedgerMetadata, lac: int) -> int:
        entry = lac + 1
        coverage = md.write_quorum - md.ack_quorum + 1
        while True:
            write_set = md.write_set(entry)
            results = await _until(
                [self.pool.get(b).read(self.ledger_id, entry, fence=True) for b in write_set],
                lambda rs: (
                    any(isinstance(r, ReadResponse) for r in rs)
                    or sum(isinstance(r, NoSuchEntryError | NoSuchLedgerError) for r in rs)
                    >= coverage
                ),
            )
            found = next((r for r in results if isinstance(r, ReadResponse)), None)
            if found is None:
                missing = sum(isinstance(r, NoSuchEntryError | NoSuchLedgerError) for r in results)
                if missing >= coverage:
                    return entry - 1
                errors = "; ".join(str(r) for r in results if isinstance(r, BaseException))
                raise NotEnoughBookiesError(
                    f"ledger {self.ledger_id}: cannot tell whether entry {entry} was "
                    f"acknowledged ({missing} of {coverage} bookies needed say it is absent): {errors}"
                )
            await self._re_add(md, entry, found.payload, write_set)
            self.recovered_entries += 1
            entry += 1

    async def _re_add(
        self, md: LedgerMetadata, entry: int, payload: bytes, write_set: tuple[str, ...]
    ) -> None:
        op = PendingAddOp(self.ledger_id, entry, payload, write_set, md.ack_quorum)
        sends = [op.send(self.pool, b, entry - 1, recovery=True) for b in write_set]
        # on once AQ have it; the slower copies go on in the background
        await _until(sends, lambda _: op.quorum_reached, background=self._background)
        if not op.quorum_reached:
            reasons = "; ".join(e.message for e in op.failed.values())
            raise NotEnoughBookiesError(
                f"ledger {self.ledger_id}: re-replicating entry {entry} reached "
                f"{len(op.acked)} of {md.ack_quorum} acks: {reasons}"
            )

    async def _close(
        self, md: LedgerMetadata, version: int, last: int
    ) -> tuple[LedgerMetadata, int]:
        closed = md.with_state(LedgerState.CLOSED, last)
        while True:
            try:
                return closed, await self.store.write(self.ledger_id, closed, version)
            except MetadataConflictError:
                current, version = await self.store.read(self.ledger_id)
                if current.state == LedgerState.CLOSED:
                    if current.last_entry_id != last:
                        raise InternalError(
                            f"ledger {self.ledger_id}: another recoverer closed it at "
                            f"{current.last_entry_id}, this one found {last}"
                        ) from None
                    return current, version
