"""`Ownership`: one broker's side of the cluster: membership, claims, placement when leader.

Each broker registers itself (an ephemeral node), and whenever anything changes
(brokers, partitions, assignments, claims; and every ``reconcile_interval`` as a
safety net) it *reconciles*: it claims the partitions placement assigns to it
(`ClusterRecords.claim`: a new generation) and asks its `PartitionHost` to
acquire them (open the partition's managed log, which fences the previous
owner); it releases the ones assigned elsewhere (gracefully: the host closes the
partition, then the claim goes, so the next owner opens without a recovery).
One broker at a time is the leader (an ephemeral node) and runs the placement
policy (`placement.place`) on every change.

**Session loss.** The claims are ephemeral: when this broker's ZooKeeper session
expires they are gone and other brokers may take the partitions. So the moment
kazoo reports the session LOST, every partition stops being served (`serving`
answers None at once) and the host abandons them (no close: the next owner
recovers and fences). While the connection is only SUSPENDED (the session may
still live), nothing is served either; serving resumes if the same session
reconnects. Either way the fencing of the managed log is what makes a write
acknowledged after the handover impossible; this only stops serving sooner.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry

from weir.broker.cluster.claims import (
    Assignment,
    ClusterRecords,
    Owner,
    brokers_path,
    epoch_path,
    leader_path,
    owners_path,
    partitions_path,
)
from weir.broker.cluster.placement import place
from weir.errors import UnavailableError

log = logging.getLogger("weir.cluster")

# a broker's ZooKeeper connection is down or being re-established (kazoo fails a call
# made while it reconnects with SessionExpiredError at once): for a client, retryable
ZK_UNREACHABLE = (ConnectionLoss, SessionExpiredError, OperationTimeoutError)


@contextlib.contextmanager
def zk_reachable(what: str) -> Iterator[None]:
    """Turn "ZooKeeper cannot be reached now" into the retryable `UnavailableError` (a
    client's lookup asked of a broker cut off from ZooKeeper; not an internal error)."""
    try:
        yield
    except ZK_UNREACHABLE as exc:
        raise UnavailableError(
            f"{what}: this broker cannot reach ZooKeeper now ({type(exc).__name__}); retry"
        ) from exc


class PartitionHost(Protocol):
    """What a broker does when it gains or loses a partition."""

    async def acquire(self, key: str, generation: int) -> None:
        """Start serving ``key`` (raise to give the claim back; it is retried later)."""

    async def release(self, key: str, *, graceful: bool) -> None:
        """Stop serving ``key``: close it (``graceful``) or drop it at once (the session was
        lost: another broker may already own it)."""


@dataclass(frozen=True, slots=True)
class OwnershipConfig:
    session_timeout: float = 10.0
    reconcile_interval: float = 5.0


class Ownership:
    def __init__(
        self,
        zk_hosts: str,
        root: str,
        broker_id: str,
        host: PartitionHost,
        *,
        endpoints: Mapping[str, str] | None = None,
        config: OwnershipConfig | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.host = host
        self.endpoints = dict(endpoints or {})
        self.config = config or OwnershipConfig()
        self.root = root
        self.zk = KazooClient(
            hosts=zk_hosts,
            timeout=self.config.session_timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
        )
        self.records = ClusterRecords(self.zk, root)
        self.owned: dict[str, int] = {}  # partition key -> generation of our claim
        self.suspended = False
        self.is_leader = False
        self.reconciles = 0
        self.placements = 0
        self.session_losses = 0  # sessions expired under this broker (a claim dies with each)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._lost: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        # the claims as of the last reconcile (partition -> owner): a synchronous answer to
        # "who serves it", possibly a reconcile old (`lookup` asks ZooKeeper)
        self.owners_seen: dict[str, Owner] = {}
        self.brokers_seen: dict[str, dict[str, Any]] = {}  # live brokers -> their endpoints

    # ------------------------------------------------------------------ lifecycle

    async def start(self, timeout: float = 30) -> Ownership:
        self._loop = asyncio.get_running_loop()
        self.zk.add_listener(self._listener)
        await asyncio.to_thread(self.zk.start, timeout)
        await self.records.ensure_layout()
        for path in (brokers_path, partitions_path, owners_path):
            ChildrenWatch(self.zk, path(self.root), self._watch_fired)
        DataWatch(self.zk, epoch_path(self.root), self._watch_fired)
        DataWatch(self.zk, leader_path(self.root), self._watch_fired)
        await self.reconcile()
        self._task = self._loop.create_task(self._run(), name=f"ownership-{self.broker_id}")
        return self

    async def stop(self) -> None:
        """Release every partition gracefully, leave the cluster, close the session."""
        if self._stopped:
            return
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        try:
            async with self._lock:
                for key in list(self.owned):
                    await self._release(key, graceful=True)
        finally:  # the session goes even if a release failed (its claims go with it)
            await asyncio.to_thread(self.zk.stop)
            await asyncio.to_thread(self.zk.close)

    # ------------------------------------------------------------------ queries

    def serving(self, key: str) -> int | None:
        """The generation this broker serves ``key`` at; None when it must not serve it."""
        if self.suspended:
            return None
        return self.owned.get(key)

    def check_serving(self, key: str) -> int:
        gen = self.serving(key)
        if gen is None:
            raise UnavailableError(
                f"partition {key} is not served by broker {self.broker_id}: look it up again"
            )
        return gen

    async def lookup(self, key: str) -> tuple[str, dict[str, Any], int] | None:
        """(broker id, its endpoints, generation) of the broker owning ``key``, if any;
        UnavailableError (retryable) while ZooKeeper cannot be reached."""
        with zk_reachable(f"looking up the owner of {key}"):
            got = await self.records.owner(key)
            if got is None:
                return None
            owner, _ = got
            return owner.broker, (await self.brokers()).get(owner.broker, {}), owner.generation

    async def brokers(self) -> dict[str, dict[str, Any]]:
        """The live brokers and their endpoints."""
        base = brokers_path(self.root)
        out: dict[str, dict[str, Any]] = {}
        for child in await asyncio.to_thread(self.zk.get_children, base):
            with contextlib.suppress(NoNodeError):
                data, _ = await asyncio.to_thread(self.zk.get, f"{base}/{child}")
                out[child] = json.loads(data or b"{}").get("endpoints", {})
        return out

    async def publish(self, endpoints: Mapping[str, str]) -> None:
        """Add ``endpoints`` to this broker's (fronts that listen only once the broker is
        open: Kafka, Pulsar), so lookups elsewhere name them."""
        self.endpoints.update(endpoints)
        async with self._lock:
            if self._stopped or self.suspended:
                return  # the next registration writes them
            path = f"{brokers_path(self.root)}/{self.broker_id}"
            value = json.dumps({"endpoints": self.endpoints}, sort_keys=True).encode()
            session = self.zk.client_id[0] if self.zk.client_id else None
            with contextlib.suppress(NoNodeError):
                _, stat = await asyncio.to_thread(self.zk.get, path)
                if stat.ephemeralOwner == session:
                    await asyncio.to_thread(self.zk.set, path, value, stat.version)

    # ------------------------------------------------------------------ admin

    async def add_partitions(self, keys: list[str]) -> None:
        await self.records.add_partitions(keys)

    async def remove_partitions(self, keys: list[str]) -> None:
        await self.records.remove_partitions(keys)

    async def unload(self, key: str, to: str | None = None) -> None:
        """Move ``key`` off its broker: to broker ``to`` (pinned there: placement does not
        move it for balance while ``to`` lives), or wherever placement puts it other than
        where it is (unpinned)."""
        while True:
            got = await self.records.assignment(key)
            if got is None:
                raise UnavailableError(f"no partition {key} in the cluster")
            a, version = got
            owner = await self.records.owner(key)
            leaving = owner[0].broker if owner is not None else a.broker
            new = Assignment(to, None if to else leaving, a.generation, pinned=to is not None)
            if await self.records.set_assignment(key, new, version):
                await self.records.bump_epoch()
                return

    def give_up(self, key: str, generation: int, why: str) -> None:
        """Stop serving ``key`` (held under ``generation``) now and release its log and
        claim in the background, without a snapshot: its log was fenced by another opener
        (that claim is over even if this session has not heard yet: paused, then resumed),
        or failed and must be opened again (the next owner, maybe this broker, recovers
        it). The next reconcile follows placement."""
        if self.owned.get(key) != generation:
            return
        self.owned.pop(key, None)
        log.warning("%s %s at generation %d: released", key, why, generation, extra=self._extra())
        loop = asyncio.get_running_loop()
        task = loop.create_task(self._give_back(key, generation))
        self._lost.add(task)
        task.add_done_callback(self._lost.discard)

    async def _give_back(self, key: str, generation: int) -> None:
        try:
            await self.host.release(key, graceful=False)
        except Exception:
            log.exception("dropping fenced %s failed", key, extra=self._extra())
        with contextlib.suppress(KazooException):
            await self.records.release(key, generation)
        self._kick.set()

    # ------------------------------------------------------------------ events

    def _watch_fired(self, *args: object) -> None:
        """A kazoo watch (its thread): reconcile soon, on the event loop."""
        self._call_soon(self._kick.set)

    def _listener(self, state: str) -> None:
        self._call_soon(self._on_state, state)

    def _call_soon(self, fn: Callable[..., object], *args: object) -> None:
        """From a kazoo thread to the event loop (nothing once stopped or the loop closed)."""
        loop = self._loop
        if loop is None or self._stopped:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(fn, *args)

    def _on_state(self, state: str) -> None:
        if state == KazooState.SUSPENDED:
            self.suspended = True
            log.warning("zookeeper connection suspended: not serving", extra=self._extra())
        elif state == KazooState.LOST:
            self.suspended = True
            self.session_losses += 1
            self.is_leader = False
            lost = list(self.owned)
            self.owned.clear()  # stop serving now; the host drops them below
            log.warning(
                "zookeeper session lost: dropping %d partitions", len(lost), extra=self._extra()
            )
            task = asyncio.get_running_loop().create_task(self._drop(lost))
            self._lost.add(task)
            task.add_done_callback(self._lost.discard)
        else:  # CONNECTED
            self.suspended = False
            self._kick.set()

    async def _drop(self, keys: list[str]) -> None:
        for key in keys:
            try:
                await self.host.release(key, graceful=False)
            except Exception:
                log.exception("dropping %s failed", key, extra=self._extra())

    def _extra(self) -> dict[str, str]:
        return {"broker": self.broker_id}

    async def _run(self) -> None:
        # not `while True`: Python 3.11's wait_for can swallow a cancel that comes as the
        # kick is set, and stop() would wait for this task forever
        while not self._stopped:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.reconcile_interval):
                    await self._kick.wait()
            self._kick.clear()
            try:
                await self.reconcile()
            except (KazooException, OSError) as exc:
                log.warning("reconcile failed: %r", exc, extra=self._extra())
            except Exception:
                log.exception("reconcile failed", extra=self._extra())

    # ------------------------------------------------------------------ reconcile

    async def reconcile(self) -> None:
        """Register, lead if no one does, then claim and release to match placement."""
        async with self._lock:
            if self._stopped or self.suspended or self._lost:
                return
            self.reconciles += 1
            await self._register()
            await self._elect()
            if self.is_leader:
                await self._place()
            await self._follow()

    async def _register(self) -> None:
        path = f"{brokers_path(self.root)}/{self.broker_id}"
        value = json.dumps({"endpoints": self.endpoints}, sort_keys=True).encode()
        session = self.zk.client_id[0] if self.zk.client_id else None
        try:
            await asyncio.to_thread(self.zk.create, path, value, ephemeral=True)
        except NodeExistsError:
            _, stat = await asyncio.to_thread(self.zk.get, path)
            if stat.ephemeralOwner != session:  # our previous session's, not yet expired
                with contextlib.suppress(NoNodeError):
                    await asyncio.to_thread(self.zk.delete, path, version=stat.version)
                await asyncio.to_thread(self.zk.create, path, value, ephemeral=True)

    async def _elect(self) -> None:
        path = leader_path(self.root)
        session = self.zk.client_id[0] if self.zk.client_id else None
        try:
            await asyncio.to_thread(self.zk.create, path, self.broker_id.encode(), ephemeral=True)
        except NodeExistsError:
            with contextlib.suppress(NoNodeError):
                _, stat = await asyncio.to_thread(self.zk.get, path)
                self.is_leader = stat.ephemeralOwner == session
                return
            self.is_leader = False
            return
        self.is_leader = True
        log.info("leading placement", extra=self._extra())

    async def _place(self) -> None:
        assignments = await self.records.assignments()
        live = list(await self.brokers())
        current = {k: a.broker for k, (a, _) in assignments.items()}
        avoid = {k: a.avoid for k, (a, _) in assignments.items() if a.avoid}
        pinned = {k for k, (a, _) in assignments.items() if a.pinned}
        target = place(assignments, live, current, avoid=avoid, pinned=pinned)
        changed = False
        for key, (a, version) in assignments.items():
            want = target.get(key)
            if want != a.broker or a.avoid is not None:
                new = Assignment(want, None, a.generation, pinned=a.pinned and want == a.broker)
                changed |= await self.records.set_assignment(key, new, version)
        if changed:
            self.placements += 1
            await self.records.bump_epoch()

    async def _follow(self) -> None:
        assignments = await self.records.assignments()
        owners = await self.records.owners()
        self.owners_seen = owners
        self.brokers_seen = await self.brokers()
        # claims we hold that are gone or newer than ours: someone else owns it now
        for key, gen in list(self.owned.items()):
            o = owners.get(key)
            if o is None or o.broker != self.broker_id or o.generation != gen:
                self.owned.pop(key, None)
                await self.host.release(key, graceful=False)
        for key in [k for k in self.owned if k not in assignments]:
            await self._release(key, graceful=True)  # the partition was removed
        acquire: list[tuple[str, int]] = []
        for key, (a, _) in assignments.items():
            if key in self.owned:
                if a.broker != self.broker_id:
                    await self._release(key, graceful=True)  # unloaded or rebalanced
                continue
            if a.broker != self.broker_id:
                continue
            o = owners.get(key)
            if o is not None and o.broker == self.broker_id:
                # a claim of ours this broker does not hold (a previous session's, or left
                # by a failed acquire): give it back, claim afresh next round
                await self.records.release(key, o.generation)
                continue
            if o is not None:
                continue  # its previous owner still holds it: wait for its release
            claimed = await self.records.claim(key, self.broker_id)
            if claimed is not None:
                acquire.append((key, claimed))
        if acquire:
            await asyncio.gather(*(self._acquire(k, g) for k, g in acquire))

    async def _acquire(self, key: str, generation: int) -> None:
        session = self.session_losses
        try:
            await self.host.acquire(key, generation)
        except Exception as exc:
            log.warning("could not acquire %s: %r; claim given back", key, exc, extra=self._extra())
            with contextlib.suppress(KazooException):
                await self.records.release(key, generation)
            return
        if self.suspended or self.session_losses != session:
            # the session (and the claim with it) went while the host opened it, even if a
            # new session is connected by now: do not serve it; claim afresh next round
            await self.host.release(key, graceful=False)
            return
        self.owned[key] = generation

    async def _release(self, key: str, *, graceful: bool) -> None:
        gen = self.owned.pop(key, None)
        try:
            await self.host.release(key, graceful=graceful)
        finally:
            if gen is not None:
                try:
                    await self.records.release(key, gen)
                except KazooException as exc:
                    # the session is gone (so is its ephemeral claim) or ZooKeeper is
                    # unreachable (the claim goes when the session expires)
                    log.warning("releasing the claim of %s: %r", key, exc, extra=self._extra())
