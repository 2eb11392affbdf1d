"""The broker's producer admission (a mixin of `Broker`): which partition a write
session writes to, one live session per producer (`weir.broker.producers`), access
modes and durable producer epochs (`weir.broker.access`), producer counts, numeric
producer ids (`weir.broker.producer_ids`) and the stored producer state fronts check."""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable

from weir.access_mode import AccessMode
from weir.broker.access import Claim, Fence
from weir.broker.producers import WriterToken, routed_home
from weir.broker.tenancy.facade import TenancyFacade
from weir.broker.tenancy.limits import Lease
from weir.broker.topics import PERSISTENT, TopicConfig, short_topic
from weir.errors import BadRequestError, StaleGenerationError
from weir.storage.kv import KV, Op, delete, put
from weir.storage.producers import ProducerState

log = logging.getLogger("weir.broker")

PRODUCER_EPOCHS = "producer_epochs"  # topic id (u32) -> the topic's producer epoch (u64)
_U32 = struct.Struct(">I")
_U64 = struct.Struct("<Q")


def stored_epochs(kv: KV) -> dict[int, int]:
    """The producer epoch of every topic that has one (topic id -> epoch)."""
    return {_U32.unpack(bytes(k))[0]: _U64.unpack(bytes(v))[0] for k, v in kv.scan(PRODUCER_EPOCHS)}


def drop_epoch_op(topic_id: int) -> Op:
    return delete(PRODUCER_EPOCHS, _U32.pack(topic_id))


class ProducerAdmission(TenancyFacade):
    """Admits write sessions: partition resolution, writer registration, access modes."""

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
            self._check_partition(cfg, partition)
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
            version, known = await self._cluster_epoch(cfg, producer_id, mode, known_epoch)
            got = self.access.claim(
                cfg.topic_id,
                short_topic(cfg.name),
                producer_id,
                mode,
                known,
                fence or _no_fence,
            )
            if not isinstance(got, Claim):
                try:
                    await got
                except BaseException:
                    self.access.pass_on(cfg.topic_id, got)
                    raise
                self._check_open()
                cfg = self.topic(topic, database)  # still there?
                continue
            if not got.new_epoch:
                return got
            try:
                stored = await self._store_epoch(cfg.topic_id, got.epoch, producer_id, version)
            except BaseException:
                self.access.release(got)
                raise
            if stored:
                break
            self.access.release(got)  # another broker grew the epoch meanwhile: read it again
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

    async def _cluster_epoch(
        self, cfg: TopicConfig, producer_id: str, mode: AccessMode, known_epoch: int | None
    ) -> tuple[int | None, int | None]:
        """In a cluster, raise the local registry to the epoch ZooKeeper records (fencing
        local sessions another broker's exclusive producer displaced). Answers the node's
        version to grow it at (None in embedded mode: the epoch is this broker's own) and
        the epoch the producer claims with: an exclusive producer that holds the topic
        by the cluster's record (its session on another broker: a partition owned
        there) takes it as it is, without growing the epoch, as its reconnect would."""
        if self.cluster is None:
            return None, known_epoch
        epoch, holder, version = await self.cluster.epochs.get(cfg.topic_id)
        self.access.observe(cfg.topic_id, short_topic(cfg.name), epoch, holder)
        if mode.exclusive and known_epoch is None and holder == producer_id:
            return version, epoch
        return version, known_epoch

    async def _store_epoch(
        self, topic_id: int, epoch: int, producer_id: str, version: int | None
    ) -> bool:
        """Persist a grown epoch before the producer hears it; False: the cluster's
        record changed since ``version`` was read."""
        if self.cluster is None or version is None:
            await self._commit([put(PRODUCER_EPOCHS, _U32.pack(topic_id), _U64.pack(epoch))])
            return True
        return await self.cluster.epochs.grow(topic_id, epoch, producer_id, version)

    def close_producer(self, claim: Claim) -> None:
        self.access.release(claim)

    def message_limit(self, topic: str) -> int:
        """The largest message (data plus key) a writer of ``topic`` may send."""
        return self.config.cap_message_limit(self.policies_of(topic)["max_message_bytes"])

    def count_producer(self, topic: str, producer_id: str = "") -> Lease:
        """Count a live write session, within the topic's max_producers_per_topic (its access
        mode is `open_producer`'s business)."""
        cfg = self.topic(topic)
        limit = self.topic_policies(cfg)["max_producers_per_topic"]
        return self.producer_sessions.acquire(cfg.name, limit, producer_id, short_topic(cfg.name))

    def last_seq_no(self, topic: str, partition: int, producer_id: str) -> int | None:
        if self.topic(topic).kind != PERSISTENT:
            return None  # a non-persistent topic keeps no producer state (no dedup)
        return self.actor(topic, partition).log.last_seq_no(producer_id)

    def producer_state(self, topic: str, partition: int, producer_id: str) -> ProducerState | None:
        """The stored state of a producer in a partition: max seq_no, offset of its last
        message, last write (None: it has written nothing that is still kept)."""
        return self.actor(topic, partition).log.producers.get(producer_id)

    async def allocate_producer_id(self) -> int:
        """A numeric producer id never handed out before, across restarts (Kafka's
        InitProducerId; see `weir.broker.producer_ids`)."""
        self._check_open()
        return await self.producer_ids.allocate()


def _no_fence(_: Exception) -> None:
    pass
