"""What a subscription is, as stored: its name, type and where it started."""

from __future__ import annotations

import enum
import json
import struct
from dataclasses import dataclass

from weir.errors import BadRequestError

_META_KEY = struct.Struct(">cI")


class SubscriptionType(enum.Enum):
    """Who gets which message (see docs/subscriptions.md)."""

    EXCLUSIVE = "exclusive"  # one consumer; a second is refused
    FAILOVER = "failover"  # one active consumer per partition, the others on standby
    SHARED = "shared"  # round-robin over every consumer, by permits; no ordering
    KEY_SHARED = "key_shared"  # each key to one consumer at a time; per-key order

    @classmethod
    def parse(cls, value: str | SubscriptionType) -> SubscriptionType:
        if isinstance(value, SubscriptionType):
            return value
        try:
            return cls(str(value).lower().replace("-", "_"))
        except ValueError:
            raise BadRequestError(
                f"subscription type must be one of {[t.value for t in cls]}, not {value!r}"
            ) from None


class InitialPosition(enum.Enum):
    """Where a new subscription's cursor starts on each partition."""

    EARLIEST = "earliest"
    LATEST = "latest"
    TIMESTAMP = "timestamp"  # the first message written at or after a given time

    @classmethod
    def parse(cls, value: str | InitialPosition) -> InitialPosition:
        if isinstance(value, InitialPosition):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            raise BadRequestError(
                f"initial position must be 'earliest', 'latest' or a time, not {value!r}"
            ) from None


def check_subscription_name(name: str) -> str:
    if not isinstance(name, str) or not name or len(name) > 256 or "/" in name:
        raise BadRequestError(f"a subscription name is 1-256 characters without '/', got {name!r}")
    return name


def meta_key(topic_id: int, name: str) -> bytes:
    return _META_KEY.pack(b"m", topic_id) + name.encode()


def parse_meta_key(key: bytes) -> tuple[int, str]:
    _, tid = _META_KEY.unpack_from(key)
    return tid, bytes(key[_META_KEY.size :]).decode()


@dataclass(frozen=True, slots=True)
class SubscriptionMeta:
    name: str
    type: SubscriptionType
    initial_position: InitialPosition
    created_at_ms: int
    max_redeliver_count: int = 0  # 0: no dead-letter topic
    dead_letter_topic: str = ""  # empty: <topic>-<subscription>-DLQ

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "name": self.name,
                "type": self.type.value,
                "initial_position": self.initial_position.value,
                "created_at_ms": self.created_at_ms,
                "max_redeliver_count": self.max_redeliver_count,
                "dead_letter_topic": self.dead_letter_topic,
            }
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes | memoryview) -> SubscriptionMeta:
        d = json.loads(bytes(raw))
        return cls(
            d["name"],
            SubscriptionType(d["type"]),
            InitialPosition(d["initial_position"]),
            d["created_at_ms"],
            d.get("max_redeliver_count", 0),
            d.get("dead_letter_topic", ""),
        )
