"""Several auditors elect one in ZooKeeper: the leader re-replicates, the others stand by and
take over when its session ends; never two acting at once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest
from kazoo.client import KazooClient

from weir.replication.errors import LeadershipLostError
from weir.replication.ledger import LedgerClient
from weir.replication.ledger.auditor import Auditor
from weir.replication.ledger.auditor_election import ElectedAuditor, auditor_contenders
from weir.replication.ledger.metadata import Fragment, LedgerMetadata, LedgerState
from weir.replication.local_cluster import BookieProcess
from weir.replication.registry import available_bookies
from weir.replication.zkserver import ZooKeeperServer

from .test_cli import weir
from .test_faults import History, check_closed_ledger, write
from .test_ledger import stored_entries


class AuditorProcess:
    """``weir cluster auditor`` as a child process, its stderr lines kept in ``log``."""

    def __init__(self, zk_hosts: str, root: str, name: str) -> None:
        self.name = name
        self.command = [
            sys.executable,
            "-m",
            "weir.cli",
            "cluster",
            "auditor",
            "--zk",
            zk_hosts,
            "--zk-root",
            root,
            "--id",
            name,
            "--interval",
            "0.2",
            "--grace",
            "0",
        ]
        self.log: list[str] = []
        self._changed = threading.Condition()
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> AuditorProcess:
        self.proc = subprocess.Popen(self.command, stderr=subprocess.PIPE, text=True)
        proc = self.proc

        def pump() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                with self._changed:
                    self.log.append(line)
                    self._changed.notify_all()

        threading.Thread(target=pump, daemon=True).start()
        return self

    def count(self, text: str) -> int:
        with self._changed:
            return sum(text in line for line in self.log)

    async def wait_for(self, text: str, times: int = 1, timeout: float = 60) -> None:
        """Until ``text`` appeared in ``times`` lines of the log."""

        def wait() -> bool:
            with self._changed:
                return self._changed.wait_for(lambda: self.count(text) >= times, timeout)

        if not await asyncio.to_thread(wait):
            raise AssertionError(
                f"auditor {self.name}: no {text!r} x{times}:\n" + "".join(self.log)
            )

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def lose_for_good(bookie: BookieProcess, kazoo: KazooClient, root: str) -> None:
    """SIGKILL, then wait for its registration to go with its ZooKeeper session."""
    bookie.kill()
    deadline = time.monotonic() + 60
    while bookie.address in available_bookies(kazoo, root):
        assert time.monotonic() < deadline, "the killed bookie stayed registered"
        await asyncio.sleep(0.05)


async def wait_repaired(client: LedgerClient, ledgers: list[int], lost: str) -> None:
    deadline = time.monotonic() + 60
    for lid in ledgers:
        while any(lost in f.bookies for f in (await client.store.read(lid))[0].ensembles):
            assert time.monotonic() < deadline, f"ledger {lid} still names {lost}"
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("bookie_count", [5], indirect=True)
async def test_one_elected_auditor_acts_and_a_standby_takes_over(
    zookeeper: ZooKeeperServer, zk_root: str, bookies: list[BookieProcess], kazoo: KazooClient
) -> None:
    """Auditors a and b: a leads, b stands by. a paused past its session: b takes over and
    repairs a lost bookie; a, continued, acts on nothing and stands by. b SIGKILLed: a takes
    over and repairs the next lost bookie. At every step only the leader ever copied."""
    async with LedgerClient(zookeeper.hosts, root=zk_root) as client:
        histories: dict[int, History] = {}
        for q in ((3, 3, 2), (3, 2, 2)):
            lh = await client.create_ledger(*q, bookies=[b.address for b in bookies[:3]])
            histories[lh.ledger_id] = History()
            await write(lh, histories[lh.ledger_id], 60)
            await lh.close()
        ledgers = sorted(histories)
        a = AuditorProcess(zookeeper.hosts, zk_root, "a").start()
        b = AuditorProcess(zookeeper.hosts, zk_root, "b")
        try:
            await a.wait_for("auditor a: leading")
            b.start()
            await b.wait_for("auditor b: standing by")
            await until(lambda: auditor_contenders(kazoo, zk_root) == ["a", "b"])

            assert b.count("auditor b: leading") == 0  # a leads: b only waits
            by_hand = weir("cluster", "audit", "--zk", zookeeper.hosts, "--zk-root", zk_root)
            assert by_hand.returncode == 1  # a one-off pass would be a second auditor acting
            assert "auditor a is running and re-replicates on its own" in by_hand.stderr
            a.signal(signal.SIGSTOP)  # its session expires; b must take over alone
            await lose_for_good(bookies[1], kazoo, zk_root)
            await b.wait_for("auditor b: leading")
            await wait_repaired(client, ledgers, bookies[1].address)
            # the auditor logs a repair after recording it: wait for its lines
            await b.wait_for("re-replicated", times=len(ledgers))
            a.signal(signal.SIGCONT)
            await a.wait_for("auditor a: no longer leading")
            await a.wait_for("auditor a: standing by", times=2)
            await until(lambda: auditor_contenders(kazoo, zk_root) == ["b", "a"])
            assert a.count("re-replicated") == 0, "".join(a.log)
            assert b.count("re-replicated") == len(ledgers), "".join(b.log)

            b.signal(signal.SIGKILL)
            await lose_for_good(bookies[2], kazoo, zk_root)
            await a.wait_for("auditor a: leading", times=2)
            await wait_repaired(client, ledgers, bookies[2].address)
            await a.wait_for("re-replicated", times=len(ledgers))
            assert a.count("re-replicated") == len(ledgers), "".join(a.log)
        finally:
            a.stop()
            b.stop()

        live = [bk for bk in bookies if bk not in (bookies[1], bookies[2])]
        for lid, history in histories.items():
            await check_closed_ledger(client, lid, history, live)
        mds = {lid: (await client.store.read(lid))[0] for lid in ledgers}
    for bk in live:
        bk.stop()
    for lid, md in mds.items():  # every entry on each bookie of its write set again: WQ copies
        held = {bk.address: set(stored_entries(bk, lid)) for bk in live}
        for entry in range(md.last_entry_id + 1):
            assert all(entry in held[bk] for bk in md.write_set(entry)), (lid, entry)


async def test_a_session_expiry_ends_the_leadership_and_the_standby_leads(
    zookeeper: ZooKeeperServer, zk_root: str, kazoo: KazooClient
) -> None:
    """In one process: expire the leader's ZooKeeper session; it stops leading, the other
    leads, and at no point do both lead."""
    async with (
        LedgerClient(zookeeper.hosts, root=zk_root) as ca,
        LedgerClient(zookeeper.hosts, root=zk_root) as cb,
    ):
        a, b = ElectedAuditor(ca, "a"), ElectedAuditor(cb, "b")
        stop = asyncio.Event()
        both: list[float] = []

        async def watch() -> None:
            while not stop.is_set():
                if a.leading and b.leading:
                    both.append(time.monotonic())
                await asyncio.sleep(0.01)

        tasks = [asyncio.create_task(x) for x in (a.run(0.1, 0, stop), watch())]
        await until(lambda: a.leading)
        tasks.append(asyncio.create_task(b.run(0.1, 0, stop)))
        await until(lambda: auditor_contenders(kazoo, zk_root) == ["a", "b"])
        assert not b.leading
        await asyncio.to_thread(expire_session, zookeeper.hosts, ca.zk)
        await until(lambda: b.leading)
        await until(lambda: auditor_contenders(kazoo, zk_root) == ["b", "a"])
        assert not a.leading and (a.terms, b.terms) == (1, 1)
        stop.set()
        await asyncio.gather(*tasks)
        assert both == []


async def test_a_repair_is_not_recorded_once_the_leader_node_is_gone(
    zookeeper: ZooKeeperServer, zk_root: str, kazoo: KazooClient
) -> None:
    """The guarded metadata write is one transaction with a check of the leader's node: a
    former leader records nothing, and the metadata stays as it was."""
    async with LedgerClient(zookeeper.hosts, root=zk_root) as client:
        md = LedgerMetadata(
            3,
            3,
            2,
            state=LedgerState.CLOSED,
            last_entry_id=9,
            ensembles=(Fragment(0, ("h1:1", "h2:1", "h3:1")),),
        )
        lid, version = await client.store.create(md)
        guard = kazoo.create(f"{zk_root}/auditor/leader/x", ephemeral=True, makepath=True)
        moved = replace(md, ensembles=(Fragment(0, ("h1:1", "h2:1", "h4:1")),))
        version = await client.store.write(lid, moved, version, guard=guard)
        kazoo.delete(guard)
        back = replace(md, ensembles=(Fragment(0, ("h1:1", "h2:1", "h5:1")),))
        with pytest.raises(LeadershipLostError):
            await client.store.write(lid, back, version, guard=guard)
        assert await client.store.read(lid) == (moved, version)
        with pytest.raises(LeadershipLostError):  # and it copies nothing either
            await Auditor(client, guard=guard).audit_once({"h2:1"})


async def until(condition: object, timeout: float = 30) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def expire_session(hosts: str, zk: KazooClient) -> None:
    """End ``zk``'s session on the server (ZooKeeper's own test trick): a second client
    joins it with its id and password and closes it."""
    session_id, password = zk.client_id
    other = KazooClient(hosts=hosts, client_id=(session_id, password))
    other.start(timeout=30)
    other.stop()
    other.close()
