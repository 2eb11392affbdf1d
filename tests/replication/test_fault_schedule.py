"""A fault schedule over many ledgers, judged entry by entry (the history checker of ledgers).

Rounds of: create a ledger (E=WQ=3, AQ=2, 5 bookies), write with WINDOW adds in
flight, and meanwhile hit bookies with faults drawn from one seed: SIGKILL (and
restart), SIGSTOP (and SIGCONT), a pause longer than the bookie's ZooKeeper
session (its session expires, its registration goes, and it registers again when
it runs on), and the writer's connection to a bookie cut (the writer reaches
each bookie through the reliability suite's proxy, which drops every connection
at once). Each round ends one of three ways: the writer closes; the writer
goes away and another client recovers; or a recoverer races the writer still
writing. Then, with every bookie back: no acknowledged entry lost, nothing
readable that was never written, nothing acknowledged after a fence, and the
same bytes on every bookie holding an entry (`check_closed_ledger`).

``WEIR_LEDGER_FAULTS`` faults (4 by default, `make soak` runs 300);
``WEIR_CHAOS_SEED`` replays a run.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from tests.reliability.proxy import FaultyProxy
from weir.replication.errors import LedgerFencedError, NotEnoughBookiesError
from weir.replication.ledger import LedgerClient
from weir.replication.local_cluster import BookieProcess
from weir.replication.registry import available_bookies
from weir.replication.zkserver import ZooKeeperServer

from .test_faults import History, Trigger, by_address, check_closed_ledger, write

FAULTS = int(os.environ.get("WEIR_LEDGER_FAULTS", "4"))
SEED = int(os.environ.get("WEIR_CHAOS_SEED") or random.SystemRandom().randrange(1, 2**31))
KINDS = ("kill", "kill", "pause", "pause", "expire", "cut", "cut")
ENDINGS = ("close", "recover", "race")


def port_of(bookie: BookieProcess) -> Callable[[], int]:
    """The bookie's port now (the same after a restart)."""
    return lambda: bookie.port


def reached(history: History, acked: int) -> Callable[[], bool]:
    """True once ``acked`` adds are acknowledged, or the writer failed (no more will be)."""
    return lambda: len(history.acked) >= acked or bool(history.errors)


class Faulted:
    """The bookies hit in a round, and how to bring each back."""

    def __init__(self, kazoo: KazooClient, zk_root: str, proxies: dict[str, FaultyProxy]) -> None:
        self.kazoo = kazoo
        self.zk_root = zk_root
        self.proxies = proxies
        self.killed: list[BookieProcess] = []
        self.paused: list[BookieProcess] = []

    async def hit(self, kind: str, bookie: BookieProcess) -> None:
        if kind == "kill":
            bookie.kill()
            self.killed.append(bookie)
        elif kind == "pause":
            bookie.pause()
            self.paused.append(bookie)
        elif kind == "cut":  # the bookie runs on; the writer's connection to it breaks
            self.proxies[bookie.address].drop_all()
        else:  # expire: paused past its session timeout, until ZooKeeper drops it
            bookie.pause()
            self.paused.append(bookie)
            for _ in range(400):
                registered = await asyncio.to_thread(available_bookies, self.kazoo, self.zk_root)
                if bookie.address not in registered:
                    break
                await asyncio.sleep(0.05)

    async def heal(self) -> None:
        for b in self.paused:
            b.resume()
        for b in self.killed:
            await asyncio.to_thread(b.start)
        # every bookie registered again (an expired one re-registers on its new session)
        wanted = {b.address for b in self.paused + self.killed}
        for _ in range(400):
            registered = await asyncio.to_thread(available_bookies, self.kazoo, self.zk_root)
            if wanted <= set(registered):
                break
            await asyncio.sleep(0.05)
        assert wanted <= set(registered), f"did not register again: {wanted - set(registered)}"
        self.killed, self.paused = [], []


@pytest.mark.timeout(120 + FAULTS * 20)  # a fault and its round take a few seconds
@pytest.mark.parametrize("bookie_count", [5], indirect=True)
@pytest.mark.parametrize("bookie_args", [("--zk-session-timeout", "1")], indirect=True)
async def test_fault_schedule_loses_no_acknowledged_entry(
    zookeeper: ZooKeeperServer, zk_root: str, bookies: list[BookieProcess], kazoo: KazooClient
) -> None:
    rng = random.Random(SEED)
    faults: Counter[str] = Counter()
    endings: Counter[str] = Counter()
    acked = 0
    proxies = {b.address: FaultyProxy(port_of(b)) for b in bookies}
    faulted = Faulted(kazoo, zk_root, proxies)
    started = time.monotonic()

    async def recover(ledger_id: int) -> None:
        """Recover from another client; with two bookies of a write set down recovery cannot
        re-replicate (NotEnoughBookiesError, retryable): bring them back and try again."""
        async with LedgerClient(zookeeper.hosts, root=zk_root, request_timeout=1.0) as other:
            try:
                await other.recover(ledger_id)
            except NotEnoughBookiesError:
                endings["recovery retried"] += 1
                await faulted.heal()
                await other.recover(ledger_id)

    routes = {address: proxy.endpoint for address, proxy in proxies.items()}
    try:
        async with LedgerClient(
            zookeeper.hosts, root=zk_root, request_timeout=1.0, routes=routes
        ) as client:
            for _round in range(FAULTS):  # bounded: each round applies at least one fault
                if sum(faults.values()) >= FAULTS:
                    break
                lh = await client.create_ledger(3, 3, 2)
                history = History()
                count = rng.randrange(150, 400)
                plan = sorted(
                    (rng.randrange(10, count - 50), rng.choice(KINDS))
                    for _ in range(rng.randint(1, 2))
                )
                ending = rng.choice(ENDINGS)
                events = [asyncio.Event() for _ in plan]
                triggers: list[Trigger] = [
                    (reached(history, at), ev) for (at, _), ev in zip(plan, events, strict=True)
                ]
                race = asyncio.Event()
                triggers.append((reached(history, rng.randrange(10, count)), race))
                t0 = time.monotonic()
                writer = asyncio.create_task(write(lh, history, count, triggers=triggers))
                hit: set[str] = set()
                for (_, kind), ev in zip(plan, events, strict=True):
                    await asyncio.wait(
                        [writer, asyncio.ensure_future(ev.wait())],
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    if not ev.is_set():
                        break
                    candidates = [a for a in lh.metadata.ensembles[-1].bookies if a not in hit]
                    victim = by_address(bookies, rng.choice(candidates))
                    hit.add(victim.address)
                    await faulted.hit(kind, victim)
                    faults[kind] += 1
                if ending == "race":
                    await asyncio.wait(
                        [writer, asyncio.ensure_future(race.wait())],
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    await recover(lh.ledger_id)
                    await writer
                else:
                    await writer
                    if ending == "close" and not history.errors:
                        await lh.close()
                    else:
                        await recover(lh.ledger_id)
                endings[ending] += 1
                t1 = time.monotonic()
                assert all(
                    isinstance(e, LedgerFencedError | NotEnoughBookiesError) for e in history.errors
                ), f"seed {SEED}: {history.errors[:3]}"
                assert not history.acked_after_error, f"seed {SEED}: acked after an error"
                kinds = [k for _, k in plan]
                await faulted.heal()
                t2 = time.monotonic()
                await check_closed_ledger(client, lh.ledger_id, history, bookies)
                t3 = time.monotonic()
                acked += len(history.acked)
                print(
                    f"round {_round}: {sum(faults.values())} faults, {ending}, "
                    f"{len(history.acked)} acked, {time.monotonic() - started:.0f} s "
                    f"({kinds}: run {t1 - t0:.1f} heal {t2 - t1:.1f} check {t3 - t2:.1f})",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        for proxy in proxies.values():
            proxy.close()
    total = sum(faults.values())
    print(
        f"\nledger fault schedule: seed {SEED}, {total} faults {dict(faults)}, "
        f"endings {dict(endings)}, {acked} acknowledged entries checked"
    )
    assert total >= FAULTS, f"seed {SEED}: only {total} faults applied"
