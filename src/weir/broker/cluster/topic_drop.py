"""Dropping a topic of the cluster: its partitions' placement, their managed logs (the
ledgers on the bookies), then its catalog record.

The order makes a drop safe to repeat and leaves nothing a later topic of the same
name could inherit (a partition's managed log is named after the topic and the
partition):

1. the partitions' placement records go: their owners release them at their next
   reconcile (close the actor, snapshot, drop the claim) and nobody claims them again;
2. once the owners let go (or after ``wait_s``: an owner that is paused or dead keeps
   its ephemeral claim until its session expires), each managed log is opened once
   more, which fences whoever still holds it (its next append fails), closed, and
   every ledger it lists (data and snapshot) is deleted with its metadata;
3. the topic's record leaves the catalog: every broker's watch forgets the topic.

A drop cut short (the dropping broker dies) leaves the record in the catalog: the
drop is repeated, and each step finds done what was done.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from weir.broker.cluster.claims import ClusterRecords
from weir.errors import UnavailableError, WeirError
from weir.replication.errors import MetadataConflictError
from weir.replication.ledger import LedgerClient
from weir.replication.managed_log import ManagedLog, ManagedLogConfig
from weir.replication.managed_log.metadata import ManagedLogStore
from weir.replication.managed_log.open_op import delete_quietly

log = logging.getLogger("weir.cluster")
_ATTEMPTS = 8


async def wait_released(records: ClusterRecords, keys: Sequence[str], wait_s: float) -> list[str]:
    """Poll until no broker claims any of ``keys``, at most ``wait_s``; the keys still
    claimed then."""
    deadline = time.monotonic() + wait_s
    held = list(keys)
    while True:
        held = [k for k in held if await records.owner(k) is not None]
        if not held or time.monotonic() >= deadline:
            return held
        await asyncio.sleep(0.1)


async def delete_managed_log(client: LedgerClient, name: str, config: ManagedLogConfig) -> bool:
    """Fence the log's holder, then delete its metadata and its ledgers; False if there
    was no such log. Two admins dropping one topic at once: each open fences the other,
    so a dropper deletes only a log it closed last (no ledger left open), else it opens
    again; the one that finds the log gone is done."""
    store = ManagedLogStore(client.zk, client.root)
    if await store.read(name) is None:
        return False
    for _ in range(_ATTEMPTS):
        try:
            mlog = await ManagedLog.open(client, name, config, owner="dropped")
            await mlog.close()
        except WeirError:  # fenced or outraced by another dropper
            if await store.read(name) is None:
                return True
            continue
        got = await store.read(name)
        if got is None:
            return True  # another dropper finished
        md, version = got
        if any(li.is_open for li in md.ledgers):
            continue  # another dropper opened it after our close: fence it in turn
        try:
            await store.delete(name, version)  # first: a half-deleted log never reopens
        except MetadataConflictError:
            continue
        ids = [li.ledger_id for li in md.ledgers]
        if md.snapshot is not None:
            ids.append(md.snapshot.ledger_id)
        for ledger_id in ids:
            await delete_quietly(client, ledger_id)
        return True
    raise UnavailableError(f"managed log {name!r} kept changing while being deleted: drop again")


async def drop_partitions(
    client: LedgerClient,
    records: ClusterRecords,
    keys: Sequence[str],
    config: ManagedLogConfig,
    wait_s: float,
) -> None:
    """Steps 1 and 2 of the module docstring for the partitions ``keys``."""
    await records.remove_partitions(list(keys))
    held = await wait_released(records, keys, wait_s)
    if held:
        log.warning(
            "dropping partitions still claimed: fencing their owners",
            extra={"partitions": ",".join(held)},
        )
    for key in keys:
        await delete_managed_log(client, key, config)
