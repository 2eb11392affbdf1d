"""The broker: the live topics of one data directory, protocol-agnostic.

Fronts call it; it owns the storage, one `PartitionActor` per partition, the
topic registry, committed offsets, producer pins (`producers.ProducerPins`) and
producer access modes and epochs (`access.ProducerAccess`), consumer groups, and runs retention (and pin expiry) in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from weir.access_mode import AccessMode
from weir.broker.access import Claim, Fence, ProducerAccess
from weir.broker.config import BrokerConfig
from weir.broker.consumers import OFFSETS, ConsumerGroup, OffsetStore
from weir.broker.observer import NULL_OBSERVER, BrokerObserver
from weir.broker.partition_actor import PartitionActor
from weir.broker.producer_ids import ProducerIds
from weir.broker.producers import ProducerPins, ProducerTables, routed_home
from weir.broker.producers import WriterToken as WriterToken  # the fronts import it from here
from weir.broker.subscriptions import (
    SUBSCRIPTIONS,
    AttachedConsumer,
    ConsumerHandle,
    DeadLetterPolicy,
    InitialPosition,
    Subscription,
    SubscriptionInfo,
    Subscriptions,
    SubscriptionType,
)
from weir.broker.tenancy.facade import TenancyFacade
from weir.broker.tenancy.limits import Lease, SessionCounter
from weir.broker.tenancy.names import parse_topic
from weir.broker.tenancy.policies import Policies
from weir.broker.tenancy.registry import NAMESPACES, Tenancy
from weir.broker.topics import (
    NEXT_ID_KEY,
    TOPICS,
    ConsumerConfig,
    ScalingConfig,
    TopicConfig,
    canonical_topic,
    check_consumer_name,
    short_topic,
    topic_key,
)
from weir.errors import (
    AlreadyExistsError,
    BacklogQuotaExceededError,
    BadRequestError,
    StaleGenerationError,
    UnavailableError,
    UnknownConsumerError,
    UnknownPartitionError,
    UnknownTopicError,
)
from weir.storage.codecs import Codec, codec_id, codec_name
from weir.storage.kv import Op, delete, put
from weir.storage.partition import (
    BatchResult,
    IncomingBatch,
    PartitionConfig,
    validate_incoming,
)
from weir.storage.producers import ProducerState
from weir.storage.store import Store

log = logging.getLogger("weir.broker")

PINS = "pins"  # legacy: pins used to be stored; emptied at open (see producers.py)
SERVER = "server"
PRODUCER_EPOCHS = "producer_epochs"  # topic id (u32) -> the topic's producer epoch (u64)
BROKER_TABLES = (TOPICS, OFFSETS, PINS, SERVER, NAMESPACES, PRODUCER_EPOCHS, SUBSCRIPTIONS)
_U32 = struct.Struct(">I")
_U64 = struct.Struct("<Q")
_EPOCH_KEY = b"epoch"


class _Unset:
    pass


UNSET: Any = _Unset()


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    start_offset: int
    end_offset: int
    size_bytes: int
    generation: int
    last_write_ms: int


@dataclass(frozen=True, slots=True)
class ConsumerPartitionInfo:
    partition: int
    committed_offset: int  # next offset the consumer will read
    start_offset: int
    end_offset: int

    @property
    def lag(self) -> int:
        return max(0, self.end_offset - max(self.committed_offset, self.start_offset))


class Broker(TenancyFacade):
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
        self._topics: dict[str, TopicConfig] = {}
        self._backlog_quota: dict[str, int] = {}  # topic -> backlog_quota_bytes, when set
        self._actors: dict[tuple[str, int], PartitionActor] = {}
        self._groups: dict[tuple[str, str], ConsumerGroup] = {}
        self.pins = ProducerPins(config.producer_idle_timeout_ms)
        self.tenancy = Tenancy(store.kv)
        self.producer_sessions = SessionCounter("producers")
        self.consumer_sessions = SessionCounter("consumers")
        self.access = ProducerAccess()
        self.producer_ids = ProducerIds(store.kv, store.committer, SERVER)
        self.subscriptions = Subscriptions(
            store.kv, store.committer, lambda t, p: self._actors[(t, p)], self._write_dead_letters
        )
        self._retention_task: asyncio.Task[None] | None = None
        self._closed = False
        self._lock = asyncio.Lock()  # serializes registry changes

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    async def open(cls, config: BrokerConfig, *, observer: BrokerObserver | None = None) -> Broker:
        """Open (or create) the data directory, recover every partition, start retention."""
        store = await asyncio.to_thread(
            Store,
            config.data_dir,
            extra_tables=BROKER_TABLES,
            map_size=config.map_size,
            min_disk_free=config.min_disk_free,
            observer=(observer or NULL_OBSERVER).on_commit,
            read_cache_bytes=config.read_cache_bytes,
        )
        try:
            raw = store.kv.get(SERVER, _EPOCH_KEY)
            generation = (_U64.unpack(raw)[0] if raw else 0) + 1
            store.committer.commit([put(SERVER, _EPOCH_KEY, _U64.pack(generation))])
            broker = cls(config, store, generation, observer=observer)
            await asyncio.to_thread(broker._load)
        except BaseException:
            store.close()
            raise
        broker._retention_task = asyncio.get_running_loop().create_task(broker._retention_loop())
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

    def _load(self) -> None:
        stored = [
            TopicConfig.from_json(v) for k, v in self.store.kv.scan(TOPICS) if k != NEXT_ID_KEY
        ]
        # public/default, and the namespace of every topic stored before namespaces existed
        adopted = self.tenancy.adopt(sorted({c.name.rsplit("/", 1)[0] for c in stored}))
        if adopted:
            self.store.committer.commit(adopted)
        for cfg in stored:
            cfg = self.resolved(cfg)
            self._remember(cfg)
            for p in range(cfg.partitions):
                self._open_actor(cfg, p)
        self.access = ProducerAccess(
            {
                _U32.unpack(bytes(k))[0]: _U64.unpack(bytes(v))[0]
                for k, v in self.store.kv.scan(PRODUCER_EPOCHS)
            }
        )
        self.subscriptions.load(self._topics.values())
        # Pins are derived from the partitions' producer tables; rows an older
        # version stored are dropped (the producer's state says where it writes).
        legacy = [delete(PINS, bytes(k)) for k, _ in self.store.kv.scan(PINS)]
        if legacy:
            self.store.committer.commit(legacy)
            log.info("dropped %d stored producer pins: pins follow producer state", len(legacy))

    def _partition_config(self, cfg: TopicConfig) -> PartitionConfig:
        c = self.config
        return PartitionConfig(
            low_watermark=c.low_watermark,
            max_blob_size=c.max_blob_size,
            retention_ms=cfg.retention_ms,
            retention_bytes=cfg.retention_bytes,
            max_bytes=cfg.max_partition_bytes,
            max_messages=cfg.max_partition_messages,
            producer_ttl_ms=c.producer_idle_timeout_ms,
            deduplicate=self.topic_policies(cfg)["deduplication"],
        )

    def _open_actor(self, cfg: TopicConfig, partition: int) -> PartitionActor:
        plog = self.store.open_partition(
            cfg.log_id(partition),
            self._partition_config(cfg),
            label=f"{short_topic(cfg.name)}/{partition}",
            verify_all=self.config.verify_on_start,
            strict=False,
        )
        if plog.damage is not None:
            log.error(
                "partition opened damaged, its damaged range and writes are refused: %s",
                plog.damage,
                extra={
                    "topic": short_topic(cfg.name),
                    "partition": partition,
                    "offset": plog.damage.offset,
                },
            )
        actor = PartitionActor(
            plog,
            self.store.committer,
            topic=cfg.name,
            partition=partition,
            generation=self.generation,
            max_queue_bytes=self.config.max_partition_queue_bytes,
            max_commit_bytes=self.config.max_commit_bytes,
            observer=self.observer,
        )
        self._actors[(cfg.name, partition)] = actor
        return actor

    async def close(self) -> None:
        """Stop accepting work, finish in-flight commits, close LMDB."""
        if self._closed:
            return
        self._closed = True
        self.access.wake_all()
        if self._retention_task is not None:
            self._retention_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retention_task
        for group in self._groups.values():
            group.close()
        await self.subscriptions.close()
        await asyncio.gather(*(a.close() for a in self._actors.values()))
        await asyncio.to_thread(self.store.close)
        log.info("broker closed")

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise UnavailableError("server is shutting down")

    async def _commit(self, ops: Sequence[Op]) -> None:
        await asyncio.wrap_future(self.store.committer.submit(ops))

    # ------------------------------------------------------------------ topics

    def topic(self, name: str, database: str = "") -> TopicConfig:
        cname = canonical_topic(name, database)
        cfg = self._topics.get(cname)
        if cfg is None:
            raise UnknownTopicError(f"topic {short_topic(cname)!r} does not exist")
        return cfg

    def list_topics(self, prefix: str = "") -> list[TopicConfig]:
        return [
            c
            for n, c in sorted(self._topics.items())
            if short_topic(n).startswith(prefix) or n.startswith(prefix)
        ]

    async def create_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        retention_ms: int | None = UNSET,
        retention_bytes: int | None = UNSET,
        max_partition_bytes: int | None = None,
        max_partition_messages: int | None = None,
        codecs: Iterable[int | str] = (),
        consumers: Iterable[ConsumerConfig] = (),
        scaling: ScalingConfig | None = None,
        policies: Mapping[str, Any] | None = None,
        database: str = "",
    ) -> TopicConfig:
        """Create a topic in an existing namespace. Retention left UNSET (and every
        policy not in ``policies``) follows the namespace, now and when it changes."""
        self._check_open()
        full = parse_topic(name, database)
        cname = full.full
        own = dict(policies or {})
        for key, value in (("retention_ms", retention_ms), ("retention_bytes", retention_bytes)):
            if value is not UNSET:
                own[key] = value
        own_policies = Policies(own, topic=True)
        async with self._lock:
            if cname in self._topics:
                raise AlreadyExistsError(f"topic {short_topic(cname)!r} already exists")
            inherited = self.namespace_policies(self.tenancy.namespace(full.namespace_path).path)
            raw = self.store.kv.get(TOPICS, NEXT_ID_KEY)
            topic_id = _U32.unpack(raw)[0] if raw else 1
            now = _now_ms()
            cfg = TopicConfig(
                name=cname,
                topic_id=topic_id,
                partitions=inherited["default_partitions"] if partitions is None else partitions,
                max_partition_bytes=max_partition_bytes,
                max_partition_messages=max_partition_messages,
                codecs=tuple(codec_id(c) for c in codecs),
                consumers={
                    c.name: dataclasses.replace(c, created_at_ms=c.created_at_ms or now)
                    for c in consumers
                    if check_consumer_name(c.name)
                },
                created_at_ms=now,
                scaling=scaling or ScalingConfig(),
                policies=own_policies,
            )
            cfg = self.resolved(cfg)
            await self._commit(
                [
                    put(TOPICS, topic_key(cname), cfg.to_json()),
                    put(TOPICS, NEXT_ID_KEY, _U32.pack(topic_id + 1)),
                ]
            )
            self._remember(cfg)
            for p in range(cfg.partitions):
                self._open_actor(cfg, p)
        log.info("topic created", extra={"topic": short_topic(cname), "partitions": cfg.partitions})
        return cfg

    async def alter_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        retention_ms: int | None = UNSET,
        retention_bytes: int | None = UNSET,
        max_partition_bytes: int | None = UNSET,
        max_partition_messages: int | None = UNSET,
        codecs: Iterable[int | str] | None = None,
        add_consumers: Iterable[ConsumerConfig] = (),
        drop_consumers: Iterable[str] = (),
        scaling: ScalingConfig | None = None,
        policies: Mapping[str, Any] | None = None,
        inherit: Iterable[str] = (),
        database: str = "",
    ) -> TopicConfig:
        """Change a topic. Partitions can be added, never removed. Retention and
        ``policies`` set the topic's own values; ``inherit`` names policies that
        follow the namespace again."""
        self._check_open()
        async with self._lock:
            cfg = self.topic(name, database)
            changes: dict[str, Any] = {}
            own = dict(policies or {})
            for key, value in (
                ("retention_ms", retention_ms),
                ("retention_bytes", retention_bytes),
            ):
                if value is not UNSET:
                    own[key] = value
            own_policies = cfg.policies.updated(own, tuple(inherit), topic=True)
            if own_policies != cfg.policies:
                changes["policies"] = own_policies
            if partitions is not None:
                if partitions < cfg.partitions:
                    raise BadRequestError(
                        f"topic {short_topic(cfg.name)!r} has {cfg.partitions} partitions; "
                        "partitions can be added, never removed"
                    )
                changes["partitions"] = partitions
            for attr, value in (
                ("max_partition_bytes", max_partition_bytes),
                ("max_partition_messages", max_partition_messages),
            ):
                if value is not UNSET:
                    changes[attr] = value
            if codecs is not None:
                changes["codecs"] = tuple(codec_id(c) for c in codecs)
            if scaling is not None:
                changes["scaling"] = scaling
            consumers = dict(cfg.consumers)
            now = _now_ms()
            for c in add_consumers:
                check_consumer_name(c.name)
                consumers[c.name] = dataclasses.replace(c, created_at_ms=c.created_at_ms or now)
            dropped = []
            for cname in drop_consumers:
                if cname not in consumers:
                    raise UnknownConsumerError(
                        f"consumer {cname!r} is not registered on {short_topic(cfg.name)!r}"
                    )
                del consumers[cname]
                dropped.append(cname)
            changes["consumers"] = consumers
            new = self.resolved(dataclasses.replace(cfg, **changes))
            ops: list[Op] = [put(TOPICS, topic_key(new.name), new.to_json())]
            for cname in dropped:
                ops.extend(self.offsets.drop_ops(cfg.topic_id, cname))
            await self._commit(ops)
            for cname in dropped:
                self.offsets.forget(cfg.topic_id, cname)
            self._apply_topic_config(new)
            for p in range(cfg.partitions, new.partitions):
                self._open_actor(new, p)
            if new.partitions != cfg.partitions:
                self.subscriptions.on_partitions(new)
                for (tname, _), group in self._groups.items():
                    if tname == new.name:
                        group.set_partitions(new.partitions)
        changed = sorted(k for k in changes if k != "consumers" or new.consumers != cfg.consumers)
        log.info(
            "topic altered", extra={"topic": short_topic(new.name), "changed": ",".join(changed)}
        )
        return new

    def _remember(self, cfg: TopicConfig) -> None:
        """Make ``cfg`` (resolved) the live config of its topic; its backlog quota with it,
        so that a write checks it with one lookup."""
        self._topics[cfg.name] = cfg
        quota = self.topic_policies(cfg)["backlog_quota_bytes"]
        if quota is None:
            self._backlog_quota.pop(cfg.name, None)
        else:
            self._backlog_quota[cfg.name] = quota

    def _apply_topic_config(self, cfg: TopicConfig) -> None:
        """Make ``cfg`` (resolved) the live config of its topic and its open partitions."""
        self._remember(cfg)
        pcfg = self._partition_config(cfg)
        for p in range(cfg.partitions):
            actor = self._actors.get((cfg.name, p))
            if actor is not None:
                actor.log.config = pcfg

    async def drop_topic(self, name: str, database: str = "") -> None:
        self._check_open()
        async with self._lock:
            cfg = self.topic(name, database)
            actors = [self._actors.pop((cfg.name, p)) for p in range(cfg.partitions)]
            await asyncio.gather(*(a.close() for a in actors))
            for key in [k for k in self._groups if k[0] == cfg.name]:
                self._groups.pop(key).close()
            ops: list[Op] = [delete(TOPICS, topic_key(cfg.name))]
            for p in range(cfg.partitions):
                ops.extend(self.store.drop_partition_ops(cfg.log_id(p)))
            ops.extend(self.offsets.drop_ops(cfg.topic_id))
            ops.append(delete(PRODUCER_EPOCHS, _U32.pack(cfg.topic_id)))
            ops.extend(self.subscriptions.drop_topic_ops(cfg))
            await self._commit(ops)
            await self.subscriptions.forget_topic(cfg)
            for p in range(cfg.partitions):
                self.store.forget(cfg.log_id(p))
            self.offsets.forget(cfg.topic_id)
            self.pins.forget_topic(cfg.topic_id)
            self.access.forget_topic(cfg.topic_id)
            del self._topics[cfg.name]
            self._backlog_quota.pop(cfg.name, None)
        log.info("topic dropped", extra={"topic": short_topic(cfg.name)})

    # ------------------------------------------------------------------ partitions

    def actor(self, topic: str, partition: int, database: str = "") -> PartitionActor:
        cfg = self.topic(topic, database)
        if not isinstance(partition, int) or not 0 <= partition < cfg.partitions:
            raise UnknownPartitionError(
                f"topic {short_topic(cfg.name)!r} has partitions 0..{cfg.partitions - 1}, not {partition!r}"
            )
        return self._actors[(cfg.name, partition)]

    def partitions(self, topic: str, database: str = "") -> list[PartitionInfo]:
        cfg = self.topic(topic, database)
        out = []
        for p in range(cfg.partitions):
            a = self._actors[(cfg.name, p)]
            blobs = a.log.blobs
            out.append(
                PartitionInfo(
                    p,
                    a.start_offset,
                    a.end_offset,
                    a.log.size_bytes,
                    a.generation,
                    blobs[-1].max_written if blobs else 0,
                )
            )
        return out

    # ------------------------------------------------------------------ writes

    async def resolve_partition(
        self,
        topic: str,
        producer_id: str = "",
        partition: int | None = None,
        generation: int | None = None,
        database: str = "",
        routed: bool = False,
    ) -> int:
        """The partition a write session writes to.

        A routed session (one of a routing writer's, see `weir.client.routing`) has no
        pin: its producer's dedup state is per partition; it writes to the partition it
        names, else to its home (`weir.broker.producers.routed_home`).

        A producer_id is pinned to one partition (where its state is, else the one
        asked for, else by hash; see `weir.broker.producers`) so its seq_no order
        and dedup hold across reconnects; an explicit partition must agree with
        the pin. A partition named with a generation must name the current one.
        """
        cfg = self.topic(topic, database)
        if partition is not None:
            self.actor(cfg.name, partition)  # range check
            if generation is not None and generation != self.generation:
                raise StaleGenerationError(
                    f"partition {short_topic(cfg.name)}/{partition} has generation {self.generation}, "
                    f"not {generation}: describe the topic again"
                )
        if not producer_id:
            if partition is None:
                raise BadRequestError("a write needs a producer_id or a partition")
            return partition
        if routed:
            if partition is not None:
                return partition
            return routed_home(producer_id, cfg, self._producer_tables(cfg))
        return self.pins.resolve(cfg, producer_id, partition, self._producer_tables(cfg))

    def _producer_tables(self, cfg: TopicConfig) -> ProducerTables:
        return [self._actors[(cfg.name, p)].log.producers for p in range(cfg.partitions)]

    def register_writer(
        self, topic: str, producer_id: str, on_superseded: Callable[[], None]
    ) -> WriterToken:
        """One live write session per producer: a new one closes the old (its writes can't interleave)."""
        return self.pins.register_writer(self.topic(topic).topic_id, producer_id, on_superseded)

    def unregister_writer(self, token: WriterToken) -> None:
        self.pins.unregister_writer(token)

    async def open_producer(
        self,
        topic: str,
        producer_id: str,
        mode: AccessMode = AccessMode.SHARED,
        known_epoch: int | None = None,
        fence: Fence | None = None,
        database: str = "",
    ) -> Claim:
        """Admit a producer's write session under its access mode (see `weir.broker.access`):
        raises ProducerBusyError / ProducerFencedError, or (WaitForExclusive) waits until the
        topic is free. A grown producer epoch is durable before this returns. Pair with
        `close_producer`. ``fence`` is called when an ExclusiveWithFencing producer takes over."""
        self._check_open()
        cfg = self.topic(topic, database)
        while True:
            got = self.access.claim(
                cfg.topic_id,
                short_topic(cfg.name),
                producer_id,
                mode,
                known_epoch,
                fence or _no_fence,
            )
            if isinstance(got, Claim):
                break
            try:
                await got
            except BaseException:
                self.access.pass_on(cfg.topic_id, got)
                raise
            self._check_open()
            cfg = self.topic(topic, database)  # still there?
        if got.new_epoch:
            try:
                await self._commit(
                    [put(PRODUCER_EPOCHS, _U32.pack(cfg.topic_id), _U64.pack(got.epoch))]
                )
            except BaseException:
                self.access.release(got)
                raise
            log.info(
                "exclusive producer took the topic",
                extra={
                    "topic": short_topic(cfg.name),
                    "producer": producer_id,
                    "access_mode": mode.title,
                    "producer_epoch": got.epoch,
                },
            )
        return got

    def close_producer(self, claim: Claim) -> None:
        self.access.release(claim)

    async def write(
        self,
        topic: str,
        partition: int,
        batches: Sequence[IncomingBatch],
        nbytes: int | None = None,
    ) -> list[BatchResult]:
        """Store validated batches durably in one partition; per-batch results in order."""
        return await self.submit(topic, partition, batches, nbytes)

    def submit(
        self,
        topic: str,
        partition: int,
        batches: Sequence[IncomingBatch],
        nbytes: int | None = None,
    ) -> asyncio.Future[list[BatchResult]]:
        """Queue a write now (calls are committed in call order); the future resolves when durable."""
        self._check_open()
        actor = self.actor(topic, partition)
        cfg = self._topics[actor.topic]
        if cfg.codecs:
            for b in batches:
                codec = b.header.data_codec if b.header.data_codec != Codec.RAW else b.header.codec
                if codec not in cfg.codecs and codec != Codec.RAW:
                    raise BadRequestError(
                        f"topic {short_topic(cfg.name)!r} accepts codecs "
                        f"{[codec_name(c) for c in cfg.codecs]}, not {codec_name(codec)}"
                    )
        quota = self._backlog_quota.get(cfg.name)
        if quota is not None:
            self._check_backlog(cfg, partition, quota)
        size = sum(len(b.buf) for b in batches) if nbytes is None else nbytes
        return actor.submit(batches, size)

    def _check_backlog(self, cfg: TopicConfig, partition: int, quota: int) -> None:
        """Refuse a write while the important consumers' backlog is over the quota."""
        important = [c.name for c in cfg.consumers.values() if c.important]
        if not important:
            return  # nobody holds data back: retention bounds what is stored
        actor = self._actors[(cfg.name, partition)]
        committed = self.offsets.min_committed(cfg.topic_id, partition, important) or 0
        ttl = self.ttl_offset(cfg.name, partition)
        # what waits for commit counts too: a burst of requests must not slip past
        backlog = actor.queued_bytes + actor.log.bytes_from(max(committed, ttl or 0), quota)
        if backlog > quota:
            self.observer.on_refused(cfg.name, partition, "backlog_quota")
            raise BacklogQuotaExceededError(
                f"partition {short_topic(cfg.name)}/{partition} has {backlog} or more bytes its "
                f"important consumers have not read, over its backlog quota of {quota} bytes "
                "(backlog_quota_bytes); writes resume as they catch up"
            )

    def message_limit(self, topic: str) -> int:
        """The largest message (data plus key) a writer of ``topic`` may send."""
        return self.config.cap_message_limit(self.policies_of(topic)["max_message_bytes"])

    def count_producer(self, topic: str, producer_id: str = "") -> Lease:
        """Count a live write session, within the topic's max_producers_per_topic (its access
        mode is `open_producer`'s business)."""
        cfg = self.topic(topic)
        limit = self.topic_policies(cfg)["max_producers_per_topic"]
        return self.producer_sessions.acquire(cfg.name, limit, producer_id, short_topic(cfg.name))

    def count_consumer(self, topic: str) -> Lease:
        """Count a live read session, within the topic's max_consumers_per_topic."""
        cfg = self.topic(topic)
        limit = self.topic_policies(cfg)["max_consumers_per_topic"]
        return self.consumer_sessions.acquire(cfg.name, limit, "", short_topic(cfg.name))

    def ttl_offset(self, topic: str, partition: int, now_ms: int | None = None) -> int | None:
        """The first offset younger than the topic's message TTL (None: no TTL): a
        consumer skips what is before it, and retention may remove it."""
        ttl = self.policies_of(topic)["message_ttl_ms"]
        if ttl is None:
            return None
        now = _now_ms() if now_ms is None else now_ms
        return self.actor(topic, partition).log.offset_for_time(now - ttl)

    def last_seq_no(self, topic: str, partition: int, producer_id: str) -> int | None:
        return self.actor(topic, partition).log.last_seq_no(producer_id)

    def producer_state(self, topic: str, partition: int, producer_id: str) -> ProducerState | None:
        """The stored state of a producer in a partition: max seq_no, offset of its last
        message, last write (None: it has written nothing that is still kept)."""
        return self.actor(topic, partition).log.producers.get(producer_id)

    async def allocate_producer_id(self) -> int:
        """A numeric producer id never handed out before, across restarts (Kafka's
        InitProducerId)."""
        self._check_open()
        return await self.producer_ids.allocate()

    # ------------------------------------------------------------------ consumers

    async def ensure_consumer(
        self, topic: str, consumer: str, database: str = ""
    ) -> ConsumerConfig:
        """The consumer's config; registers it when auto_create_consumers is on."""
        cfg = self.topic(topic, database)
        check_consumer_name(consumer)
        existing = cfg.consumers.get(consumer)
        if existing is not None:
            return existing
        if not self.config.auto_create_consumers:
            raise UnknownConsumerError(
                f"consumer {consumer!r} is not registered on {short_topic(cfg.name)!r}; add it with alter"
            )
        new = await self.alter_topic(cfg.name, add_consumers=[ConsumerConfig(consumer)])
        return new.consumers[consumer]

    def consumer(self, topic: str, consumer: str, database: str = "") -> ConsumerConfig:
        cfg = self.topic(topic, database)
        c = cfg.consumers.get(consumer)
        if c is None:
            raise UnknownConsumerError(
                f"consumer {consumer!r} is not registered on {short_topic(cfg.name)!r}"
            )
        return c

    def committed_offset(self, topic: str, partition: int, consumer: str) -> int | None:
        cfg = self.topic(topic)
        return self.offsets.get(cfg.topic_id, partition, consumer)

    def read_start(self, topic: str, partition: int, consumer: str, read_from_ms: int = 0) -> int:
        """Where a consumer's read session starts: its committed offset, else the first
        offset written at/after ``read_from_ms``, else the partition start."""
        actor = self.actor(topic, partition)
        committed = self.committed_offset(topic, partition, consumer) if consumer else None
        start = actor.start_offset
        if committed is not None:
            pos = max(committed, start)
        elif read_from_ms > 0:
            pos = actor.log.offset_for_time(read_from_ms)
        else:
            pos = start
        if read_from_ms > 0 and committed is not None:
            pos = max(pos, actor.log.offset_for_time(read_from_ms))
        ttl = self.ttl_offset(topic, partition) if consumer else None
        if ttl is not None:
            pos = max(pos, ttl)
        return min(pos, actor.end_offset)

    async def commit_offset(
        self,
        topic: str,
        partition: int,
        consumer: str,
        offset: int,
        *,
        allow_backwards: bool = False,
    ) -> bool:
        """Store the consumer's next offset to read. Never past EndOffset; backwards only
        when asked (an operator's rewind), never from a read session."""
        cfg = self.topic(topic)
        actor = self.actor(topic, partition)
        if consumer not in cfg.consumers:
            await self.ensure_consumer(topic, consumer)
        if offset > actor.end_offset:
            raise BadRequestError(
                f"cannot commit offset {offset} on {short_topic(cfg.name)}/{partition}: end offset is "
                f"{actor.end_offset}"
            )
        changed = await self.offsets.commit(
            cfg.topic_id, partition, consumer, offset, allow_backwards=allow_backwards
        )
        if changed:
            self.observer.on_consumer_commit(cfg.name, partition, consumer, offset)
        return changed

    def describe_consumer(self, topic: str, consumer: str) -> list[ConsumerPartitionInfo]:
        cfg = self.topic(topic)
        self.consumer(topic, consumer)
        out = []
        for p in range(cfg.partitions):
            a = self._actors[(cfg.name, p)]
            committed = self.offsets.get(cfg.topic_id, p, consumer)
            out.append(
                ConsumerPartitionInfo(
                    p,
                    a.start_offset if committed is None else committed,
                    a.start_offset,
                    a.end_offset,
                )
            )
        return out

    def group(self, topic: str, consumer: str) -> ConsumerGroup:
        cfg = self.topic(topic)
        key = (cfg.name, consumer)
        g = self._groups.get(key)
        if g is None:
            g = ConsumerGroup(cfg.name, consumer, cfg.partitions, self.config.rebalance_timeout_s)
            self._groups[key] = g
        return g

    # ------------------------------------------------------------------ subscriptions

    async def create_subscription(
        self,
        topic: str,
        name: str,
        type: str | SubscriptionType = SubscriptionType.EXCLUSIVE,
        initial_position: str | InitialPosition = InitialPosition.LATEST,
        initial_time_ms: int | None = None,
    ) -> SubscriptionInfo:
        self._check_open()
        cfg = self.topic(topic)
        sub = await self.subscriptions.create(
            cfg,
            name,
            SubscriptionType.parse(type),
            InitialPosition.parse(initial_position),
            initial_time_ms=initial_time_ms,
        )
        return sub.describe(short_topic(cfg.name))

    def subscription(self, topic: str, name: str) -> Subscription:
        return self.subscriptions.get(self.topic(topic), name)

    def describe_subscription(self, topic: str, name: str) -> SubscriptionInfo:
        cfg = self.topic(topic)
        return self.subscriptions.get(cfg, name).describe(short_topic(cfg.name))

    def list_subscriptions(self, topic: str) -> list[SubscriptionInfo]:
        cfg = self.topic(topic)
        return [s.describe(short_topic(cfg.name)) for s in self.subscriptions.of_topic(cfg)]

    async def delete_subscription(self, topic: str, name: str, *, force: bool = False) -> None:
        self._check_open()
        await self.subscriptions.delete(self.topic(topic), name, force=force)

    async def seek_subscription(
        self,
        topic: str,
        name: str,
        offsets: dict[int, int] | None = None,
        timestamp_ms: int | None = None,
    ) -> SubscriptionInfo:
        """Move a subscription: partitions to offsets, or every partition to a time."""
        self._check_open()
        cfg = self.topic(topic)
        sub = self.subscriptions.get(cfg, name)
        if timestamp_ms is not None:
            if offsets:
                raise BadRequestError("seek to offsets or to a time, not both")
            offsets = {
                p: self._actors[(cfg.name, p)].log.offset_for_time(timestamp_ms)
                for p in range(cfg.partitions)
            }
        if not offsets:
            raise BadRequestError("a seek needs offsets or a time")
        for p, o in offsets.items():
            self.actor(cfg.name, p)  # range check
            if o < 0:
                raise BadRequestError(f"cannot seek partition {p} to offset {o}")
        await sub.seek(offsets)
        return sub.describe(short_topic(cfg.name))

    async def subscribe(
        self,
        topic: str,
        name: str,
        type: str | SubscriptionType,
        initial_position: str | InitialPosition,
        handle: ConsumerHandle,
        *,
        consumer_name: str = "",
        ack_timeout_ms: int = 0,
        create: bool = True,
        dead_letter: DeadLetterPolicy | None = None,
        initial_time_ms: int | None = None,
    ) -> tuple[Subscription, AttachedConsumer]:
        """Attach a consumer to a durable subscription (see `weir.broker.subscriptions`)."""
        self._check_open()
        if ack_timeout_ms < 0:
            raise BadRequestError(f"ack timeout must be >= 0 ms, got {ack_timeout_ms}")
        return await self.subscriptions.subscribe(
            self.topic(topic),
            name,
            SubscriptionType.parse(type),
            InitialPosition.parse(initial_position),
            handle,
            consumer_name=consumer_name,
            ack_timeout_ms=ack_timeout_ms,
            create=create,
            dead_letter=dead_letter,
            initial_time_ms=initial_time_ms,
        )

    async def _write_dead_letters(self, topic: str, batches: list[bytes]) -> None:
        """Store dead letters in ``topic`` (created with one partition when missing)."""
        if canonical_topic(topic) not in self._topics:
            with contextlib.suppress(AlreadyExistsError):
                await self.create_topic(topic, partitions=1)
        cfg = self.topic(topic)
        await self.write(cfg.name, 0, validate_incoming(batches))

    # ------------------------------------------------------------------ retention

    async def run_retention(self, now_ms: int | None = None) -> int:
        """One retention pass over every partition, then pin expiry; returns blobs removed."""
        removed = 0
        for cfg in list(self._topics.values()):
            if cfg.retention_ms is None and cfg.retention_bytes is None:
                continue
            important = [c.name for c in cfg.consumers.values() if c.important]
            for p in range(cfg.partitions):
                actor = self._actors.get((cfg.name, p))
                if actor is None:
                    continue
                marks = [
                    m
                    for m in (
                        self.offsets.min_committed(cfg.topic_id, p, important)
                        if important
                        else None,
                        self.subscriptions.protect_from(cfg, p),
                    )
                    if m is not None
                ]
                protect = min(marks) if marks else None
                ttl = self.ttl_offset(cfg.name, p, now_ms) if protect is not None else None
                if protect is not None and ttl is not None:
                    protect = max(protect, ttl)  # past its TTL, a message is nobody's to keep
                try:
                    removed += await actor.run_retention(now_ms, protect)
                except Exception:  # one partition's trouble must not stop the pass
                    log.exception(
                        "retention failed", extra={"topic": short_topic(cfg.name), "partition": p}
                    )
        by_id = {cfg.topic_id: cfg for cfg in self._topics.values()}
        self.pins.expire(
            lambda tid: self._producer_tables(by_id[tid]) if tid in by_id else None, now_ms
        )
        return removed

    async def _retention_loop(self) -> None:
        for _ in itertools.count():
            await asyncio.sleep(self.config.retention_interval_s)
            if self._closed:
                return
            try:
                n = await self.run_retention()
                if n:
                    log.info("retention removed blobs", extra={"blobs": n})
            except Exception:
                log.exception("retention pass failed")


def _no_fence(_: Exception) -> None:
    pass


def _now_ms() -> int:
    return int(time.time() * 1000)
