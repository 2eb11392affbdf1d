"""What admin calls return: plain dataclasses, not protobuf messages."""

from __future__ import annotations

from dataclasses import dataclass

from weir.protocols.native import weir_pb2 as pb


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
            )
            for p in d.partition_status
        ],
        created_at_ms=d.created_at_ms,
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
