"""Topic registry: the SchemeShard role. Topic names, configs and their consumers.

Names follow Pulsar's ``tenant/namespace/topic`` (`weir.broker.tenancy.names`): a
bare ``orders`` means ``public/default/orders``.

Configs are JSON records in the ``topics`` table; a topic id (u32) names the
topic inside storage keys, so a dropped and re-created topic never sees the old
one's data.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar

from weir.broker.tenancy.names import PART as _PART
from weir.broker.tenancy.names import parse_topic, short_name
from weir.broker.tenancy.policies import MAX_PARTITIONS as MAX_PARTITIONS
from weir.broker.tenancy.policies import Policies
from weir.errors import BadRequestError
from weir.storage.codecs import codec_id

TOPICS = "topics"
NEXT_ID_KEY = b"\x00next_topic_id"
PERSISTENT = "persistent"
NON_PERSISTENT = "non-persistent"
TOPIC_KINDS = (PERSISTENT, NON_PERSISTENT)


def canonical_topic(path: str, database: str = "") -> str:
    """``tenant/namespace/topic`` for a topic path as a client wrote it (see `tenancy.names`).

    Every write and read request names its topic, so the answers for the names in use are
    kept (a bounded cache of short names: a name padded to megabytes, which the rules
    allow, is parsed each time rather than held; a bad name is never kept)."""
    if type(path) is str and type(database) is str and len(path) + len(database) <= _CACHED:
        return _canonical(path, database)
    return parse_topic(path, database).full


_CACHED = 1024  # characters of a name (and database) the cache keeps


@functools.lru_cache(maxsize=4096)
def _canonical(path: str, database: str) -> str:
    return parse_topic(path, database).full


def short_topic(name: str) -> str:
    """The name a single user typed: default tenant and namespace are left out."""
    return short_name(name)


def check_consumer_name(name: str) -> str:
    if not isinstance(name, str) or not _PART.match(name):
        raise BadRequestError(
            f"bad consumer name {name!r}: letters, digits, '.', '_' and '-', up to 200 characters"
        )
    return name


@dataclass(frozen=True)
class ConsumerConfig:
    """A registered consumer. ``important`` consumers hold back retention."""

    name: str
    important: bool = False
    read_from_ms: int = 0  # a new consumer starts at the first message written at/after this
    created_at_ms: int = 0
    codecs: tuple[int, ...] = ()  # the codecs it declares it can decode (reported, not checked)

    def __post_init__(self) -> None:
        object.__setattr__(self, "codecs", tuple(codec_id(c) for c in self.codecs))


AUTO_PARTITIONING_STRATEGIES = ("disabled", "scale_up", "scale_up_and_down", "paused")


@dataclass(frozen=True)
class ScalingConfig:
    """How a topic declares it should scale: partition growth under load and the write speed
    per partition (the YDB Topic API's settings). Stored and reported, not acted on: weir
    neither splits nor merges partitions and does not rate-limit writes.

    Zero means "unset" for every number; the defaults of the percentages and of the window
    are YDB's.
    """

    max_active_partitions: int = 0
    strategy: str = "disabled"
    up_utilization_percent: int = 0  # of the write speed: split above (default 90)
    down_utilization_percent: int = 0  # merge below (default 30)
    stabilization_window_ms: int = 0  # default 300 s
    write_speed_bytes_per_second: int = 0
    write_burst_bytes: int = 0

    DEFAULT_UP_PERCENT: ClassVar[int] = 90
    DEFAULT_DOWN_PERCENT: ClassVar[int] = 30
    DEFAULT_WINDOW_MS: ClassVar[int] = 300_000

    def __post_init__(self) -> None:
        if self.strategy not in AUTO_PARTITIONING_STRATEGIES:
            raise BadRequestError(
                f"unknown auto-partitioning strategy {self.strategy!r}; expected one of "
                + ", ".join(AUTO_PARTITIONING_STRATEGIES)
            )
        for attr in ("up_utilization_percent", "down_utilization_percent"):
            v = getattr(self, attr)
            if not isinstance(v, int) or not 0 <= v <= 100:
                raise BadRequestError(
                    f"{attr} must be a percentage (1 to 100, or 0 for the default), got {v!r}"
                )
        for attr in (
            "max_active_partitions",
            "stabilization_window_ms",
            "write_speed_bytes_per_second",
            "write_burst_bytes",
        ):
            v = getattr(self, attr)
            if not isinstance(v, int) or v < 0:
                raise BadRequestError(f"{attr} must not be negative, got {v!r}")

    @property
    def up_percent(self) -> int:
        return self.up_utilization_percent or self.DEFAULT_UP_PERCENT

    @property
    def down_percent(self) -> int:
        return self.down_utilization_percent or self.DEFAULT_DOWN_PERCENT

    @property
    def window_ms(self) -> int:
        return self.stabilization_window_ms or self.DEFAULT_WINDOW_MS


@dataclass(frozen=True)
class TopicConfig:
    name: str
    topic_id: int
    partitions: int
    retention_ms: int | None = None
    retention_bytes: int | None = None  # per partition
    max_partition_bytes: int | None = None
    max_partition_messages: int | None = None
    codecs: tuple[int, ...] = ()  # accepted codecs; empty: all
    consumers: dict[str, ConsumerConfig] = field(default_factory=dict)
    created_at_ms: int = 0
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    # The topic's own policies (absent keys follow its namespace). retention_ms and
    # retention_bytes above are the effective values the broker resolved.
    policies: Policies = field(default_factory=Policies)
    # "persistent" (stored, fsync'd) or "non-persistent" (only to consumers connected
    # now, never stored): chosen at creation, never changed
    kind: str = PERSISTENT
    # terminated (Pulsar's terminate): no more messages are taken, for good
    terminated: bool = False

    def __post_init__(self) -> None:
        if self.kind not in TOPIC_KINDS:
            raise BadRequestError(
                f"unknown topic kind {self.kind!r}; expected one of {', '.join(TOPIC_KINDS)}"
            )
        if not isinstance(self.partitions, int) or not 1 <= self.partitions <= MAX_PARTITIONS:
            raise BadRequestError(
                f"partitions must be between 1 and {MAX_PARTITIONS}, got {self.partitions!r}"
            )
        for attr in (
            "retention_ms",
            "retention_bytes",
            "max_partition_bytes",
            "max_partition_messages",
        ):
            v = getattr(self, attr)
            if v is not None and (not isinstance(v, int) or v <= 0):
                raise BadRequestError(f"{attr} must be a positive integer or unset, got {v!r}")
        for c in self.codecs:
            codec_id(c)
        most = self.scaling.max_active_partitions
        if most and most < self.partitions:
            raise BadRequestError(
                f"max_active_partitions ({most}) must not be below the partition count "
                f"({self.partitions}); raise it first (YDB Topic API: alter_topic)"
            )

    def to_json(self) -> bytes:
        d = asdict(replace(self, policies=Policies()))
        d["codecs"] = list(self.codecs)
        d["policies"] = dict(self.policies)
        return json.dumps(d, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes | memoryview) -> TopicConfig:
        d: dict[str, Any] = json.loads(bytes(raw))
        d["codecs"] = tuple(d.get("codecs", ()))
        d["consumers"] = {
            k: ConsumerConfig(**{**v, "codecs": tuple(v.get("codecs", ()))})
            for k, v in d.get("consumers", {}).items()
        }
        d["scaling"] = ScalingConfig(**d.get("scaling", {}))
        if "policies" in d:
            d["policies"] = Policies(d["policies"], topic=True)
        else:
            # stored before policies existed: the retention it was created with is its own
            d["policies"] = Policies(
                {
                    "retention_ms": d.get("retention_ms"),
                    "retention_bytes": d.get("retention_bytes"),
                },
                topic=True,
            )
        return cls(**d)

    def with_consumer(self, consumer: ConsumerConfig) -> TopicConfig:
        return replace(self, consumers={**self.consumers, consumer.name: consumer})

    def log_id(self, partition: int) -> int:
        return log_id(self.topic_id, partition)


def log_id(topic_id: int, partition: int) -> int:
    """The storage name of a partition: topic id in the high 32 bits."""
    return (topic_id << 32) | partition


def topic_key(name: str) -> bytes:
    return name.encode()
