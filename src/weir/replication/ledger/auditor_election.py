"""Auditor leader election: of several auditors, one acts and the others stand by.

Each auditor contends through kazoo's Lock recipe under ``{root}/auditor/leader``
(one ephemeral sequential node per contender; the lowest holds the lock). The
holder runs `Auditor.run`; the others wait in ``acquire``, each watching its
predecessor, and the next takes over once the leader's node is gone: it released
it, or its ZooKeeper session ended (its process killed, paused or cut off for
longer than the session timeout).

Never two acting at once, by two rules:

- A leader stops acting as soon as its connection to ZooKeeper is SUSPENDED or
  its session LOST (it can no longer know that its node exists): it cancels the
  pass under way and contends again.
- Each repair it records is one ZooKeeper transaction that also checks that its
  lock node exists (`MetadataStore.write` with ``guard``), so a leader that was
  paused and has not noticed yet, or whose client quietly reconnected with a new
  session, records nothing (`LeadershipLostError`). Entries it copied before
  that are harmless: adds are idempotent and the metadata never pointed at them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from kazoo.client import KazooClient, KazooState
from kazoo.recipe.lock import Lock

from weir.replication.errors import AuditorBusyError
from weir.replication.ledger.auditor import Auditor
from weir.replication.ledger.client import LedgerClient

log = logging.getLogger("weir.replication.auditor")


def election_path(root: str) -> str:
    return f"{root}/auditor/leader"


def auditor_contenders(zk: KazooClient, root: str) -> list[str]:
    """The contending auditors' identifiers, the leader first."""
    return list(Lock(zk, election_path(root)).contenders())


class ElectedAuditor:
    """An auditor that acts only while it holds the election's lock."""

    def __init__(self, client: LedgerClient, identifier: str) -> None:
        self.client = client
        self.identifier = identifier
        self.leading = False
        self.terms = 0  # times it became leader

    async def run(self, interval: float, grace: float, stop: asyncio.Event) -> None:
        """Contend, lead (audit every ``interval`` s, ``grace`` as `Auditor.run`) while
        elected, contend again when the leadership is lost; until ``stop``."""
        while not stop.is_set():
            lock = Lock(self.client.zk, election_path(self.client.root), self.identifier)
            log.info("auditor %s: standing by", self.identifier)
            acquiring = asyncio.ensure_future(asyncio.to_thread(lock.acquire))
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({acquiring, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not acquiring.done():
                lock.cancel()  # the waiting acquire raises kazoo's CancelledError
                with contextlib.suppress(Exception):
                    await acquiring
                break
            try:
                got = acquiring.result()
            except Exception as exc:  # ZooKeeper away: contend again shortly
                log.warning("auditor %s: election failed: %s", self.identifier, exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)
                continue
            if got:
                await self._lead(lock, interval, grace, stop)

    async def _lead(self, lock: Lock, interval: float, grace: float, stop: asyncio.Event) -> None:
        zk = self.client.zk
        loop = asyncio.get_running_loop()
        node = f"{lock.path}/{lock.node}"
        lost = asyncio.Event()

        def on_state(state: str) -> None:
            if state != KazooState.CONNECTED:
                loop.call_soon_threadsafe(lost.set)

        zk.add_listener(on_state)
        reason = "stopped"
        try:
            if zk.state != KazooState.CONNECTED:
                lost.set()
            self.leading = True
            self.terms += 1
            log.info("auditor %s: leading (%s)", self.identifier, node)
            audit = asyncio.create_task(Auditor(self.client, guard=node).run(interval, grace, stop))
            stopping = asyncio.ensure_future(stop.wait())
            losing = asyncio.ensure_future(lost.wait())
            await asyncio.wait({audit, stopping, losing}, return_when=asyncio.FIRST_COMPLETED)
            for f in (audit, stopping, losing):
                f.cancel()  # the audit stops mid-pass: copy first, record after
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await audit
            if lost.is_set():
                reason = "ZooKeeper connection suspended or session lost"
            elif not audit.cancelled() and audit.exception() is not None:
                reason = str(audit.exception())
        finally:
            self.leading = False
            zk.remove_listener(on_state)
            log.info("auditor %s: no longer leading: %s", self.identifier, reason)
        # Gives the node up at once if the session lives; if not, it went with the session.
        # Not awaited for long: while ZooKeeper is unreachable kazoo retries the delete.
        release = asyncio.ensure_future(asyncio.to_thread(_release_quietly, lock))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(release), 5.0)


async def audit_once_exclusively(
    client: LedgerClient, identifier: str, lost: set[str] | None = None
) -> dict[int, list[str]]:
    """One audit pass (an operator's ``weir cluster audit``) holding the election's lock for
    its duration; `AuditorBusyError` at once while another auditor holds or awaits it."""
    lock = Lock(client.zk, election_path(client.root), identifier)
    if not await asyncio.to_thread(lock.acquire, False):
        holders = await asyncio.to_thread(lock.contenders)
        leader = holders[0] if holders else "another auditor"
        raise AuditorBusyError(
            f"auditor {leader} is running and re-replicates on its own: stop it to audit by hand"
        )
    try:
        return await Auditor(client, guard=f"{lock.path}/{lock.node}").audit_once(lost)
    finally:
        await asyncio.to_thread(_release_quietly, lock)


def _release_quietly(lock: Lock) -> None:
    with contextlib.suppress(Exception):
        lock.release()
