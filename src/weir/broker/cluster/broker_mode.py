"""`ClusterMode`: what a `Broker` in ``storage.mode = "replicated"`` runs besides its local store.

The broker keeps its LMDB store for the tables that are its own (subscriptions);
namespaces, producer ids and producer epochs are in ZooKeeper, consumer offsets in
the partitions' logs; its topics come from the
cluster's `TopicCatalog` in ZooKeeper and its partitions from `Ownership`: when
this broker claims a partition, `ClusterPartitions` opens its replicated log under
the claim and builds its actor, and `ClusterMode` puts that actor into the
broker's actor table (the dict every broker path looks partitions up in); when it
loses or gives back the claim the actor leaves the table first, so a write that
arrives after that finds no actor and gets the retryable `UnavailableError`
naming the owner (`actor_now`). A watch on the catalog tells the broker of topics
other brokers create or change (``on_topics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from weir.broker.cluster.claims import partition_key, split_key
from weir.broker.cluster.log_host import ReplicatedLogHost
from weir.broker.cluster.log_subscriptions import LogSubscriptions
from weir.broker.cluster.namespace_catalog import ClusterTenancy, NamespaceCatalog
from weir.broker.cluster.offsets import LogOffsets
from weir.broker.cluster.ownership import Ownership, OwnershipConfig, zk_reachable
from weir.broker.cluster.partitions import ActorLimits, ClusterPartitions, ReplicatedActor
from weir.broker.cluster.producer_registry import ClusterEpochs, ClusterProducerIds
from weir.broker.cluster.schema_catalog import ClusterSchemas
from weir.broker.cluster.topic_catalog import TopicCatalog, topics_path
from weir.broker.cluster.topic_drop import drop_partitions
from weir.broker.config import BrokerConfig
from weir.broker.partition_actor import PartitionActor
from weir.broker.topics import PERSISTENT, TopicConfig, short_topic
from weir.errors import UnavailableError
from weir.replication.ledger import LedgerClient
from weir.replication.managed_log import ManagedLogConfig
from weir.replication.partition_log import ReplicationConfig
from weir.storage.partition import PartitionConfig

if TYPE_CHECKING:
    from weir.broker.broker import Broker

log = logging.getLogger("weir.cluster")

ActorTable = MutableMapping[tuple[str, int], PartitionActor[Any]]


def node_id(broker_id: str) -> int:
    """A broker's number for fronts that name nodes by number (Kafka's node id, YDB's
    node_id): derived from its id, so every broker computes the same one (>= 1)."""
    return (zlib.crc32(broker_id.encode()) & 0x7FFF_FFFF) or 1


@dataclass(frozen=True, slots=True)
class PartitionOwner:
    """Who serves a partition (the answer to a client's Lookup): ``broker`` empty when
    nobody does now (it is moving); ``local`` when the broker asked does."""

    partition: int
    broker: str = ""
    generation: int = 0
    endpoints: Mapping[str, str] = field(default_factory=dict)
    local: bool = False


class _BrokerHost:
    """`ClusterPartitions` whose actors also live in the broker's actor table."""

    def __init__(self, parts: ClusterPartitions, actors: ActorTable) -> None:
        self.parts = parts
        self.actors = actors
        # told (topic, partition) once a claimed partition serves, and as one leaves
        # (the broker's subscriptions load and drop their cursors there)
        self.on_acquired: Callable[[str, int], None] | None = None
        self.on_released: Callable[[str, int], None] | None = None

    async def acquire(self, key: str, generation: int) -> None:
        await self.parts.acquire(key, generation)
        self.actors[split_key(key)] = self.parts.actors[key]
        self._tell(self.on_acquired, key)

    async def release(self, key: str, *, graceful: bool) -> None:
        self.actors.pop(split_key(key), None)  # no new request reaches it from now on
        self._tell(self.on_released, key)
        await self.parts.release(key, graceful=graceful)

    @staticmethod
    def _tell(hook: Callable[[str, int], None] | None, key: str) -> None:
        if hook is None:
            return
        try:
            hook(*split_key(key))
        except Exception:  # the claim stands whatever a listener does
            log.exception("a partition listener failed", extra={"partition": key})


class ClusterMode:
    """The ledger client, topic catalog, partitions and ownership of a replicated broker."""

    def __init__(
        self,
        config: BrokerConfig,
        actors: ActorTable,
        *,
        endpoints: Mapping[str, str] | None = None,
        ownership: OwnershipConfig | None = None,
        partition_config: Callable[[str, int], PartitionConfig | None] | None = None,
    ) -> None:
        """``partition_config(topic, partition)``: the config a claimed partition opens
        with (its topic's retention, limits, dedup; None: the defaults)."""
        self.config = config
        self.broker_id = config.cluster_broker_id or (endpoints or {}).get("native", "")
        if not self.broker_id:
            raise ValueError("a replicated broker needs cluster.broker_id or a listen address")
        self.client = LedgerClient(
            config.cluster_zookeeper,
            root=config.cluster_root,
            zk_timeout=config.cluster_session_timeout_s,
            request_timeout=config.cluster_bookie_timeout_s,
            routes=dict(config.cluster_bookie_routes),
        )
        self.catalog = TopicCatalog(self.client.zk, config.cluster_root)
        self.namespaces = NamespaceCatalog(self.client.zk, config.cluster_root)
        self.producer_ids = ClusterProducerIds(self.client.zk, config.cluster_root)
        self.epochs = ClusterEpochs(self.client.zk, config.cluster_root)
        self.schemas = ClusterSchemas(self.client.zk, config.cluster_root)
        self._schemas_reload: asyncio.Task[None] | None = None
        self._epochs_reload: asyncio.Task[None] | None = None
        self._on_epochs: Callable[[dict[int, tuple[int, str | None]]], None] | None = None
        # the broker's, loaded at connect
        self.tenancy = ClusterTenancy(self.namespaces, self.catalog.names)
        self.managed_log = ManagedLogConfig(
            ensemble_size=config.cluster_ensemble_size,
            write_quorum=config.cluster_write_quorum,
            ack_quorum=config.cluster_ack_quorum,
        )
        replication = ReplicationConfig(self.managed_log)
        self.partitions = ClusterPartitions(
            ReplicatedLogHost(
                self.client,
                self.broker_id,
                replication,
                config_of=None
                if partition_config is None
                else lambda key: partition_config(*split_key(key)),
            ),
            ActorLimits(config.max_partition_queue_bytes, config.max_commit_bytes),
        )
        self.host = _BrokerHost(self.partitions, actors)
        self.ownership = Ownership(
            config.cluster_zookeeper,
            config.cluster_root,
            self.broker_id,
            self.host,
            endpoints=endpoints,
            config=ownership or OwnershipConfig(session_timeout=config.cluster_session_timeout_s),
        )
        self.partitions.attach(self.ownership)
        self._on_topics: Callable[[dict[str, TopicConfig]], Awaitable[None]] | None = None
        self._refresh: asyncio.Task[None] | None = None
        self._on_namespaces: Callable[[], Awaitable[None]] | None = None
        self._ns_refresh: asyncio.Task[None] | None = None
        self._dirty = self._ns_dirty = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = False

    @classmethod
    def of_broker(cls, broker: Broker, endpoints: Mapping[str, str] | None) -> ClusterMode:
        """The cluster side of ``broker``: claimed partitions open with their topic's
        config and enter its actor table; catalog changes reach its topics
        (`catalog_changed`, once `start` runs)."""
        mode = cls(
            broker.config,
            broker._actors,
            endpoints=endpoints,
            partition_config=lambda topic, partition: claimed_config(broker, topic, partition),
        )
        mode._on_topics = lambda catalog: catalog_changed(broker, catalog)
        mode._on_namespaces = broker._namespaces_changed
        broker.offsets = LogOffsets(broker._actors, broker._topics)  # in the logs
        subs = LogSubscriptions(  # cursors in the logs too
            broker.store.kv,
            broker.store.committer,
            lambda t, p: broker._actors.get((t, p)) or broker._not_served(t, p),
            lambda t, p: broker._actors.get((t, p)),
            broker._write_dead_letters,
        )
        broker.subscriptions = subs

        def opened(topic: str, partition: int) -> None:
            cfg = broker._topics.get(topic)
            if cfg is not None:
                subs.partition_opened(cfg, partition)

        mode.host.on_acquired = opened
        mode.host.on_released = subs.partition_closed
        broker.tenancy = mode.tenancy  # namespaces in ZooKeeper
        broker.producer_ids = mode.producer_ids  # producer ids and epochs too
        broker.schemas = mode.schemas  # and schemas
        mode._on_epochs = lambda epochs: observe_epochs(broker, epochs)
        return mode

    async def connect(self) -> dict[str, TopicConfig]:
        """Connect to ZooKeeper, lay out the cluster's nodes; the topics of the cluster."""
        self._loop = asyncio.get_running_loop()
        zk = self.config.cluster_zookeeper
        try:
            await self.client.start(timeout=max(self.config.cluster_session_timeout_s, 1.0))
        except Exception as exc:  # kazoo's timeout: no server answered
            await self.client.close()
            raise UnavailableError(
                f"cannot reach the cluster's ZooKeeper at {zk} (cluster.zookeeper): {exc!r}"
            ) from None
        await self.catalog.ensure_layout()
        await self.namespaces.ensure_layout()
        await self.schemas.ensure_layout()
        await self.epochs.ensure_layout()
        await self.tenancy.load()
        await self.schemas.reload()
        return await self.catalog.topics()

    async def start(
        self,
        on_topics: Callable[[dict[str, TopicConfig]], Awaitable[None]] | None = None,
        on_namespaces: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Follow the catalogs (``on_topics``, else the broker's `catalog_changed`, hears
        every topic after a change; ``on_namespaces``, after `tenancy` has read the
        namespaces again) and start claiming partitions."""
        if on_topics is not None:
            self._on_topics = on_topics
        if on_namespaces is not None:
            self._on_namespaces = on_namespaces
        path = topics_path(self.config.cluster_root)
        ChildrenWatch(self.client.zk, path, self._topics_changed)  # created, deleted
        DataWatch(self.client.zk, path, self._topics_changed)  # changed (TopicCatalog.update)
        DataWatch(self.client.zk, self.namespaces.path, self._namespaces_changed)
        DataWatch(self.client.zk, self.schemas.path, self._schemas_changed)
        DataWatch(self.client.zk, self.epochs.path, self._epochs_changed)
        await self.ownership.start()

    def _topics_changed(self, *_: object) -> bool | None:
        loop = self._loop
        if self._stopped or loop is None or loop.is_closed():
            return False  # stop watching
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._schedule_refresh)
        return None

    def _namespaces_changed(self, *_: object) -> bool | None:
        loop = self._loop
        if self._stopped or loop is None or loop.is_closed():
            return False  # stop watching
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._schedule_ns_refresh)
        return None

    def _schemas_changed(self, *_: object) -> bool | None:
        loop = self._loop
        if self._stopped or loop is None or loop.is_closed():
            return False  # stop watching
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._schedule_schemas_reload)
        return None

    def _schedule_schemas_reload(self) -> None:
        if self._stopped:
            return
        prev = self._schemas_reload
        self._schemas_reload = asyncio.get_running_loop().create_task(self._reload_schemas(prev))

    async def _reload_schemas(self, prev: asyncio.Task[None] | None) -> None:
        if prev is not None:  # one after the other: the last read is the latest
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await prev
        try:
            await self.schemas.reload()
        except Exception:  # the watch fires again on the next change, and on reconnect
            log.warning("cannot read the schemas", exc_info=True)

    def _epochs_changed(self, *_: object) -> bool | None:
        loop = self._loop
        if self._stopped or loop is None or loop.is_closed():
            return False  # stop watching
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._schedule_epochs_reload)
        return None

    def _schedule_epochs_reload(self) -> None:
        if self._stopped:
            return
        prev = self._epochs_reload
        self._epochs_reload = asyncio.get_running_loop().create_task(self._reload_epochs(prev))

    async def _reload_epochs(self, prev: asyncio.Task[None] | None) -> None:
        """Another broker's exclusive producer may have taken a topic: the broker fences
        its own sessions of other producers of it (`ProducerAccess.observe`)."""
        if prev is not None:  # one after the other
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await prev
        try:
            epochs = await self.epochs.all()
        except Exception:  # the watch fires again on the next change, and on reconnect
            log.warning("cannot read the producer epochs", exc_info=True)
            return
        if self._on_epochs is not None and not self._stopped:
            self._on_epochs(epochs)

    def _schedule_ns_refresh(self) -> None:
        if self._stopped:
            return
        self._ns_dirty = True  # a read already under way may predate the change: read again
        if self._ns_refresh is None or self._ns_refresh.done():
            self._ns_refresh = asyncio.get_running_loop().create_task(self._follow_namespaces())

    async def _follow_namespaces(self) -> None:
        while self._ns_dirty and not self._stopped:
            self._ns_dirty = False
            await self.refresh_namespaces()

    async def refresh_namespaces(self) -> None:
        """Read the tenants and namespaces again and tell the broker."""
        try:
            await self.tenancy.load()
        except Exception:  # the watch fires again on the next change, and on reconnect
            log.warning("cannot read the namespace catalog", exc_info=True)
            return
        if self._on_namespaces is not None and not self._stopped:
            await self._on_namespaces()

    def _schedule_refresh(self) -> None:
        if self._stopped:
            return
        self._dirty = True  # a read already under way may predate the change: read again
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.get_running_loop().create_task(self._follow_topics())

    async def _follow_topics(self) -> None:
        while self._dirty and not self._stopped:
            self._dirty = False
            await self.refresh()

    async def refresh(self) -> None:
        """Read the catalog again and hand it to the broker."""
        try:
            topics = await self.catalog.topics()
        except Exception:  # the watch fires again on the next change, and on reconnect
            log.warning("cannot read the topic catalog", exc_info=True)
            return
        if self._on_topics is not None and not self._stopped:
            await self._on_topics(topics)

    async def create_topic(self, cfg: TopicConfig) -> TopicConfig:
        """Record a new topic in the catalog, in one transaction with a check that its
        namespace is neither gone nor being deleted."""
        return await self.catalog.create(cfg, guard=lambda: self.tenancy.guard(cfg.name))

    async def drop_topic(self, cfg: TopicConfig) -> None:
        """Drop the topic from the cluster: its partitions (their owners let go, their
        managed logs and ledgers are deleted), then its catalog record
        (`weir.broker.cluster.topic_drop`)."""
        await drop_partitions(
            self.client,
            self.catalog.records,
            [partition_key(cfg.name, p) for p in range(cfg.partitions)],
            self.managed_log,
            wait_s=2 * self.config.cluster_session_timeout_s,
        )
        await self.epochs.drop(cfg.topic_id)
        await self.schemas.delete(cfg.topic_id)
        await self.catalog.delete(cfg.name)

    def actor_now(self, topic: str, partition: int) -> ReplicatedActor:
        """The actor if this broker serves the partition; else UnavailableError naming the
        owner (retryable: the client goes there or tries again)."""
        return self.partitions.actor_now(topic, partition)

    async def publish(self, endpoints: Mapping[str, str]) -> None:
        """Publish more of this broker's endpoints (fronts started after it joined)."""
        await self.ownership.publish(endpoints)

    async def live_brokers(self) -> dict[str, dict[str, str]]:
        """The live brokers of the cluster and their endpoints by front."""
        return {
            b: {str(k): str(v) for k, v in eps.items()}
            for b, eps in (await self.ownership.brokers()).items()
        }

    async def owners(self, topic: str, partitions: Sequence[int]) -> list[PartitionOwner]:
        """Who serves each of ``partitions`` of ``topic``, as ZooKeeper says now (a partition
        claimed here but not open yet counts as moving)."""
        own = self.ownership
        live: dict[str, dict[str, Any]] | None = None
        out: list[PartitionOwner] = []
        for p in partitions:
            key = partition_key(topic, p)
            gen = own.serving(key)
            if gen is not None and key in self.partitions.actors:
                out.append(PartitionOwner(p, self.broker_id, gen, dict(own.endpoints), True))
                continue
            with zk_reachable(f"looking up the owner of {key}"):
                got = await own.records.owner(key)
                if got is None or got[0].broker == self.broker_id:
                    out.append(PartitionOwner(p))
                    continue
                if live is None:
                    live = await own.brokers()
            owner = got[0]
            eps = {str(k): str(v) for k, v in live.get(owner.broker, {}).items()}
            out.append(PartitionOwner(p, owner.broker, owner.generation, eps))
        return out

    async def stop(self) -> None:
        """Give every partition back gracefully, leave the cluster, close the client."""
        if self._stopped:
            return
        self._stopped = True
        for task in (self._refresh, self._ns_refresh, self._schemas_reload, self._epochs_reload):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        try:
            await self.ownership.stop()
        finally:
            await self.client.close()


def observe_epochs(broker: Broker, epochs: Mapping[int, tuple[int, str | None]]) -> None:
    """The cluster's producer epochs reach ``broker``'s producer registry."""
    if broker.closed:
        return
    names = {c.topic_id: c.name for c in broker._topics.values()}
    for topic_id, (epoch, holder) in epochs.items():
        name = names.get(topic_id)
        if name is not None:
            broker.access.observe(topic_id, short_topic(name), epoch, holder)


def claimed_config(broker: Broker, topic: str, partition: int) -> PartitionConfig | None:
    """The config a partition ``broker`` claims opens with (None: its topic is unknown)."""
    cfg = broker._topics.get(topic)
    return None if cfg is None else broker._partition_config(cfg)


async def catalog_changed(broker: Broker, catalog: dict[str, TopicConfig]) -> None:
    """Topics another broker created, changed or dropped reach ``broker``."""
    if broker.closed:
        return
    async with broker._lock:
        await broker._catalog_dropped(catalog)
        new = [c for name, c in catalog.items() if broker._topics.get(name) != c]
        adopted = broker.tenancy.adopt(sorted({c.name.rsplit("/", 1)[0] for c in new}))
        if adopted:
            await broker._commit(adopted)
        for cfg in new:
            before = broker._topics.get(cfg.name)
            cfg = broker.resolved(cfg)
            if before == cfg:
                continue
            broker._apply_topic_config(cfg)  # and to the partitions served here
            if before is None:
                if cfg.kind != PERSISTENT:
                    for p in range(cfg.partitions):
                        broker._open_partition(cfg, p)
            elif cfg.partitions > before.partitions:
                broker._grown(before, cfg)  # another broker added partitions
