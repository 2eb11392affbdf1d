"""Re-replication: copy a lost bookie's share of a closed ledger to another bookie.

BookKeeper's auto-recovery `ReplicationWorker`, for one ledger and one lost
bookie: for each fragment whose ensemble names the lost bookie, pick an
available bookie outside that ensemble (rack-aware: `placement.choose_replacement`),
copy to it every entry of the fragment whose write set held the lost bookie (read
from a surviving copy, added with the RECOVERY flag), then swap the bookies in the
metadata by compare-and-set. Each entry has WQ copies again. Copying first and recording after makes a crash half
way harmless: the metadata still names the lost bookie, and the next audit copies
again (adds are idempotent).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

from weir.errors import DataLossError, WeirError
from weir.replication.errors import MetadataConflictError, NotEnoughBookiesError
from weir.replication.ledger.bookie_client import BookiePool
from weir.replication.ledger.metadata import Fragment, LedgerMetadata, LedgerState, MetadataStore
from weir.replication.ledger.placement import BookieView, choose_replacement


class RereplicationOp:
    def __init__(
        self,
        ledger_id: int,
        lost: str,
        pool: BookiePool,
        store: MetadataStore,
        bookie_view: Callable[[], Awaitable[BookieView]],
        *,
        guard: str | None = None,
    ) -> None:
        """``guard``: the elected auditor's lock node; the metadata swap is recorded only
        while it exists (`MetadataStore.write`)."""
        self.ledger_id = ledger_id
        self.lost = lost
        self.pool = pool
        self.store = store
        self.bookie_view = bookie_view
        self.guard = guard
        self.copied = 0  # entries written to replacements

    async def run(self) -> LedgerMetadata:
        """Re-replicate until the metadata no longer names the lost bookie; the new metadata."""
        for _ in range(10):  # bounded: each round either finishes or lost a CAS race
            md, version = await self.store.read(self.ledger_id)
            if md.state != LedgerState.CLOSED:
                raise WeirError(
                    f"ledger {self.ledger_id} is {md.state.value}: only closed ledgers are "
                    "re-replicated (recover it first)"
                )
            if not any(self.lost in f.bookies for f in md.ensembles):
                return md
            fragments = list(md.ensembles)
            view = await self.bookie_view()
            for i, frag in enumerate(md.ensembles):
                if self.lost not in frag.bookies:
                    continue
                replacement = choose_replacement(view, frag.bookies, self.lost)
                if replacement is None:
                    raise NotEnoughBookiesError(
                        f"ledger {self.ledger_id}: no available bookie outside {frag.bookies} "
                        f"to take {self.lost}'s place"
                    )
                last = (
                    md.ensembles[i + 1].first_entry - 1
                    if i + 1 < len(md.ensembles)
                    else md.last_entry_id
                )
                await self._copy(md, frag, replacement, frag.first_entry, last)
                bookies = tuple(replacement if b == self.lost else b for b in frag.bookies)
                fragments[i] = Fragment(frag.first_entry, bookies)
            try:
                await self.store.write(
                    self.ledger_id,
                    replace(md, ensembles=tuple(fragments)),
                    version,
                    guard=self.guard,
                )
            except MetadataConflictError:
                continue
            return (await self.store.read(self.ledger_id))[0]
        raise MetadataConflictError(f"ledger {self.ledger_id}: metadata kept changing")

    async def _copy(
        self, md: LedgerMetadata, frag: Fragment, replacement: str, first: int, last: int
    ) -> None:
        target = self.pool.get(replacement)
        e = len(frag.bookies)
        for entry in range(first, last + 1):
            write_set = tuple(frag.bookies[(entry + k) % e] for k in range(md.write_quorum))
            if self.lost not in write_set:
                continue
            payload = None
            for source in write_set:
                if source == self.lost:
                    continue
                try:
                    payload = (await self.pool.get(source).read(self.ledger_id, entry)).payload
                    break
                except WeirError:
                    continue
            if payload is None:
                raise DataLossError(
                    f"entry {entry} of ledger {self.ledger_id} is on none of its other bookies"
                )
            await target.add(self.ledger_id, entry, entry - 1, payload, recovery=True)
            self.copied += 1
