"""A fault schedule over the broker cluster, judged by the history checker.

Three `weir serve` brokers in replicated mode, three bookies (E=3, WQ=3, AQ=2) and one
ZooKeeper, each its own process on 127.0.0.1. Under continuous load from the native
SDK (one writer per partition, each with a producer id so the broker's dedup applies,
partitions spread over the brokers; a consumer reading every partition with
`read_range` and committing its offsets on the owner), faults drawn from one seed hit
the cluster one after the other:

- ``broker_kill``: SIGKILL of a broker, started again at once (its partitions move
  when its ZooKeeper session expires, or come back to it);
- ``broker_pause``: SIGSTOP of a broker until ZooKeeper has dropped it (past its
  session timeout: its partitions move while it sleeps), then SIGCONT: it must not
  acknowledge anything after the handover (the next owner fenced its ledgers);
- ``zk_expire``: the broker's connections to ZooKeeper (each broker reaches ZooKeeper
  through a proxy of its own) cut and held until its session has expired, while it
  runs on and its clients still reach it; then let through again;
- ``zk_blip``: the broker's ZooKeeper connections cut once (it reconnects within the
  session: suspended, then serving again);
- ``bookie_kill``: SIGKILL of a bookie, started again once some writes went on
  without it (one bookie down at a time: AQ=2 of WQ=3 still acknowledges);
- ``client_cut``: every client connection through the client proxies cut at once
  (each client's home endpoint is a proxy in front of a broker);
- ``bookie_cut``: one broker's connections to one bookie cut and refused for a while
  (each broker reaches each bookie through a proxy of its own: ``cluster.bookie_routes``),
  both ways, while the bookie stays registered and every other broker reaches it: the
  broker's ledgers go on with AQ=2 of the other two;
- ``bookies_cut``: one broker cut off from every bookie for a while (it still reaches
  ZooKeeper and its clients): no write of its partitions can reach a write quorum, so
  none is acknowledged; they fail (retryable) and the writers resend until it heals;
- ``bookie_slow``: one broker's link to one bookie slowed (each chunk delayed), or
  stalled past the broker's bookie request timeout (its requests fail: the bookie is
  replaced or left out of the ledger's quorum), for a while.

After each fault the schedule waits until every partition has an owner and the
writers made progress again (a deadline, not a sleep), and asks each partition's owner
for the consumer's committed offset. At the end every broker is killed and started
again (so the logs are recovered from the bookies, not served from an owner's cache)
and everything is read back: no
acknowledged message lost, none stored twice, each producer's messages in write order,
offsets dense, no committed consumer position gone backwards.

8 faults in the default run (the three bookie-link kinds among them, the rest drawn); the
``slow`` one (`make soak`) runs ``WEIR_SOAK_CLUSTER_FAULTS``
(300 by default);
``WEIR_CHAOS_SEED`` replays a schedule (the seed is printed with the summary).
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import pytest
from kazoo.client import KazooClient

import weir.aio
from tests.conftest import ServerProcess, cluster_servers
from tests.reliability.checker import Report, check
from tests.reliability.history import History, make_data, message_id
from tests.reliability.proxy import FaultyProxy
from weir.broker.cluster import ClusterRecords, partition_key
from weir.broker.cluster.claims import Owner, brokers_path
from weir.errors import WeirError
from weir.replication.local_cluster import BookieProcess
from weir.replication.registry import available_bookies
from weir.replication.zkserver import ZooKeeperServer

SHORT_FAULTS = 8  # the default run
LONG_FAULTS = int(os.environ.get("WEIR_SOAK_CLUSTER_FAULTS", "300"))  # `make soak`
SEED = int(os.environ.get("WEIR_CHAOS_SEED") or random.SystemRandom().randrange(1, 2**31))
NAMES = ("a", "b", "c")
PARTITIONS = 6
CONSUMER = "c"
KINDS = (
    "broker_kill",
    "broker_kill",
    "broker_pause",
    "zk_expire",
    "zk_blip",
    "bookie_kill",
    "bookie_kill",
    "client_cut",
    "client_cut",
    "bookie_cut",
    "bookies_cut",
    "bookie_slow",
)
LINK_KINDS = ("bookie_cut", "bookies_cut", "bookie_slow")  # each once in the default run
BOOKIE_TIMEOUT_S = 3.0  # the brokers' bookie request timeout (a stall past it fails requests)
ZK_S = 20.0  # a ZooKeeper read of the test's own, at most
SETTLE_S = 120.0  # a fault's healing: owners back and writes going on, within this
INFLIGHT = 64  # unacknowledged writes per writer at most


@pytest.fixture(scope="module")
def shared_bookie_args() -> tuple[str, ...]:
    """Bookies drop out of ZooKeeper soon after a kill (their registration is what new
    ledgers are placed from)."""
    return ("--zk-session-timeout", "2")


@pytest.fixture(scope="module")
def zk_proxies(zookeeper: ZooKeeperServer) -> Iterator[dict[str, FaultyProxy]]:
    """One proxy per broker in front of ZooKeeper: cutting it cuts that broker alone."""
    proxies = {n: FaultyProxy(lambda: zookeeper.port) for n in NAMES}
    yield proxies
    for p in proxies.values():
        p.close()


LinkProxies = dict[tuple[str, str], FaultyProxy]  # (broker, bookie id) -> its proxy


@pytest.fixture(scope="module")
def bookie_proxies(shared_bookies: list[BookieProcess]) -> Iterator[LinkProxies]:
    """One proxy per broker and bookie: each broker's route to each bookie (its
    ``cluster.bookie_routes``), so one link can be cut, slowed or stalled alone."""
    proxies = {
        (n, b.address): FaultyProxy(lambda port=b.port: port)  # type: ignore[misc]
        for n in NAMES
        for b in shared_bookies
    }
    yield proxies
    for p in proxies.values():
        p.close()


@pytest.fixture(scope="module")
def brokers(
    zookeeper: ZooKeeperServer,
    shared_root: str,
    shared_bookies: list[BookieProcess],
    zk_proxies: dict[str, FaultyProxy],
    bookie_proxies: LinkProxies,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, ServerProcess]]:
    env = {
        n: {
            "WEIR_CLUSTER_ZOOKEEPER": zk_proxies[n].endpoint,
            "WEIR_CLUSTER_BOOKIE_ROUTES": ",".join(
                f"{b.address}={bookie_proxies[n, b.address].endpoint}" for b in shared_bookies
            ),
            "WEIR_CLUSTER_BOOKIE_TIMEOUT_S": str(BOOKIE_TIMEOUT_S),
        }
        for n in NAMES
    }
    with cluster_servers(
        NAMES, zookeeper.hosts, shared_root, tmp_path_factory, prefix="faults", broker_env=env
    ) as out:
        for srv in out.values():  # each restart's lines go on in the same file
            srv.log_file = srv.data_dir.with_suffix(".log")
        yield out


@pytest.fixture
async def kazoo(zookeeper: ZooKeeperServer) -> AsyncIterator[KazooClient]:
    zk = KazooClient(hosts=zookeeper.hosts, timeout=10)
    await asyncio.to_thread(zk.start, 30)
    try:
        yield zk
    finally:
        await asyncio.to_thread(zk.stop)
        await asyncio.to_thread(zk.close)


@dataclass
class Load:
    """The writers' and the consumer's shared state."""

    history: History
    topic: str
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    acked: int = 0
    attempted: int = 0
    commits: int = 0
    consumer_errors: Counter[str] = field(default_factory=Counter)
    consumer_seen: dict[str, str] = field(default_factory=dict)  # an example of each
    next_n: Counter[int] = field(default_factory=Counter)  # each writer's next message
    # `bookies_cut`: partition -> the first message its writer attempted after its owner
    # was cut off from every bookie; none from there on can reach a write quorum until
    # the links are back, so an ack of one meanwhile is counted (`acked_while_cut`)
    cut_from: dict[int, int] = field(default_factory=dict)
    acked_while_cut: Counter[int] = field(default_factory=Counter)
    cut_partitions: int = 0  # partitions whose owner was cut off, summed over the cuts
    cuts: int = 0


async def write_partition(load: Load, endpoint: str, p: int) -> None:
    """Producer ``w{p}`` pinned to partition ``p``: writes until told to stop, at most
    INFLIGHT unacknowledged; every attempt and ack goes into the history."""
    h = load.history
    pending: list[tuple[int, asyncio.Future[weir.WriteResult]]] = []

    def settle() -> None:
        while pending and pending[0][1].done():
            n, fut = pending.pop(0)
            res = fut.result()  # a writer that gives up fails the test: nothing should
            h.acked(f"id:w{p}:{n}", p, None if res.skipped else res.offset)
            load.acked += 1
            if n >= load.cut_from.get(p, n + 1):
                load.acked_while_cut[p] += 1

    async with (
        weir.aio.Client(endpoint) as client,
        client.writer(
            load.topic, producer_id=f"w{p}", partition=p, delivery_timeout=None
        ) as writer,
    ):
        n = 0
        while not load.stop.is_set():
            mid = f"id:w{p}:{n}"
            h.attempted(mid)
            load.attempted += 1
            pending.append((n, await writer.write_future(make_data(f"w{p}", n, 64))))
            n += 1
            load.next_n[p] = n
            settle()
            if len(pending) >= INFLIGHT:
                await asyncio.wait([pending[0][1]])
                settle()
            if n % 8 == 0:
                await asyncio.sleep(0.02)  # pace: a steady load, not a flood
        await writer.flush(timeout=SETTLE_S)
        settle()
        assert not pending, f"w{p}: {len(pending)} writes never settled"


class Owners:
    """Clients of each owner's native endpoint (commits and offsets go to the owner)."""

    def __init__(self, home: weir.aio.Client, topic: str) -> None:
        self.home = home
        self.topic = topic
        self.clients: dict[str, weir.aio.Client] = {}

    async def of(self, p: int) -> weir.aio.Client | None:
        found = await self.home.owners(self.topic, timeout=5)
        owner = found[p]
        endpoint = owner.endpoints.get("native", "") if owner.broker else ""
        if not endpoint:
            return None
        client = self.clients.get(endpoint)
        if client is None:
            client = self.clients[endpoint] = weir.aio.Client(endpoint)
        return client

    async def close(self) -> None:
        for c in self.clients.values():
            await c.close()


async def committed(owners: Owners, p: int) -> int | None:
    """The consumer's committed offset of partition ``p``, as its owner reports it."""
    client = await owners.of(p)
    if client is None:
        return None
    info = await client.describe_consumer(owners.topic, CONSUMER, timeout=5)
    for lag in info.partitions:
        if lag.partition == p:
            return lag.committed_offset
    return None  # it moved between the lookup and the describe


async def consume(load: Load, endpoint: str) -> None:
    """Read every partition from its committed position to its end, then commit there on
    the owner; a commit the owner answered is in the history."""
    h = load.history
    positions = [0] * PARTITIONS
    async with weir.aio.Client(endpoint) as client:
        owners = Owners(client, load.topic)
        try:
            while not load.stop.is_set():
                for p in range(PARTITIONS):
                    try:
                        async for rc in client.read_range(load.topic, p, positions[p], timeout=5):
                            for m in rc.messages():
                                h.delivered("consumer", p, m.offset, message_id(m.data))
                                positions[p] = m.offset + 1
                        target = await owners.of(p)
                        if target is None:
                            continue
                        await target.commit_offset(load.topic, p, CONSUMER, positions[p], timeout=5)
                        h.commit_acked(CONSUMER, p, positions[p])
                        load.commits += 1
                    except (WeirError, OSError) as err:
                        load.consumer_errors[type(err).__name__] += 1
                        load.consumer_seen.setdefault(type(err).__name__, str(err)[:300])
                await asyncio.sleep(0.2)
        finally:
            await owners.close()


async def observe_commits(load: Load, owners: Owners, when: str) -> None:
    """Ask each partition's owner for the consumer's committed offset (the checker holds
    it to every commit acknowledged before the question)."""
    for p in range(PARTITIONS):
        since = load.history.clock()
        try:
            got = await committed(owners, p)
        except (WeirError, OSError):
            continue
        if got is not None:
            load.history.commit_observed(since, CONSUMER, p, got, when)


async def read_back(endpoint: str, topic: str) -> dict[int, list[tuple[int, str]]]:
    """Every partition from offset 0 to its end (retrying while a partition moves)."""
    out: dict[int, list[tuple[int, str]]] = {}
    async with weir.aio.Client(endpoint) as client:
        for p in range(PARTITIONS):
            rows: list[tuple[int, str]] = []
            deadline = time.monotonic() + SETTLE_S
            while True:
                try:
                    async for rc in client.read_range(topic, p, len(rows), timeout=10):
                        rows.extend((m.offset, message_id(m.data)) for m in rc.messages())
                    break
                except WeirError:
                    assert time.monotonic() < deadline, f"partition {p} unreadable"
                    await asyncio.sleep(0.2)
            out[p] = rows
    return out


class Cluster:
    """The processes, the proxies, and how to hit and heal each."""

    def __init__(
        self,
        brokers: dict[str, ServerProcess],
        bookies: list[BookieProcess],
        zk_proxies: dict[str, FaultyProxy],
        client_proxies: dict[str, FaultyProxy],
        kazoo: KazooClient,
        root: str,
        links: LinkProxies,
    ) -> None:
        self.brokers = brokers
        self.bookies = bookies
        self.zk_proxies = zk_proxies
        self.links = links
        self.client_proxies = client_proxies
        self.kazoo = kazoo
        self.root = root
        self.records = ClusterRecords(kazoo, root)

    async def registered(self, name: str) -> bool:
        path = f"{brokers_path(self.root)}/{name}"
        return await asyncio.wait_for(asyncio.to_thread(self.kazoo.exists, path), ZK_S) is not None

    async def until(
        self, what: str, cond: Callable[[], Awaitable[bool]], timeout: float = SETTLE_S
    ) -> None:
        deadline = time.monotonic() + timeout
        while not await cond():
            self.check_alive()
            if time.monotonic() > deadline:
                raise AssertionError(f"seed {SEED}: not {what} in {timeout} s\n{self.logs()}")
            await asyncio.sleep(0.05)

    async def bookies_seen(self) -> dict[str, dict[str, str]]:
        return await asyncio.wait_for(
            asyncio.to_thread(available_bookies, self.kazoo, self.root), ZK_S
        )

    def logs(self) -> str:
        """The last lines of each broker's log (for a failure's message)."""
        return "".join(
            f"--- broker {n}:\n" + "".join(srv.log[-15:]) for n, srv in self.brokers.items()
        )

    def check_alive(self) -> None:
        for name, srv in self.brokers.items():
            if srv.proc is not None and srv.proc.poll() is not None:
                raise AssertionError(
                    f"seed {SEED}: broker {name} died on its own:\n" + "".join(srv.log[-30:])
                )

    async def settled(self, load: Load, since_acked: int) -> None:
        """Every broker registered, every partition owned, the writers going on again."""
        keys = {partition_key(load.topic, p) for p in range(PARTITIONS)}

        async def ready() -> bool:
            if not all([await self.registered(n) for n in NAMES]):
                return False
            owners = await asyncio.wait_for(self.records.owners(), ZK_S)
            return keys <= set(owners) and load.acked >= since_acked + 10 * PARTITIONS

        await self.until("the cluster settled", ready)

    async def hit(self, kind: str, rng: random.Random, load: Load) -> str:
        """Apply one fault and heal it; returns what was hit."""
        if kind == "client_cut":
            for proxy in self.client_proxies.values():
                proxy.drop_all()
            return "client proxies"
        if kind == "bookie_kill":
            bookie = rng.choice(self.bookies)
            address = bookie.address
            acked = load.acked
            bookie.kill()

            async def gone() -> bool:  # its registration expired; writes went on meanwhile
                view = await self.bookies_seen()
                return address not in view and load.acked >= acked + 5 * PARTITIONS

            await self.until(f"bookie {address} dropped", gone)
            await asyncio.to_thread(bookie.start)

            async def back() -> bool:
                view = await self.bookies_seen()
                return address in view

            await self.until(f"bookie {address} registered again", back)
            return address
        if kind in LINK_KINDS:
            return await self.hit_link(kind, rng, load)
        name = rng.choice(NAMES)
        srv, proxy = self.brokers[name], self.zk_proxies[name]

        async def unregistered() -> bool:
            return not await self.registered(name)

        if kind == "broker_kill":
            srv.kill()
            await asyncio.to_thread(srv.start)
        elif kind == "broker_pause":
            srv.pause()
            try:
                await self.until(f"{name}'s session expired", unregistered)
            finally:
                srv.resume()
        elif kind == "zk_expire":
            proxy.hold()
            proxy.drop_all()
            try:
                await self.until(f"{name}'s session expired", unregistered)
            finally:
                proxy.release()
        elif kind == "zk_blip":
            proxy.drop_all()
        else:
            raise AssertionError(kind)
        return name

    async def hit_link(self, kind: str, rng: random.Random, load: Load) -> str:
        """Cut, slow or stall broker -> bookie links for a while (drawn from ``rng``), then
        heal them; returns the links hit."""
        name = rng.choice(NAMES)
        bookie = rng.choice(self.bookies).address
        links = (
            [self.links[name, b.address] for b in self.bookies]
            if kind == "bookies_cut"
            else [self.links[name, bookie]]
        )
        what = f"{name}->{'all bookies' if kind == 'bookies_cut' else bookie}"
        hold_s = rng.uniform(0.5, 2 * BOOKIE_TIMEOUT_S)  # how long the fault lasts
        stall = kind == "bookie_slow" and rng.random() < 0.5
        delay = 2 * BOOKIE_TIMEOUT_S if stall else rng.uniform(0.01, 0.3)
        acked = load.acked
        for link in links:
            if kind == "bookie_slow":
                link.slow(delay)
            else:
                link.refuse()
        claims: list[tuple[Owner, int] | None] = []
        if kind == "bookies_cut":  # its partitions, from the next message each writes on
            claims = await self.claims(load.topic)
            load.cut_from = {
                p: load.next_n[p]
                for p, got in enumerate(claims)
                if got is not None and got[0].broker == name
            }
        try:
            started = time.monotonic()
            while time.monotonic() < started + hold_s:  # the fault's length, not a sync
                self.check_alive()
                await asyncio.sleep(0.05)
            if kind == "bookies_cut":
                after = await self.claims(load.topic)
                for p in list(load.cut_from):  # moved meanwhile: another owner could ack
                    if after[p] != claims[p]:
                        del load.cut_from[p]
                        load.acked_while_cut.pop(p, None)
                load.cut_partitions += len(load.cut_from)
                load.cuts += 1
                if load.acked_while_cut:  # at once: a cluster that acks so may wedge later
                    raise AssertionError(
                        f"seed {SEED}: writes attempted while {what} was cut off were "
                        f"acknowledged without a write quorum: {dict(load.acked_while_cut)}"
                    )
            if kind == "bookie_cut":  # the others' quorum goes on without that one link

                async def went_on() -> bool:
                    return load.acked >= acked + 5 * PARTITIONS

                await self.until(f"writes going on with {what} cut", went_on)
        finally:
            load.cut_from = {}
            for link in links:
                link.admit()
                link.slow(0)
                if stall:
                    link.drop_all()  # what a stall holds back would trickle for long
        return f"{what}{' stall' if stall else ''}"

    async def recover_all(self, topic: str) -> None:
        """Kill every broker and start them again, so each partition is read back from
        its bookies through the next owner's recovery, not from an owner's cache of the
        entries it wrote (which would hide an entry acknowledged but never stored)."""
        for srv in self.brokers.values():
            srv.kill()
        await asyncio.gather(*(asyncio.to_thread(srv.start) for srv in self.brokers.values()))
        keys = {partition_key(topic, p) for p in range(PARTITIONS)}

        async def claimed() -> bool:
            if not all([await self.registered(n) for n in NAMES]):
                return False
            owners = await asyncio.wait_for(self.records.owners(), ZK_S)
            return keys <= set(owners)

        await self.until("every partition claimed after the restart", claimed)

    async def claims(self, topic: str) -> list[tuple[Owner, int] | None]:
        """Each partition's claim (owner, generation) and the session holding it, or None."""
        return list(
            await asyncio.gather(
                *(self.records.owner(partition_key(topic, p)) for p in range(PARTITIONS))
            )
        )


def summary(
    faults: Counter[str], report: Report, load: Load, elapsed: float, hit: Counter[str]
) -> str:
    rows = [f"cluster fault schedule: seed {SEED}, {sum(faults.values())} faults, {elapsed:.0f} s"]
    rows.append("| fault | count |")
    rows.append("|---|---|")
    rows += [f"| {k} | {faults[k]} |" for k in sorted(faults)]
    rows.append(
        f"attempted {report.attempted}, acknowledged {report.acknowledged}, stored "
        f"{report.stored}, lost {len(report.lost)}, duplicated {len(report.duplicated)}, "
        f"reordered {len(report.reordered)}, commits acknowledged {report.commits_acked}, "
        f"commit checks {report.commit_checks}, lost commits {len(report.lost_commits)}"
    )
    rows.append(
        f"bookies_cut: {load.cut_partitions} partitions cut off from every bookie in "
        f"{load.cuts} cuts; writes attempted during a cut acknowledged before it ended: "
        f"{sum(load.acked_while_cut.values())}"
    )
    rows.append(f"targets {dict(hit)}; consumer retries {dict(load.consumer_errors)}")
    rows += [f"  e.g. {k}: {v}" for k, v in load.consumer_seen.items()]
    return "\n".join(rows)


def plan(n: int, rng: random.Random) -> list[str]:
    """``n`` faults drawn from KINDS; a short schedule has each bookie-link kind once."""
    if n >= 4 * len(KINDS):
        return [rng.choice(KINDS) for _ in range(n)]
    kinds = list(LINK_KINDS[:n]) + [rng.choice(KINDS) for _ in range(n - len(LINK_KINDS))]
    rng.shuffle(kinds)
    return kinds


async def run_schedule(
    brokers: dict[str, ServerProcess],
    bookies: list[BookieProcess],
    zk_proxies: dict[str, FaultyProxy],
    kazoo: KazooClient,
    root: str,
    topic: str,
    faults_wanted: int,
    links: LinkProxies,
) -> tuple[Report, str, dict[str, str], int]:
    rng = random.Random(SEED)
    client_proxies = {n: FaultyProxy(lambda n=n: brokers[n].port) for n in NAMES}  # type: ignore[misc]
    cluster = Cluster(brokers, bookies, zk_proxies, client_proxies, kazoo, root, links)
    load = Load(History(), topic)
    faults: Counter[str] = Counter()
    hit: Counter[str] = Counter()
    started = time.monotonic()
    print(f"cluster fault schedule: seed {SEED}, {faults_wanted} faults", file=sys.stderr)
    tasks: list[asyncio.Task[None]] = []
    try:
        async with weir.aio.Client(brokers["a"].endpoint) as admin:
            await admin.create_topic(topic, partitions=PARTITIONS, consumers=[CONSUMER])
        await cluster.settled(load, -10 * PARTITIONS)
        found = await asyncio.gather(
            *(cluster.records.owner(partition_key(topic, p)) for p in range(PARTITIONS))
        )
        for p, got in enumerate(found):
            home = got[0].broker if got is not None else NAMES[p % len(NAMES)]
            tasks.append(
                asyncio.create_task(write_partition(load, client_proxies[home].endpoint, p))
            )
        tasks.append(asyncio.create_task(consume(load, client_proxies["a"].endpoint)))
        async with weir.aio.Client(brokers["b"].endpoint) as asker:
            owners = Owners(asker, topic)
            try:
                await cluster.settled(load, 0)
                for i, kind in enumerate(plan(faults_wanted, rng)):
                    for t in tasks:
                        if t.done():
                            t.result()  # a load task that ended early: its error
                            raise AssertionError(f"seed {SEED}: a load task ended early")
                    before = load.acked
                    print(f"fault {i}: {kind}...", file=sys.stderr, flush=True)
                    target = await cluster.hit(kind, rng, load)
                    faults[kind] += 1
                    hit[target] += 1
                    await cluster.settled(load, before)
                    await observe_commits(load, owners, f"after fault {i} ({kind} {target})")
                    print(
                        f"fault {i}: {kind} {target}, {load.acked} acked, "
                        f"{load.commits} commits, {time.monotonic() - started:.0f} s",
                        file=sys.stderr,
                        flush=True,
                    )
                load.stop.set()
                await asyncio.gather(*tasks)
                await observe_commits(load, owners, "final")
            finally:
                await owners.close()
        await cluster.recover_all(topic)
        contents = await read_back(brokers["c"].endpoint, topic)
        for n in NAMES:  # each broker's ledger client went through its routes (its proxies)
            carried = sum(
                r.up_bytes
                for b in bookies
                for r in [*links[n, b.address].records, *links[n, b.address].open_connections()]
            )
            assert carried > 0, f"broker {n} never reached a bookie through its route"
    finally:
        load.stop.set()
        for t in tasks:
            t.cancel()
        if tasks:  # bounded: a writer closing against a broken cluster must not hang the test
            await asyncio.wait(tasks, timeout=30)
        for proxy in client_proxies.values():
            proxy.close()
    report = check(load.history, contents, {})
    table = summary(faults, report, load, time.monotonic() - started, hit)
    return report, table, load.consumer_seen, sum(load.acked_while_cut.values())


async def schedule(
    zookeeper: ZooKeeperServer,
    root: str,
    bookies: list[BookieProcess],
    zk_proxies: dict[str, FaultyProxy],
    brokers: dict[str, ServerProcess],
    kazoo: KazooClient,
    topic: str,
    faults: int,
    links: LinkProxies,
) -> None:
    report, table, load_errors, cut_acks = await run_schedule(
        brokers, bookies, zk_proxies, kazoo, root, topic, faults, links
    )
    print("\n" + table)
    assert report.violations() == {}, f"seed {SEED}: {report.summary()}"
    # a broker cut off from every bookie acknowledged nothing: no write quorum
    assert cut_acks == 0, f"seed {SEED}: {cut_acks} writes acknowledged without bookies"
    assert report.acknowledged > 0 and report.commits_acked > 0
    # what the consumer was told while partitions moved was retryable, never an internal error
    assert "InternalError" not in load_errors, f"seed {SEED}: {load_errors}"


@pytest.mark.timeout(240 + SHORT_FAULTS * 60)
async def test_the_cluster_loses_nothing_acknowledged_under_a_fault_schedule(
    zookeeper: ZooKeeperServer,
    shared_root: str,
    shared_bookies: list[BookieProcess],
    zk_proxies: dict[str, FaultyProxy],
    brokers: dict[str, ServerProcess],
    kazoo: KazooClient,
    bookie_proxies: LinkProxies,
) -> None:
    await schedule(
        zookeeper,
        shared_root,
        shared_bookies,
        zk_proxies,
        brokers,
        kazoo,
        "public/default/faults",
        SHORT_FAULTS,
        bookie_proxies,
    )


@pytest.mark.slow
@pytest.mark.timeout(240 + LONG_FAULTS * 60)
async def test_the_cluster_loses_nothing_acknowledged_under_a_long_fault_schedule(
    zookeeper: ZooKeeperServer,
    shared_root: str,
    shared_bookies: list[BookieProcess],
    zk_proxies: dict[str, FaultyProxy],
    brokers: dict[str, ServerProcess],
    kazoo: KazooClient,
    bookie_proxies: LinkProxies,
) -> None:
    await schedule(
        zookeeper,
        shared_root,
        shared_bookies,
        zk_proxies,
        brokers,
        kazoo,
        "public/default/faults-long",
        LONG_FAULTS,
        bookie_proxies,
    )
