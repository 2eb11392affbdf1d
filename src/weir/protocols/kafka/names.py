"""Kafka topic names <-> weir topic names.

A Kafka topic name is a weir topic path: ``orders`` is ``public/default/orders``,
``ns/orders`` is ``public/ns/orders`` and ``acme/ns/orders`` is itself. Topics are
shown to Kafka clients the same way (the default tenant and namespace left out).
"""

from __future__ import annotations

import hashlib
import uuid

from weir.broker.topics import TopicConfig, canonical_topic, short_topic


def weir_topic(kafka_name: str) -> str:
    """The full weir name (BadRequestError for a name weir does not accept)."""
    return canonical_topic(kafka_name)


def kafka_name(weir_name: str) -> str:
    return short_topic(weir_name)


def topic_uuid(cfg: TopicConfig) -> bytes:
    """A stable topic id: the same for the topic's whole life, new for a recreated one."""
    seed = f"{cfg.name}/{cfg.topic_id}/{cfg.created_at_ms}".encode()
    return uuid.UUID(bytes=hashlib.sha256(seed).digest()[:16], version=4).bytes
