"""Opening a managed log: take it over from whoever owned it before.

1. Read the metadata (create it for a new log). With an ownership claim, refuse
   (StaleClaimError) when the log was opened under a newer claim, before fencing
   anything: a broker whose claim was superseded must not fence the new owner.
2. If the last ledger is open, recover it (docs/replication.md: fence its
   bookies, read forward, close it at the last entry that could have been
   acknowledged). From the fence on, the previous owner cannot get another
   append acknowledged. Its end offset and size come from its last entry's
   header; an empty one is dropped from the list.
3. Create a new ledger and compare-and-set the metadata: the recovered ledger
   closed, the new one open from the end offset, the generation bumped.
   A conflict means another opener (or the old owner switching ledgers) moved
   first: discard the new ledger and start again from 1, so the newest opener
   always fences the one before (and a conflict with a newer claim is refused at 1).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace

from weir.errors import WeirError
from weir.replication.errors import MetadataConflictError, NoSuchLedgerError, StaleClaimError
from weir.replication.ledger.client import LedgerClient
from weir.replication.ledger.handle import LedgerHandle
from weir.replication.managed_log.config import ManagedLogConfig
from weir.replication.managed_log.entry import decode_entry
from weir.replication.managed_log.metadata import (
    LedgerInfo,
    ManagedLogMetadata,
    ManagedLogStore,
    Position,
)

log = logging.getLogger("weir.managed_log")


class OpenOp:
    def __init__(
        self,
        client: LedgerClient,
        store: ManagedLogStore,
        name: str,
        config: ManagedLogConfig,
        owner: str,
        claim: int | None = None,
    ) -> None:
        self.client = client
        self.store = store
        self.name = name
        self.config = config
        self.owner = owner
        self.claim = claim
        self.recovered_ledgers = 0

    async def run(self) -> tuple[ManagedLogMetadata, int, LedgerHandle]:
        """The metadata as this open wrote it, its version, and the new ledger's writer."""
        conflicts = 0
        while True:
            md, version = await self.store.read_or_create(self.name)
            if self.claim is not None and md.claim > self.claim:
                raise StaleClaimError(
                    f"managed log {self.name!r} was opened under claim {md.claim}; "
                    f"this opener holds claim {self.claim}"
                )
            end = md.end_offset  # an open last ledger starts where the log ends, if empty
            ledgers, dropped = await self._close_last(list(md.ledgers))
            cfg = self.config
            handle = await self.client.create_ledger(
                cfg.ensemble_size, cfg.write_quorum, cfg.ack_quorum
            )
            if ledgers and not dropped:
                end = ledgers[-1].end_offset
            opened = replace(
                md,
                generation=md.generation + 1,
                owner=self.owner,
                claim=md.claim if self.claim is None else self.claim,
                ledgers=(*ledgers, LedgerInfo(handle.ledger_id, end)),
            )
            try:
                version = await self.store.write(self.name, opened, version)
            except MetadataConflictError:
                await discard_ledger(self.client, handle)
                conflicts += 1
                if conflicts >= cfg.open_attempts:
                    raise
                continue
            for ledger_id in dropped:
                await delete_quietly(self.client, ledger_id)
            return opened, version, handle

    async def _close_last(self, ledgers: list[LedgerInfo]) -> tuple[list[LedgerInfo], list[int]]:
        """The ledger list with an open last ledger recovered and closed (dropped if empty)."""
        if not ledgers or not ledgers[-1].is_open:
            return ledgers, []
        last = ledgers[-1]
        try:
            lmd = await self.client.recover(last.ledger_id)
        except NoSuchLedgerError:
            # created and recorded, then deleted: only an opener that lost a race deletes
            # its ledger, and it never wrote to it
            return ledgers[:-1], []
        self.recovered_ledgers += 1
        if lmd.last_entry_id < 0:
            return ledgers[:-1], [last.ledger_id]
        reader = await self.client.open_ledger(last.ledger_id)
        tail = decode_entry(
            Position(last.ledger_id, lmd.last_entry_id), await reader.read(lmd.last_entry_id)
        )
        ledgers[-1] = last.closed(
            lmd.last_entry_id + 1, tail.end_offset, tail.ledger_bytes_before + tail.size
        )
        return ledgers, []


async def discard_ledger(client: LedgerClient, handle: LedgerHandle) -> None:
    """Close and delete a ledger this owner created but never recorded (best effort: the
    bookies' garbage collection frees what a failure here leaves)."""
    with contextlib.suppress(WeirError):
        await handle.close()
    await delete_quietly(client, handle.ledger_id)


async def delete_quietly(client: LedgerClient, ledger_id: int) -> None:
    try:
        await client.delete_ledger(ledger_id)
    except Exception as exc:  # a leftover ledger costs space, never correctness
        log.warning("could not delete ledger %d: %s", ledger_id, exc)
