"""Policies: the settings a namespace gives its topics, and a topic may override.

A policy set maps known keys to values; a key that is absent is inherited (topic
from namespace, namespace from the server's config). For the limits, ``None`` is
a value ("no limit": keep forever, no TTL, any number of producers), not
"inherit". `effective` resolves the three levels into the values the broker
enforces. An unknown key or a bad value is refused as a whole: nothing changes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from weir.errors import BadRequestError

MAX_PARTITIONS = 10_000


@dataclass(frozen=True)
class PolicyKey:
    name: str
    kind: str  # "limit": positive int or None; "bool"; "partitions"
    doc: str
    topic_level: bool = True  # a topic may override it


KEYS: dict[str, PolicyKey] = {
    k.name: k
    for k in (
        PolicyKey("retention_ms", "limit", "keep messages this long (null: forever)"),
        PolicyKey(
            "retention_bytes", "limit", "keep at most this many bytes per partition (null: any)"
        ),
        PolicyKey(
            "message_ttl_ms",
            "limit",
            "a consumer skips messages older than this; retention may then remove them even "
            "before an important consumer read them (null: no TTL)",
        ),
        PolicyKey(
            "backlog_quota_bytes",
            "limit",
            "writes are refused (retryable) while important consumers have more than this "
            "many bytes per partition left to read (null: no quota)",
        ),
        PolicyKey(
            "offload_threshold_bytes",
            "limit",
            "offload sealed blobs to the tier while a partition holds more than this many "
            "bytes locally (null: not by size)",
        ),
        PolicyKey(
            "offload_threshold_ms",
            "limit",
            "offload sealed blobs whose newest message is older than this (null: not by age)",
        ),
        PolicyKey(
            "offload_deletion_lag_ms",
            "limit",
            "keep the local copy of an offloaded blob this long after the copy (null: free it "
            "at once)",
        ),
        PolicyKey(
            "large_payload_threshold_bytes",
            "limit",
            "store a message whose data is larger than this as its own object in the tier, "
            "the log holding a reference (null: never)",
        ),
        PolicyKey("deduplication", "bool", "drop a producer's resent seq_nos"),
        PolicyKey("max_message_bytes", "limit", "largest message (data plus key)"),
        PolicyKey("max_producers_per_topic", "limit", "live write sessions per topic (null: any)"),
        PolicyKey("max_consumers_per_topic", "limit", "live read sessions per topic (null: any)"),
        PolicyKey(
            "compaction_threshold_bytes",
            "limit",
            "compact a topic when a partition has this many bytes past its compacted view "
            "(null: only when asked)",
        ),
        PolicyKey(
            "compaction_delete_retention_ms",
            "limit",
            "how long a tombstone stays in a compacted view (null: for ever)",
        ),
        PolicyKey(
            "default_partitions",
            "partitions",
            "partitions of a topic created without a count",
            topic_level=False,
        ),
        PolicyKey(
            "auto_create_topics",
            "bool",
            "writing to or reading an unknown topic creates it",
            topic_level=False,
        ),
    )
}


def _check(key: str, value: Any) -> Any:
    spec = KEYS.get(key)
    if spec is None:
        raise BadRequestError(f"unknown policy {key!r}; known: {', '.join(sorted(KEYS))}")
    if spec.kind == "bool":
        if not isinstance(value, bool):
            raise BadRequestError(f"policy {key} must be true or false, got {value!r}")
        return value
    if value is None and spec.kind == "limit":
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequestError(f"policy {key} must be an integer, got {value!r}")
    if value < 0:
        raise BadRequestError(f"policy {key} must not be negative, got {value}")
    if value == 0:
        raise BadRequestError(
            f"policy {key} must be greater than 0"
            + (" (null means no limit)" if spec.kind == "limit" else "")
        )
    if spec.kind == "partitions" and value > MAX_PARTITIONS:
        raise BadRequestError(f"policy {key} must be at most {MAX_PARTITIONS}, got {value}")
    return value


class Policies(Mapping[str, Any]):
    """An immutable, validated set of policies (absent keys are inherited)."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any] | None = None, *, topic: bool = False) -> None:
        checked = {}
        for k, v in (values or {}).items():
            checked[k] = _check(k, v)
            if topic and not KEYS[k].topic_level:
                raise BadRequestError(f"policy {k} is a namespace's, a topic cannot set it")
        self._values: dict[str, Any] = checked

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._values))

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Policies({self._values!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self) == dict(other)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def updated(
        self, changes: Mapping[str, Any], remove: tuple[str, ...] = (), *, topic: bool = False
    ) -> Policies:
        """A copy with ``changes`` set and ``remove`` inherited again (all checked first)."""
        for k in remove:
            if k not in KEYS:
                raise BadRequestError(f"unknown policy {k!r}; known: {', '.join(sorted(KEYS))}")
        merged = {k: v for k, v in self._values.items() if k not in remove}
        merged.update(changes)
        return Policies(merged, topic=topic)

    def to_json(self) -> str:
        return json.dumps(dict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Policies:
        return cls(json.loads(text or "{}"))


def effective(server: Mapping[str, Any], *levels: Mapping[str, Any]) -> dict[str, Any]:
    """The value of every key: the last level that sets it wins (server < namespace < topic)."""
    out = dict(server)
    for level in levels:
        out.update(level)
    return out
