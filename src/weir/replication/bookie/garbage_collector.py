"""Garbage collection: a bookie drops the entries of ledgers whose metadata was deleted.

The client deletes a closed ledger's metadata only; each bookie then finds out on
its own (BookKeeper's `GarbageCollectorThread`). Ledger ids come from a ZooKeeper
sequential node, so they are allocated in increasing order and a ledger's
metadata exists before any entry of it is written: a ledger this bookie holds
whose id is below the highest listed id but which is not listed was deleted. A
ledger above the highest listed id may be one created after the listing and is
left alone, as is everything when nothing is listed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from weir.replication.bookie.service import Bookie

log = logging.getLogger("weir.replication.bookie")


def deleted_ledgers(held: Iterable[int], listed: set[int]) -> list[int]:
    """The ledgers of ``held`` that a listing of live ledger ids proves deleted."""
    if not listed:
        return []
    top = max(listed)
    return sorted(lid for lid in held if lid < top and lid not in listed)


async def collect(bookie: Bookie, listed: set[int]) -> list[int]:
    """Drop the deleted ledgers (in memory at once, on disk in one group commit)."""
    doomed = deleted_ledgers(bookie.ledgers, listed)
    for lid in doomed:
        del bookie.ledgers[lid]
    if doomed:
        await asyncio.wrap_future(bookie.storage.delete_ledgers(doomed))
        log.info("garbage-collected ledgers %s", doomed)
    return doomed
