"""The broker: the live topics of one data directory, protocol-agnostic.

Fronts call it. `Broker` is assembled from one mixin per concept, each in its own
module: `topic_admin` (create / alter / drop), `producer_admission` (partitions,
writers, access modes), `writes` (the write path, backlog quota), `consumer_offsets`
(consumers, offsets, groups), `transactions.facade`, `subscriptions.facade`, `retention` (and pin expiry,
run in the background), `compaction.facade` (runs, compacted reads, the threshold
trigger) and `tenancy.facade`; their shared state is `state.BrokerState`.
This module opens (recovers) and closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Mapping

from weir.broker.access import ProducerAccess
from weir.broker.cluster.broker_mode import ClusterMode
from weir.broker.compaction.facade import Compaction
from weir.broker.config import BrokerConfig
from weir.broker.consumer_offsets import ConsumerOffsets
from weir.broker.consumer_readers import ConsumerReaders
from weir.broker.consumers import OFFSETS, OffsetStore
from weir.broker.loop_commits import LoopCommits
from weir.broker.non_persistent import LiveSubscriptions
from weir.broker.observer import NULL_OBSERVER, BrokerObserver
from weir.broker.producer_admission import PRODUCER_EPOCHS, ProducerAdmission, stored_epochs
from weir.broker.producer_ids import ProducerIds
from weir.broker.producers import ProducerPins
from weir.broker.schema_admin import SchemaAdmin
from weir.broker.schemas import SCHEMAS, SchemaRegistry
from weir.broker.subscriptions import SUBSCRIPTIONS, Subscriptions
from weir.broker.subscriptions.facade import SubscriptionFacade
from weir.broker.tenancy.limits import SessionCounter
from weir.broker.tenancy.registry import NAMESPACES, Tenancy
from weir.broker.tiering import Tiering
from weir.broker.topics import NEXT_ID_KEY, PERSISTENT, TOPICS, TopicConfig, short_topic
from weir.broker.transactions.coordinator import TxnCoordinator
from weir.broker.transactions.facade import TransactionFacade
from weir.broker.transactions.producers import TXN_PRODUCERS
from weir.errors import BadRequestError, UnavailableError
from weir.storage.kv import delete, put
from weir.storage.partition import PartitionConfig
from weir.storage.store import Store
from weir.storage.tiered.remote_storage import RemoteStorage, S3Settings, open_storage

log = logging.getLogger("weir.broker")

PINS = "pins"  # legacy: pins used to be stored; emptied at open (see producers.py)
SERVER = "server"
BROKER_TABLES = (
    TOPICS,
    OFFSETS,
    PINS,
    SERVER,
    NAMESPACES,
    PRODUCER_EPOCHS,
    SUBSCRIPTIONS,
    SCHEMAS,
    TXN_PRODUCERS,
)
_U64 = struct.Struct("<Q")
_EPOCH_KEY = b"epoch"


def tier_storage(config: BrokerConfig) -> RemoteStorage:
    """The object store the config names (a directory under the data dir by default)."""
    return open_storage(
        config.tier_backend,
        local_dir=config.tier_local_dir or config.data_dir / "tier",
        s3=S3Settings(
            bucket=config.tier_s3_bucket,
            endpoint=config.tier_s3_endpoint,
            prefix=config.tier_s3_prefix,
            region=config.tier_s3_region,
            access_key=config.tier_s3_access_key,
            secret_key=config.tier_s3_secret_key,
        ),
    )


class Broker(
    TransactionFacade,
    Compaction,
    Tiering,
    SubscriptionFacade,
    SchemaAdmin,
    ConsumerOffsets,
    ProducerAdmission,
):
    """Open with `Broker.open`; close with `await broker.close()`."""

    def __init__(
        self,
        config: BrokerConfig,
        store: Store,
        generation: int,
        *,
        observer: BrokerObserver | None = None,
    ) -> None:
        self.config = config
        self.observer = observer or NULL_OBSERVER
        self.store = store
        self.generation = generation
        self.offsets = OffsetStore(store.kv, store.committer)
        self.commits = LoopCommits(store.committer, config.inline_commit_bytes)
        self._topics = {}
        self._backlog_quota = {}
        self._actors = {}
        self._groups = {}
        self.consumer_readers = ConsumerReaders()
        self.consumer_readers.add_source("read session", self._group_members)
        self.pins = ProducerPins(config.producer_idle_timeout_ms)
        self.tenancy = Tenancy(store.kv)
        self.producer_sessions = SessionCounter("producers")
        self.consumer_sessions = SessionCounter("consumers")
        self.access = ProducerAccess()
        self.producer_ids = ProducerIds(store.kv, store.committer, SERVER)
        self.subscriptions = Subscriptions(
            store.kv,
            store.committer,
            lambda t, p: self._actors.get((t, p)) or self._not_served(t, p),
            self._write_dead_letters,
            self.offsets,
            lambda *commit: self.observer.on_consumer_commit(*commit),
        )
        self._live = {}
        self.live_subscriptions = LiveSubscriptions(config.non_persistent_queue_bytes)
        self._views = {}
        self._trim_floors = {}
        self._compactions = {}
        self.compaction_hook = None
        self._compaction_test_hook = None
        self.schemas = SchemaRegistry(store.kv, self._commit)
        self.transactions = TxnCoordinator(self, store.kv, store.committer)
        self._retention_task: asyncio.Task[None] | None = None
        self._compaction_task: asyncio.Task[None] | None = None
        self._tier_task = None
        self._offload_locks = {}
        self._tier_backoff_s = 0.0
        self._tier_last_error = ""
        self._closed = False
        self._lock = asyncio.Lock()
        self.cluster = None

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    async def open(
        cls,
        config: BrokerConfig,
        *,
        observer: BrokerObserver | None = None,
        endpoints: Mapping[str, str] | None = None,
    ) -> Broker:
        """Open (or create) the data directory, recover every partition, start retention.

        ``storage.mode = "replicated"``: the data directory keeps the broker's own tables
        only; topics come from the cluster's catalog and partitions from the claims this
        broker wins (`weir.broker.cluster.broker_mode`). ``endpoints`` ({"native":
        "host:port"}) are published with the broker, so that clients asking another
        broker for a partition served here are told where to go."""
        replicated = config.storage_mode == "replicated"
        if config.storage_mode not in ("embedded", "replicated"):
            raise BadRequestError(
                f"storage.mode must be 'embedded' or 'replicated', not {config.storage_mode!r}"
            )
        store = await asyncio.to_thread(
            Store,
            config.data_dir,
            extra_tables=BROKER_TABLES,
            map_size=config.map_size,
            min_disk_free=config.min_disk_free,
            observer=(observer or NULL_OBSERVER).on_commit,
            read_cache_bytes=config.read_cache_bytes,
            tier_storage=None if replicated else tier_storage(config),
            tier_cache_bytes=config.tier_cache_bytes,
            tier_payload_grace_ms=int(config.tier_payload_grace_s * 1000),
            journal=config.journal,
        )
        broker: Broker | None = None
        try:
            raw = store.kv.get(SERVER, _EPOCH_KEY)
            generation = (_U64.unpack(raw)[0] if raw else 0) + 1
            store.committer.commit([put(SERVER, _EPOCH_KEY, _U64.pack(generation))])
            broker = cls(config, store, generation, observer=observer)
            catalog = None
            if replicated:
                broker.cluster = ClusterMode(
                    config,
                    broker._actors,
                    endpoints=endpoints,
                    partition_config=broker._claimed_config,
                )
                catalog = await broker.cluster.connect()
            await asyncio.to_thread(broker._load, catalog)
            # a transaction open at the last stop ends now, before anyone reads
            await broker.transactions.recover((t, p, a) for (t, p), a in broker._actors.items())
            if broker.cluster is not None:
                await broker.cluster.start(broker._catalog_changed)
        except BaseException:
            if broker is not None and broker.cluster is not None:
                await broker.cluster.stop()
            store.close()
            raise
        loop = asyncio.get_running_loop()
        broker._retention_task = loop.create_task(broker._retention_loop())
        if not replicated:  # replicated logs have neither compaction nor a tier yet
            broker._compaction_task = loop.create_task(broker._compaction_loop())
            broker._tier_task = loop.create_task(broker._tier_loop())
        log.info(
            "broker open",
            extra={
                "data_dir": str(config.data_dir),
                "generation": generation,
                "topics": len(broker._topics),
                "partitions": len(broker._actors),
            },
        )
        return broker

    def _load(self, catalog: Mapping[str, TopicConfig] | None = None) -> None:
        """Recover the broker's state; ``catalog``: the cluster's topics (replicated mode:
        their persistent partitions are opened when this broker claims them)."""
        if catalog is None:
            stored = [
                TopicConfig.from_json(v) for k, v in self.store.kv.scan(TOPICS) if k != NEXT_ID_KEY
            ]
        else:
            stored = list(catalog.values())
        # public/default, and the namespace of every topic stored before namespaces existed
        adopted = self.tenancy.adopt(sorted({c.name.rsplit("/", 1)[0] for c in stored}))
        if adopted:
            self.store.committer.commit(adopted)
        for cfg in stored:
            cfg = self.resolved(cfg)
            self._remember(cfg)
            if catalog is not None and cfg.kind == PERSISTENT:
                continue  # opened when claimed (ClusterMode)
            for p in range(cfg.partitions):
                self._open_partition(cfg, p)
        self.access = ProducerAccess(stored_epochs(self.store.kv))
        if self.store.tier is not None:
            self.store.tier.set_names(self._tier_names)
        self.subscriptions.load(self._topics.values())
        self.schemas.load()
        # Pins are derived from the partitions' producer tables; rows an older
        # version stored are dropped (the producer's state says where it writes).
        cleanup = self._load_views()
        if cleanup:  # blobs of compaction runs a crash cut short
            self.store.committer.commit(cleanup)
        legacy = [delete(PINS, bytes(k)) for k, _ in self.store.kv.scan(PINS)]
        if legacy:
            self.store.committer.commit(legacy)
            log.info("dropped %d stored producer pins: pins follow producer state", len(legacy))

    def _claimed_config(self, topic: str, partition: int) -> PartitionConfig | None:
        """Replicated mode: the config a partition this broker claims opens with."""
        cfg = self._topics.get(topic)
        return None if cfg is None else self._partition_config(cfg)

    async def _catalog_changed(self, catalog: dict[str, TopicConfig]) -> None:
        """Replicated mode: topics another broker created or changed (dropped ones stay
        known here until this broker restarts: dropping is not wired yet)."""
        if self._closed:
            return
        async with self._lock:
            new = [c for name, c in catalog.items() if self._topics.get(name) != c]
            adopted = self.tenancy.adopt(sorted({c.name.rsplit("/", 1)[0] for c in new}))
            if adopted:
                await self._commit(adopted)
            for cfg in new:
                before = self._topics.get(cfg.name)
                cfg = self.resolved(cfg)
                if before == cfg:
                    continue
                self._apply_topic_config(cfg)  # and to the partitions served here
                if before is None:
                    if cfg.kind != PERSISTENT:
                        for p in range(cfg.partitions):
                            self._open_partition(cfg, p)
                elif cfg.partitions > before.partitions:
                    self._grown(before, cfg)  # another broker added partitions

    def _tier_names(self, log_id: int) -> tuple[str, int]:
        """(topic, partition) of a storage log id, for the rows of offloaded segments."""
        tid = log_id >> 32
        for cfg in self._topics.values():
            if cfg.topic_id == tid:
                return short_topic(cfg.name), log_id & 0xFFFF_FFFF
        return str(tid), log_id & 0xFFFF_FFFF

    async def close(self) -> None:
        """Stop accepting work, finish in-flight commits, close LMDB."""
        if self._closed:
            return
        self._closed = True
        self.access.wake_all()
        await self.transactions.close()
        for task in (self._retention_task, self._compaction_task, self._tier_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self._close_compaction()
        for group in self._groups.values():
            group.close()
        await self.subscriptions.close()
        if self.cluster is not None:  # gives the partitions back (their actors close)
            await self.cluster.stop()
        await asyncio.gather(*(a.close() for a in self._actors.values()))
        for live in self._live.values():
            live.close(UnavailableError("server is shutting down"))
        await asyncio.to_thread(self.store.close)
        log.info("broker closed")
