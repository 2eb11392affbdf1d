"""The YDB Topic API's topic and consumer settings, as weir's topic config and back.

Every setting a CreateTopic or AlterTopic request can carry is either acted on
(partitions, retention, codecs, consumers, the ``_max_partition_storage_size``
attribute), stored and reported back by DescribeTopic (the partitioning and
write-speed settings: weir neither splits partitions nor rate-limits writes; a
consumer's codecs), or refused with the status YDB gives or UNSUPPORTED. None is
accepted and dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from weir.broker.topics import PERSISTENT, ConsumerConfig, ScalingConfig, TopicConfig, short_topic
from weir.errors import BadRequestError
from weir.protocols.ydb.conversions import (
    MIB,
    duration_ms,
    set_duration,
    set_ts,
    topic_codecs,
    ts_ms,
)
from weir.protocols.ydb.protos import ydb_topic_pb2
from weir.protocols.ydb.status import PreconditionFailedError, UnsupportedError

_Strategy = ydb_topic_pb2.AutoPartitioningStrategy


def persistent_only(cfg: TopicConfig, what: str) -> TopicConfig:
    """``cfg``, or BAD_REQUEST when it is non-persistent: the YDB Topic API has offsets,
    commits and read-from-time for stored messages only, so its sessions serve none of
    a non-persistent topic (describe still does)."""
    if cfg.kind != PERSISTENT:
        raise BadRequestError(
            f"topic {short_topic(cfg.name)!r} is non-persistent: the YDB topic API cannot "
            f"{what} it (use weir's native API or a Pulsar client)"
        )
    return cfg


STRATEGY_NAMES: dict[int, str] = {
    _Strategy.AUTO_PARTITIONING_STRATEGY_UNSPECIFIED: "disabled",
    _Strategy.AUTO_PARTITIONING_STRATEGY_DISABLED: "disabled",
    _Strategy.AUTO_PARTITIONING_STRATEGY_SCALE_UP: "scale_up",
    _Strategy.AUTO_PARTITIONING_STRATEGY_SCALE_UP_AND_DOWN: "scale_up_and_down",
    _Strategy.AUTO_PARTITIONING_STRATEGY_PAUSED: "paused",
}
STRATEGY_IDS: dict[str, int] = {
    name: sid
    for sid, name in STRATEGY_NAMES.items()
    if sid != _Strategy.AUTO_PARTITIONING_STRATEGY_UNSPECIFIED
}

# The one topic attribute weir acts on: YDB's per-partition size limit, weir's
# max_partition_bytes (writes past it are refused until retention frees space).
MAX_PARTITION_SIZE = "_max_partition_storage_size"


def _strategy(value: int) -> str:
    name = STRATEGY_NAMES.get(value)
    if name is None:
        raise BadRequestError(f"unknown auto-partitioning strategy {value}")
    return name


# ---------------------------------------------------------------------- refusals


def _metering(mode: int) -> None:
    if mode != ydb_topic_pb2.METERING_MODE_UNSPECIFIED:
        # YDB's answer on a dedicated database; a weir server is one
        raise PreconditionFailedError(
            "Metering mode can only be specified in a serverless database"
        )


def check_create(request: Any) -> None:
    """Refuse the CreateTopic settings weir does not implement."""
    _metering(request.metering_mode)
    if request.content_based_deduplication:
        raise UnsupportedError("content_based_deduplication is not supported by weir")
    if request.HasField("metrics_level"):
        raise UnsupportedError("metrics_level is not supported by weir")


def check_alter(request: Any) -> None:
    """Refuse the AlterTopic settings weir does not implement (turning off what is off is fine)."""
    _metering(request.set_metering_mode)
    if request.set_content_based_deduplication:
        raise UnsupportedError("content_based_deduplication is not supported by weir")
    if request.WhichOneof("metrics_level") == "set_metrics_level":
        raise UnsupportedError("metrics_level is not supported by weir")


# ---------------------------------------------------------------------- consumers


def _consumer_attributes(name: str, attributes: Mapping[str, str]) -> None:
    if attributes:
        raise BadRequestError(
            f"consumer attributes are not supported by weir (consumer {name!r}: "
            f"{', '.join(sorted(attributes))})"
        )


def _availability_period(name: str, d: Any) -> None:
    if duration_ms(d):
        raise UnsupportedError(
            f"availability_period (consumer {name!r}) is not supported by weir: an important "
            "consumer holds back retention instead"
        )


def consumer_config(c: Any) -> ConsumerConfig:
    """A Ydb.Topic.Consumer of a create or add request."""
    _consumer_attributes(c.name, c.attributes)
    if c.HasField("availability_period"):
        _availability_period(c.name, c.availability_period)
    read_from = ts_ms(c.read_from) if c.HasField("read_from") else 0
    codecs = tuple(topic_codecs(c.supported_codecs.codecs))
    return ConsumerConfig(c.name, c.important, read_from, codecs=codecs)


def altered_consumer(current: ConsumerConfig, ac: Any) -> ConsumerConfig:
    """``current`` with the changes of a Ydb.Topic.AlterConsumer."""
    _consumer_attributes(ac.name, ac.alter_attributes)
    if ac.WhichOneof("availability_period_action") == "set_availability_period":
        _availability_period(ac.name, ac.set_availability_period)
    changes: dict[str, Any] = {}
    if ac.HasField("set_important"):
        changes["important"] = ac.set_important
    if ac.HasField("set_read_from"):
        changes["read_from_ms"] = ts_ms(ac.set_read_from)
    if ac.HasField("set_supported_codecs"):
        changes["codecs"] = tuple(topic_codecs(ac.set_supported_codecs.codecs))
    return dataclasses.replace(current, **changes)


def consumer_proto(c: ConsumerConfig) -> Any:
    out = ydb_topic_pb2.Consumer(name=c.name, important=c.important)
    if c.read_from_ms:
        set_ts(out.read_from, c.read_from_ms)
    if c.codecs:
        out.supported_codecs.codecs.extend(c.codecs)
    return out


# ---------------------------------------------------------------------- scaling


def scaling_of(request: Any) -> ScalingConfig:
    """The partitioning and write-speed settings of a CreateTopicRequest."""
    ps = request.partitioning_settings
    auto = ps.auto_partitioning_settings
    speed = auto.partition_write_speed
    return ScalingConfig(
        # partition_count_limit is the deprecated name of max_active_partitions
        max_active_partitions=ps.max_active_partitions or ps.partition_count_limit,
        strategy=_strategy(auto.strategy),
        up_utilization_percent=speed.up_utilization_percent,
        down_utilization_percent=speed.down_utilization_percent,
        stabilization_window_ms=duration_ms(speed.stabilization_window),
        write_speed_bytes_per_second=request.partition_write_speed_bytes_per_second,
        write_burst_bytes=request.partition_write_burst_bytes,
    )


def altered_scaling(current: ScalingConfig, request: Any) -> ScalingConfig | None:
    """``current`` with the changes of an AlterTopicRequest; None when it changes nothing."""
    changes: dict[str, Any] = {}
    if request.HasField("alter_partitioning_settings"):
        aps = request.alter_partitioning_settings
        if aps.HasField("set_max_active_partitions"):
            changes["max_active_partitions"] = aps.set_max_active_partitions
        elif aps.HasField("set_partition_count_limit"):
            changes["max_active_partitions"] = aps.set_partition_count_limit
        if aps.HasField("alter_auto_partitioning_settings"):
            auto = aps.alter_auto_partitioning_settings
            if auto.HasField("set_strategy"):
                changes["strategy"] = _strategy(auto.set_strategy)
            if auto.HasField("set_partition_write_speed"):
                speed = auto.set_partition_write_speed
                if speed.HasField("set_up_utilization_percent"):
                    changes["up_utilization_percent"] = speed.set_up_utilization_percent
                if speed.HasField("set_down_utilization_percent"):
                    changes["down_utilization_percent"] = speed.set_down_utilization_percent
                if speed.HasField("set_stabilization_window"):
                    changes["stabilization_window_ms"] = duration_ms(speed.set_stabilization_window)
    if request.HasField("set_partition_write_speed_bytes_per_second"):
        changes["write_speed_bytes_per_second"] = request.set_partition_write_speed_bytes_per_second
    if request.HasField("set_partition_write_burst_bytes"):
        changes["write_burst_bytes"] = request.set_partition_write_burst_bytes
    return dataclasses.replace(current, **changes) if changes else None


def check_max_partitions(partitions: int, scaling: ScalingConfig) -> None:
    """Refuse a partition count above max_active_partitions before anything is created."""
    most = scaling.max_active_partitions
    if most and partitions > most:
        raise BadRequestError(
            f"min_active_partitions ({partitions}) must not exceed max_active_partitions ({most})"
        )


# ---------------------------------------------------------------------- attributes


def attribute_settings(attributes: Mapping[str, str]) -> dict[str, int | None]:
    """The broker settings the attributes of a request set; BadRequestError for attributes
    weir does not take (YDB too refuses attributes it does not know)."""
    out: dict[str, int | None] = {}
    for key, value in attributes.items():
        if key != MAX_PARTITION_SIZE:
            raise BadRequestError(
                f"attribute {key!r} is not supported by weir (it takes {MAX_PARTITION_SIZE})"
            )
        text = value.strip()
        try:
            size = int(text) if text else 0
        except ValueError:
            raise BadRequestError(f"attribute {key} is {value!r}, not a size in bytes") from None
        if size < 0:
            raise BadRequestError(f"attribute {key} must not be negative, got {size}")
        out["max_partition_bytes"] = size or None  # empty or 0: no limit, as in YDB
    return out


def attributes_of(cfg: TopicConfig) -> dict[str, str]:
    return {MAX_PARTITION_SIZE: str(cfg.max_partition_bytes)} if cfg.max_partition_bytes else {}


# ---------------------------------------------------------------------- describe


def fill_settings(result: Any, cfg: TopicConfig) -> None:
    """The stored settings of ``cfg`` into a DescribeTopicResult."""
    s = cfg.scaling
    ps = result.partitioning_settings
    ps.min_active_partitions = cfg.partitions
    ps.max_active_partitions = ps.partition_count_limit = s.max_active_partitions or cfg.partitions
    auto = ps.auto_partitioning_settings
    auto.strategy = STRATEGY_IDS[s.strategy]
    auto.partition_write_speed.up_utilization_percent = s.up_percent
    auto.partition_write_speed.down_utilization_percent = s.down_percent
    set_duration(auto.partition_write_speed.stabilization_window, s.window_ms)
    result.partition_write_speed_bytes_per_second = s.write_speed_bytes_per_second
    result.partition_write_burst_bytes = s.write_burst_bytes
    result.attributes.update(attributes_of(cfg))
    if cfg.retention_ms:
        set_duration(result.retention_period, cfg.retention_ms)
    if cfg.retention_bytes:
        result.retention_storage_mb = -(-cfg.retention_bytes // MIB)


def retention_ms(d: Any) -> int | None:
    ms = duration_ms(d)
    if ms < 0:
        raise BadRequestError(f"retention period must not be negative, got {ms} ms")
    return ms or None


def retention_bytes(mb: int) -> int | None:
    if mb < 0:
        raise BadRequestError(f"retention_storage_mb must not be negative, got {mb}")
    return mb * MIB or None
