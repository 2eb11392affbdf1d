"""What admin calls return: plain dataclasses, not protobuf messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.policy_values import from_wire


@dataclass(frozen=True, slots=True)
class Consumer:
    name: str
    important: bool = False
    read_from_ms: int = 0


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    start_offset: int
    end_offset: int
    size_bytes: int
    generation: int
    last_write_ms: int
    # non-persistent topics: messages handed to consumers / dropped (a queue was full)
    delivered_messages: int = 0
    dropped_messages: int = 0
    stable_offset: int = 0  # where read-committed readers stop (the last stable offset)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: int
    retention_ms: int | None
    retention_bytes: int | None
    max_partition_bytes: int | None
    max_partition_messages: int | None
    codecs: list[str]
    consumers: list[Consumer]
    partition_info: list[PartitionInfo]
    created_at_ms: int
    # the topic's own policies, and what holds for it (server < namespace < topic)
    policies: dict[str, Any] = field(default_factory=dict)
    effective_policies: dict[str, Any] = field(default_factory=dict)
    kind: str = "persistent"  # or "non-persistent"

    @property
    def dropped_messages(self) -> int:
        """Non-persistent topics: messages dropped because a consumer's queue was full."""
        return sum(p.dropped_messages for p in self.partition_info)

    @property
    def messages(self) -> int:
        return sum(p.end_offset - p.start_offset for p in self.partition_info)


@dataclass(frozen=True, slots=True)
class ConsumerLag:
    partition: int
    committed_offset: int
    start_offset: int
    end_offset: int
    lag: int


@dataclass(frozen=True, slots=True)
class ConsumerInfo:
    topic: str
    consumer: Consumer
    partitions: list[ConsumerLag]

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)


def _duration(ms: object) -> str:
    if not isinstance(ms, int):
        return "none"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms} ms"


def topic_differences(
    info: TopicInfo,
    *,
    partitions: int,
    retention_ms: int | object | None,
    limits: dict[str, int | None],
    codecs: list[str],
    consumers: list[Consumer],
) -> list[str]:
    """How an existing topic differs from the one a create asked for, in words.

    Only what the caller gave is compared: ``partitions`` 0, a ``retention_ms``
    that is not an int or None (left to the server), limits that are None
    (the defaults: no limit) and empty ``codecs`` / ``consumers`` match anything.
    """
    diffs = []
    if partitions and info.partitions != partitions:
        diffs.append(f"{info.partitions} partitions, not {partitions}")
    if (
        retention_ms is None or isinstance(retention_ms, int)
    ) and info.retention_ms != retention_ms:
        have, want = (_duration(v) for v in (info.retention_ms, retention_ms))
        diffs.append(f"retention {have}, not {want}")
    for attr, want_limit in limits.items():
        have_limit = getattr(info, attr)
        if want_limit is not None and have_limit != want_limit:
            diffs.append(f"{attr} {'none' if have_limit is None else have_limit}, not {want_limit}")
    if codecs and sorted(info.codecs) != sorted(codecs):
        diffs.append(f"codecs {', '.join(info.codecs) or 'any'}, not {', '.join(codecs)}")
    registered = {c.name: c for c in info.consumers}
    for c in consumers:
        have_consumer = registered.get(c.name)
        if have_consumer is None:
            diffs.append(f"no consumer {c.name!r}")
        elif have_consumer.important != c.important:
            kind = "an important" if have_consumer.important else "a plain"
            diffs.append(f"{kind} consumer {c.name!r}")
    return diffs


def _opt(msg: object, name: str) -> int | None:
    return getattr(msg, name) if msg.HasField(name) else None  # type: ignore[attr-defined]


def consumer_settings(c: Consumer | str) -> pb.ConsumerSettings:
    if isinstance(c, str):
        c = Consumer(c)
    return pb.ConsumerSettings(name=c.name, important=c.important, read_from_ms=c.read_from_ms)


def topic_info(d: pb.TopicDescription) -> TopicInfo:
    return TopicInfo(
        name=d.topic,
        partitions=d.partitions,
        retention_ms=_opt(d, "retention_ms"),
        retention_bytes=_opt(d, "retention_bytes"),
        max_partition_bytes=_opt(d, "max_partition_bytes"),
        max_partition_messages=_opt(d, "max_partition_messages"),
        codecs=list(d.codecs),
        consumers=[Consumer(c.name, c.important, c.read_from_ms) for c in d.consumers],
        partition_info=[
            PartitionInfo(
                p.partition,
                p.start_offset,
                p.end_offset,
                p.size_bytes,
                p.generation,
                p.last_write_ms,
                p.delivered_messages,
                p.dropped_messages,
                p.stable_offset if p.HasField("stable_offset") else p.end_offset,
            )
            for p in d.partition_status
        ],
        created_at_ms=d.created_at_ms,
        policies=from_wire(d.policies),
        effective_policies=from_wire(d.effective_policies),
        kind=d.kind or "persistent",
    )


@dataclass(frozen=True, slots=True)
class PartitionCompactionInfo:
    """One partition's compacted view (position 0: none yet) and the run on it, if any."""

    partition: int
    position: int  # the view holds the latest message of each key below this offset
    keys: int
    tombstones: int
    keyless: int
    messages_before: int  # of the last run: read (old view and log) ...
    bytes_before: int
    messages_after: int  # ... and kept
    bytes_after: int
    finished_ms: int
    duration_ms: int
    phase: str  # of a run now: waiting, scanning, writing, publishing ("" when none)
    messages_scanned: int


@dataclass(frozen=True, slots=True)
class CompactionInfo:
    """A topic's compaction (`Client.compact`, `Client.describe_compaction`)."""

    topic: str
    running: bool
    started_ms: int
    last_error: str
    partitions: list[PartitionCompactionInfo]

    @property
    def keys(self) -> int:
        return sum(p.keys for p in self.partitions)


def compaction_info(d: pb.CompactionDescription) -> CompactionInfo:
    return CompactionInfo(
        d.topic,
        d.running,
        d.started_ms,
        d.last_error,
        [
            PartitionCompactionInfo(
                p.partition,
                p.position,
                p.keys,
                p.tombstones,
                p.keyless,
                p.messages_before,
                p.bytes_before,
                p.messages_after,
                p.bytes_after,
                p.finished_ms,
                p.duration_ms,
                p.phase,
                p.messages_scanned,
            )
            for p in d.partitions
        ],
    )


@dataclass(frozen=True, slots=True)
class TenantInfo:
    name: str
    namespaces: list[str]
    created_at_ms: int


@dataclass(frozen=True, slots=True)
class NamespaceInfo:
    name: str  # tenant/namespace
    tenant: str
    policies: dict[str, Any]  # set on the namespace
    effective_policies: dict[str, Any]  # what its topics inherit
    topics: list[str]
    created_at_ms: int


def tenant_info(d: pb.TenantDescription) -> TenantInfo:
    return TenantInfo(d.tenant, list(d.namespaces), d.created_at_ms)


def namespace_info(d: pb.NamespaceDescription) -> NamespaceInfo:
    return NamespaceInfo(
        d.namespace,
        d.tenant,
        from_wire(d.policies),
        from_wire(d.effective_policies),
        list(d.topics),
        d.created_at_ms,
    )


def consumer_info(d: pb.ConsumerDescription) -> ConsumerInfo:
    c = d.consumer
    return ConsumerInfo(
        d.topic,
        Consumer(c.name, c.important, c.read_from_ms),
        [
            ConsumerLag(p.partition, p.committed_offset, p.start_offset, p.end_offset, p.lag)
            for p in d.partitions
        ],
    )


@dataclass(frozen=True, slots=True)
class SubscriptionPartitionInfo:
    partition: int
    mark_delete: int  # every offset below is acknowledged
    acked_ranges: int  # ranges acknowledged above mark_delete
    backlog: int  # messages not acknowledged
    unacked: int  # delivered, not acknowledged
    active_consumer: str  # Exclusive / Failover: the consumer this partition goes to


@dataclass(frozen=True, slots=True)
class SubscriptionConsumerInfo:
    consumer_id: int
    name: str
    permits: int
    unacked: int
    sticky_ranges: list[tuple[int, int]] = field(default_factory=list)  # sticky Key_Shared


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    topic: str
    name: str
    type: str  # exclusive, failover, shared
    initial_position: str  # earliest, latest, timestamp
    created_at_ms: int
    backlog: int
    unacked: int
    partitions: list[SubscriptionPartitionInfo]
    consumers: list[SubscriptionConsumerInfo]
    max_redeliver_count: int = 0  # 0: no dead-letter topic
    dead_letter_topic: str = ""
    # messages per second over the last ~10 s: delivered (first time or again), delivered
    # again, acknowledged
    msg_rate_out: float = 0.0
    msg_rate_redeliver: float = 0.0
    ack_rate: float = 0.0
    # a consumer's committed offsets (readers' consumers, YDB and Kafka consumers): a
    # failover subscription acknowledged in order or cumulatively
    consumer: bool = False


_TYPE_NAMES = {
    pb.SUBSCRIPTION_EXCLUSIVE: "exclusive",
    pb.SUBSCRIPTION_FAILOVER: "failover",
    pb.SUBSCRIPTION_SHARED: "shared",
    pb.SUBSCRIPTION_KEY_SHARED: "key_shared",
}


def subscription_info(d: pb.SubscriptionDescription) -> SubscriptionInfo:
    return SubscriptionInfo(
        topic=d.topic,
        name=d.subscription,
        type=_TYPE_NAMES.get(d.type, str(d.type)),
        initial_position={
            pb.POSITION_EARLIEST: "earliest",
            pb.POSITION_TIMESTAMP: "timestamp",
        }.get(d.initial_position, "latest"),
        created_at_ms=d.created_at_ms,
        backlog=d.backlog,
        unacked=d.unacked,
        partitions=[
            SubscriptionPartitionInfo(
                p.partition, p.mark_delete, p.acked_ranges, p.backlog, p.unacked, p.active_consumer
            )
            for p in d.partitions
        ],
        consumers=[
            SubscriptionConsumerInfo(
                c.consumer_id,
                c.name,
                c.permits,
                c.unacked,
                [(r.start, r.end) for r in c.sticky_ranges],
            )
            for c in d.consumers
        ],
        max_redeliver_count=d.max_redeliver_count,
        dead_letter_topic=d.dead_letter_topic,
        msg_rate_out=d.msg_rate_out,
        msg_rate_redeliver=d.msg_rate_redeliver,
        ack_rate=d.ack_rate,
        consumer=d.consumer,
    )
