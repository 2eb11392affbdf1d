"""The broker's topic administration (a mixin of `Broker`): create, alter (partition
growth, consumers, policies) and drop, and the partition actors they open."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from weir.broker.backlog_quota import backlog_quota
from weir.broker.non_persistent import LivePartition
from weir.broker.partition_actor import PartitionActor
from weir.broker.producer_admission import drop_epoch_op
from weir.broker.state import now_ms as _now_ms
from weir.broker.tenancy.facade import TenancyFacade
from weir.broker.tenancy.names import parse_topic
from weir.broker.tenancy.policies import Policies
from weir.broker.topics import (
    NEXT_ID_KEY,
    PERSISTENT,
    TOPICS,
    ConsumerConfig,
    ScalingConfig,
    TopicConfig,
    check_consumer_name,
    short_topic,
    topic_key,
)
from weir.errors import (
    AlreadyExistsError,
    BadRequestError,
    UnknownConsumerError,
    UnknownTopicError,
)
from weir.replication.partition_log.lacks import refuse
from weir.storage.codecs import codec_id
from weir.storage.kv import Op, delete, put
from weir.storage.partition import PartitionConfig

log = logging.getLogger("weir.broker")

_U32 = struct.Struct(">I")


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
    stable_offset: int = 0  # where read-committed readers stop
    delivered_messages: int = 0  # non-persistent partitions
    dropped_messages: int = 0


class TopicAdmin(TenancyFacade):
    """Topic create / alter / drop and the partition actors of each topic."""

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

    def _open_partition(self, cfg: TopicConfig, partition: int) -> None:
        """Open a partition of ``cfg``: stored, or in memory for a non-persistent topic."""
        if cfg.kind == PERSISTENT:
            self._open_actor(cfg, partition)
            return
        live = LivePartition(
            cfg.name,
            partition,
            generation=self.generation,
            queue_bytes=self.config.non_persistent_queue_bytes,
            observer=self.observer,
        )
        live.sinks.extend(self.live_subscriptions.of_topic(cfg.name))
        self._live[(cfg.name, partition)] = live

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
            commit=self.commits.commit_change,
        )
        self._actors[(cfg.name, partition)] = actor
        return actor

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
        kind: str = PERSISTENT,
        database: str = "",
    ) -> TopicConfig:
        """Create a topic in an existing namespace (``kind``: "persistent", or
        "non-persistent": its messages go only to consumers connected now). Retention left UNSET (and every
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
            if self.cluster is not None:
                topic_id = 0  # the catalog hands out cluster-wide ids
            else:
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
                kind=kind,
            )
            cfg = self.resolved(cfg)
            if self.cluster is not None:  # every broker sees it; partitions open when claimed
                cfg = self.resolved(await self.cluster.create_topic(cfg))
                self._apply_topic_config(cfg)  # to a partition claimed meanwhile too
                if cfg.kind != PERSISTENT:
                    for p in range(cfg.partitions):
                        self._open_partition(cfg, p)
            else:
                await self._commit(
                    [
                        put(TOPICS, topic_key(cname), cfg.to_json()),
                        put(TOPICS, NEXT_ID_KEY, _U32.pack(topic_id + 1)),
                    ]
                )
                self._remember(cfg)
                for p in range(cfg.partitions):
                    self._open_partition(cfg, p)
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

            def plan(cfg: TopicConfig) -> tuple[TopicConfig, dict[str, Any], list[str]]:
                """The altered config of ``cfg``, the changed fields, consumers dropped."""
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
                    # adding a consumer that is there (another broker's or admin's add won
                    # the race) keeps its registration time: its committed offsets are
                    # tagged with it, and a new time would make them unreadable
                    known = cfg.consumers.get(c.name)
                    since = c.created_at_ms or (known.created_at_ms if known else 0) or now
                    consumers[c.name] = dataclasses.replace(c, created_at_ms=since)
                dropped = []
                for cname in drop_consumers:
                    if cname not in consumers:
                        raise UnknownConsumerError(
                            f"consumer {cname!r} is not registered on {short_topic(cfg.name)!r}"
                        )
                    del consumers[cname]
                    dropped.append(cname)
                changes["consumers"] = consumers
                return self.resolved(dataclasses.replace(cfg, **changes)), changes, dropped

            new, changes, dropped = plan(cfg)
            if self.cluster is not None:  # the change applies to the catalog's latest record
                stored, _ = await self.cluster.catalog.update(
                    cfg.name, lambda latest: plan(self.resolved(latest))[0]
                )
                new = self.resolved(stored)
            ops: list[Op] = []
            if self.cluster is None:
                ops.append(put(TOPICS, topic_key(new.name), new.to_json()))
            for cname in dropped:
                ops.extend(self.offsets.drop_ops(cfg.topic_id, cname))
            await self._commit(ops)
            for cname in dropped:
                self.offsets.forget(cfg.topic_id, cname)
            self._apply_topic_config(new)
            self._grown(cfg, new)
        changed = sorted(k for k in changes if k != "consumers" or new.consumers != cfg.consumers)
        log.info(
            "topic altered", extra={"topic": short_topic(new.name), "changed": ",".join(changed)}
        )
        return new

    async def terminate_topic(self, name: str, database: str = "") -> list[int]:
        """Terminate a topic (Pulsar's terminate): from now on every write to it is
        refused (TopicTerminatedError), durably. Returns each partition's end offset: what
        it holds is all it will ever hold. Writes queued before it are committed first."""
        self._check_open()
        async with self._lock:
            cfg = self.topic(name, database)
            if cfg.kind != PERSISTENT:
                raise BadRequestError(
                    f"topic {short_topic(cfg.name)!r} is {cfg.kind}: only a persistent "
                    "topic can be terminated"
                )
            if not cfg.terminated:
                new = dataclasses.replace(cfg, terminated=True)
                self._remember(new)  # refused from now on: no write passes the commit below
                try:
                    await self._commit([put(TOPICS, topic_key(new.name), new.to_json())])
                except BaseException:
                    self._remember(cfg)
                    raise
                log.info("topic terminated", extra={"topic": short_topic(new.name)})
            ends = []
            for p in range(cfg.partitions):
                actor = self.actor(cfg.name, p)
                await actor.submit([], 0)  # resolves after every write queued before it
                ends.append(actor.end_offset)
            return ends

    def _grown(self, old: TopicConfig, new: TopicConfig) -> None:
        """The partitions ``new`` adds to ``old`` opened (replicated mode: persistent ones
        open when claimed), and every reader of the topic told."""
        if self.cluster is None or new.kind != PERSISTENT:
            for p in range(old.partitions, new.partitions):
                self._open_partition(new, p)
        for sub in self.live_subscriptions.of_topic(new.name):
            sub.partitions = new.partitions
        if new.partitions != old.partitions:
            self.subscriptions.on_partitions(new)
            for (tname, _), group in self._groups.items():
                if tname == new.name:
                    group.set_partitions(new.partitions)

    def _remember(self, cfg: TopicConfig) -> None:
        """Make ``cfg`` (resolved) the live config of its topic; its backlog quota with it,
        so that a write checks it with one lookup."""
        self._topics[cfg.name] = cfg
        quota = backlog_quota(self.topic_policies(cfg))
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

    def _embedded_admin(self, what: str) -> None:
        if self.cluster is not None:
            refuse(what)

    async def drop_topic(self, name: str, database: str = "") -> None:
        """Drop a topic and everything of it. Replicated mode: from the whole cluster (its
        ledgers, its catalog record; every broker's catalog watch forgets it)."""
        self._check_open()
        async with self._lock:
            cfg = self.topic(name, database)
            if self.cluster is not None:
                await self.cluster.drop_topic(cfg)
            await self._forget_topic(cfg)
        log.info("topic dropped", extra={"topic": short_topic(cfg.name)})

    async def _catalog_dropped(self, catalog: Mapping[str, TopicConfig]) -> None:
        """Replicated mode, under the broker's lock: forget the topics another broker
        dropped (missing from ``catalog``, and still missing now: ``catalog`` may have been
        read before a topic this broker created since)."""
        assert self.cluster is not None
        for name in [n for n in self._topics if n not in catalog]:
            if await self.cluster.catalog.get(name) is None:
                await self._forget_topic(self._topics[name])
                log.info("topic dropped elsewhere", extra={"topic": short_topic(name)})

    async def _forget_topic(self, cfg: TopicConfig) -> None:
        """Everything this broker holds of a dropped topic goes (under the broker's lock)."""
        job = self._compactions.pop(cfg.name, None)
        if job is not None and job.running:  # its blobs must not outlive the topic
            job.cancel()
            with contextlib.suppress(Exception):
                await job.wait()
        actors = [a for p in range(cfg.partitions) if (a := self._actors.pop((cfg.name, p), None))]
        await asyncio.gather(*(a.close() for a in actors))
        for p in range(cfg.partitions):
            live = self._live.pop((cfg.name, p), None)
            if live is not None:
                live.close(UnknownTopicError(f"topic {short_topic(cfg.name)!r} was dropped"))
        self.live_subscriptions.forget_topic(cfg.name)
        for key in [k for k in self._groups if k[0] == cfg.name]:
            self._groups.pop(key).close()
        ops: list[Op] = []
        if self.cluster is None:  # replicated mode: the partitions are not in LMDB
            ops.append(delete(TOPICS, topic_key(cfg.name)))
            for p in range(cfg.partitions):
                ops.extend(self.store.drop_partition_ops(cfg.log_id(p)))
        ops.extend(self.offsets.drop_ops(cfg.topic_id))
        ops.append(drop_epoch_op(cfg.topic_id))
        ops.extend(self.subscriptions.drop_topic_ops(cfg))
        ops.extend(self.schemas.drop_ops(cfg.topic_id))
        await self._commit(ops)
        self.schemas.forget(cfg.topic_id)
        await self.subscriptions.forget_topic(cfg)
        for p in range(cfg.partitions):
            if self.cluster is None:
                self.store.forget(cfg.log_id(p))
            self._views.pop((cfg.name, p), None)
            self._trim_floors.pop((cfg.name, p), None)
        self.offsets.forget(cfg.topic_id)
        self.pins.forget_topic(cfg.topic_id)
        self.access.forget_topic(cfg.topic_id)
        del self._topics[cfg.name]
        self._backlog_quota.pop(cfg.name, None)

    def partitions(self, topic: str, database: str = "") -> list[PartitionInfo]:
        """The topic's partitions (replicated mode: those this broker serves now)."""
        cfg = self.topic(topic, database)
        out = []
        for p in range(cfg.partitions):
            live = self._live.get((cfg.name, p))
            if live is not None:
                out.append(
                    PartitionInfo(
                        p,
                        live.start_offset,
                        live.end_offset,
                        0,
                        live.generation,
                        live.last_write_ms,
                        stable_offset=live.end_offset,
                        delivered_messages=live.delivered,
                        dropped_messages=live.dropped,
                    )
                )
                continue
            a = self._actors.get((cfg.name, p))
            if a is None:  # replicated mode: served by another broker (listed there)
                continue
            blobs = a.log.blobs if self.cluster is None else []
            out.append(
                PartitionInfo(
                    p,
                    a.start_offset,
                    a.end_offset,
                    a.log.size_bytes,
                    a.generation,
                    blobs[-1].max_written if blobs else 0,
                    stable_offset=a.stable_offset,
                )
            )
        return out
