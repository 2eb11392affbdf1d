"""A Kafka consumer group's member as the cluster tests make one (kafka-python)."""

from __future__ import annotations

from typing import Any

from kafka import KafkaConsumer, TopicPartition

from tests.conftest import ServerProcess


def group_member(
    broker: ServerProcess, group: str, tp: TopicPartition, **security: Any
) -> KafkaConsumer:
    """A kafka-python consumer of ``group`` bootstrapped at ``broker``, assigned ``tp``,
    committing by hand (``security``: kafka-python's settings for SASL or TLS)."""
    consumer = KafkaConsumer(
        bootstrap_servers=broker.kafka,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=30_000,
        retry_backoff_ms=200,
        **security,
    )
    consumer.assign([tp])
    return consumer
