"""Handles on a ledger: `LedgerHandle` writes (one writer per ledger), `ReadHandle` reads.

The writer keeps its adds in entry order: an add completes only after AQ bookies
of its write set acknowledged it AND every earlier add completed, so the last
add confirmed (LAC) only ever covers a gap-free prefix. Each add carries the
current LAC to the bookies (piggybacked), which is how readers and recoverers
learn it.

Ensemble change: when a bookie of the current ensemble fails (unreachable,
read-only, overloaded), the writer replaces it with an available bookie outside
the ensemble (on a rack the ensemble's other bookies do not use, when one is
free: `placement.choose_replacement`) and records a new fragment starting at LAC + 1 in the metadata
(compare-and-set), then sends every add in flight to its new write set and
forgets the failed bookie's acks. Completions wait while the change is under
way, so no entry is acknowledged on a copy the metadata does not point at. No
replacement available: the writer goes on with the bookies it has while each
entry still reaches AQ.

Fencing: once any bookie answers FENCED (a recoverer took the ledger over), the
handle fails every add in flight and every later one with `LedgerFencedError`;
nothing is acknowledged after that answer, and a recoverer closes the ledger at
an entry >= everything this writer acknowledged before.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import replace

from weir.errors import BadRequestError, WeirError
from weir.replication.errors import (
    BookieOverloadedError,
    BookieReadOnlyError,
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
from weir.replication.ledger.metadata import Fragment, LedgerMetadata, LedgerState, MetadataStore
from weir.replication.ledger.placement import BookieView, choose_replacement
from weir.replication.protocol import MAX_ENTRY

# failures that make the writer replace the bookie (others: the entry fails)
_REPLACEABLE = (BookieUnavailableError, BookieReadOnlyError, BookieOverloadedError)


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

    async def wait_lac(self, after: int, timeout: float) -> int:
        """Wait until the LAC passes ``after`` (a tailing reader's long poll), at most
        ``timeout`` seconds; the LAC then known (``<= after`` on timeout). Each bookie of the
        current ensemble holds the request until an add carries a higher LAC."""
        if self.closed or self._lac > after:
            return self._lac
        bookies = self.metadata.ensembles[-1].bookies
        polls = {
            asyncio.ensure_future(self.pool.get(b).wait_lac(self.ledger_id, after, timeout))
            for b in bookies
        }
        try:
            while polls:
                done, polls = await asyncio.wait(polls, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if not task.cancelled() and task.exception() is None:
                        self._lac = max(self._lac, task.result())
                if self._lac > after:
                    break
        finally:
            for task in polls:
                task.cancel()
        return self._lac

    async def read(self, entry: int) -> bytes:
        try:
            return await self._read(entry)
        except (NoSuchEntryError, BookieUnavailableError):
            if self.closed:
                raise
        # An open ledger's writer may have changed its ensemble since we read the metadata.
        self.metadata, _ = await self.store.read(self.ledger_id)
        if self.closed:
            self._lac = self.metadata.last_entry_id
        return await self._read(entry)

    async def _read(self, entry: int) -> bytes:
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
        bookie_view: Callable[[], Awaitable[BookieView]] | None = None,
    ) -> None:
        super().__init__(ledger_id, metadata, pool, store)
        self.version = version
        self._next_entry = 0
        self._pending: deque[PendingAddOp] = deque()
        self._error: WeirError | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._bookie_view = bookie_view  # None: no ensemble changes
        self._change_lock = asyncio.Lock()
        self._changing = False
        self._replaced: set[str] = set()  # bookies this writer took out of its ensemble
        self._unreplaceable: set[str] = set()  # failed, and no bookie was free to replace them
        self.ensemble_changes = 0

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
            self._spawn_send(op, bookie)
        return op.future

    def _spawn_send(self, op: PendingAddOp, bookie: str) -> None:
        task = asyncio.create_task(self._send(op, bookie))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, op: PendingAddOp, bookie: str) -> None:
        await op.send(self.pool, bookie, self._lac)
        failure = op.failed.get(bookie)
        if isinstance(failure, _REPLACEABLE) and self._bookie_view is not None:
            await self._replace(bookie)
        fenced = op.fenced
        if fenced is not None:
            self._fail(
                LedgerFencedError(
                    f"ledger {self.ledger_id} was fenced by a recoverer ({fenced.message})"
                )
            )
        elif op.quorum_lost and not op.future.done():
            reasons = "; ".join(e.message for e in op.failed.values())
            self._fail(
                NotEnoughBookiesError(
                    f"entry {op.entry} of ledger {self.ledger_id} cannot reach {op.ack_quorum} acks: {reasons}"
                )
            )
        self._complete_in_order()

    async def _replace(self, failed: str) -> None:
        """Ensemble change: put an available bookie in ``failed``'s place for entries from
        LAC + 1 on, record it in the metadata, resend the adds in flight."""
        assert self._bookie_view is not None
        async with self._change_lock:
            current = self.metadata.ensembles[-1].bookies
            if self._error is not None or self.closed or failed not in current:
                return  # done for, or an earlier change already replaced it
            if failed in self._unreplaceable:
                return  # tried once: go on with the others rather than ask again per add
            self._changing = True
            try:
                try:
                    view = await self._bookie_view()
                except Exception:
                    return  # ZooKeeper unreachable: go on with the bookies we have
                replacement = choose_replacement(view, current, failed, self._replaced)
                if replacement is None:
                    self._unreplaceable.add(failed)
                    return
                ensemble = tuple(replacement if b == failed else b for b in current)
                first = self._lac + 1
                fragments = self.metadata.ensembles
                if fragments[-1].first_entry == first:
                    fragments = fragments[:-1]  # nothing confirmed in it yet: replace it
                changed = replace(self.metadata, ensembles=(*fragments, Fragment(first, ensemble)))
                try:
                    self.version = await self.store.write(self.ledger_id, changed, self.version)
                except MetadataConflictError:
                    current_md, _ = await self.store.read(self.ledger_id)
                    self._fail(
                        LedgerFencedError(
                            f"ledger {self.ledger_id} is {current_md.state.value}: "
                            "a recoverer took it over during an ensemble change"
                        )
                    )
                    return
                except Exception:
                    return  # ZooKeeper unreachable: go on with the bookies we have
                self.metadata = changed
                self._replaced.add(failed)
                self.ensemble_changes += 1
                for op in self._pending:
                    for bookie in op.retarget(self.metadata.write_set(op.entry)):
                        self._spawn_send(op, bookie)
            finally:
                self._changing = False
        self._complete_in_order()

    def _complete_in_order(self) -> None:
        if self._error is not None or self._changing:
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

    async def close(self, replicas_timeout: float = 10.0) -> None:
        """Wait for the adds in flight, then record the last entry in the metadata: CLOSED.

        Also waits (up to ``replicas_timeout`` seconds) for the bookies beyond AQ to
        answer, so that a cleanly closed ledger has its WQ copies where it can."""
        pending = [op.future for op in self._pending]
        await asyncio.gather(*pending, return_exceptions=True)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=replicas_timeout)
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
