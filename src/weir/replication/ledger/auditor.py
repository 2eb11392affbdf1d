"""The auditor: finds closed ledgers with entries on lost bookies and re-replicates them.

A bookie is lost when it is registered neither as available nor as read-only.
A bookie that restarts comes back within seconds, so `Auditor.run` waits
``grace`` seconds of continuous absence before copying (BookKeeper's
``lostBookieRecoveryDelay``); `audit_once` acts at once (an operator's
``weir cluster audit``, and the tests). Several auditors elect one to act
(`auditor_election.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from weir.replication.errors import LeadershipLostError
from weir.replication.ledger.client import LedgerClient
from weir.replication.ledger.metadata import LedgerState
from weir.replication.ledger.rereplication_op import RereplicationOp
from weir.replication.registry import available_bookies

log = logging.getLogger("weir.replication.auditor")


class Auditor:
    def __init__(self, client: LedgerClient, *, guard: str | None = None) -> None:
        """``guard``: the lock node of an elected auditor (`auditor_election.py`): each
        ledger's repair is recorded only while it exists, in one ZooKeeper transaction."""
        self.client = client
        self.guard = guard
        self._missing_since: dict[str, float] = {}

    async def registered(self) -> set[str]:
        zk, root = self.client.zk, self.client.root
        writable = await asyncio.to_thread(available_bookies, zk, root)
        readonly = await asyncio.to_thread(available_bookies, zk, root, read_only=True)
        return set(writable) | set(readonly)

    async def audit_once(self, lost: set[str] | None = None) -> dict[int, list[str]]:
        """Re-replicate every closed ledger's share on the lost bookies (all unregistered ones
        unless ``lost`` is given); ``{ledger: [bookies replaced]}``."""
        if lost is None:
            lost = await self._unregistered()
        fixed: dict[int, list[str]] = {}
        if not lost:
            return fixed
        for lid in await self.client.list_ledgers():
            md, _ = await self.client.store.read(lid)
            if md.state != LedgerState.CLOSED:
                continue
            for bookie in sorted(lost & {b for f in md.ensembles for b in f.bookies}):
                await self._check_leadership()
                op = RereplicationOp(
                    lid,
                    bookie,
                    self.client.pool,
                    self.client.store,
                    self.client.bookie_view,
                    guard=self.guard,
                )
                await op.run()
                fixed.setdefault(lid, []).append(bookie)
                log.info(
                    "ledger %d: re-replicated %d entries of lost bookie %s", lid, op.copied, bookie
                )
        return fixed

    async def _check_leadership(self) -> None:
        """Before copying: the guard node still exists and belongs to this session (the
        recording transaction checks again)."""
        if self.guard is None:
            return
        zk = self.client.zk
        stat = await asyncio.to_thread(zk.exists, self.guard)
        session = zk.client_id[0] if zk.client_id else None
        if stat is None or stat.ephemeralOwner != session:
            raise LeadershipLostError(f"{self.guard} is gone: no longer the elected auditor")

    async def _unregistered(self) -> set[str]:
        live = await self.registered()
        named: set[str] = set()
        for lid in await self.client.list_ledgers():
            md, _ = await self.client.store.read(lid)
            named |= {b for f in md.ensembles for b in f.bookies}
        return named - live

    async def run(self, interval: float, grace: float, stop: asyncio.Event) -> None:
        """Audit every ``interval`` s; re-replicate bookies missing for ``grace`` s or more."""
        while not stop.is_set():
            try:
                now = time.monotonic()
                missing = await self._unregistered()
                self._missing_since = {b: self._missing_since.get(b, now) for b in missing}
                lost = {b for b, t in self._missing_since.items() if now - t >= grace}
                if lost:
                    await self.audit_once(lost)
            except LeadershipLostError:
                raise
            except Exception as exc:  # a bookie or ZooKeeper away: next round
                log.warning("audit failed: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
