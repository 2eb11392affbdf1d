"""Broker configuration: storage layout, limits and defaults, with sane values."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from weir.storage.kv import DEFAULT_MAP_SIZE
from weir.storage.read_cache import DEFAULT_READ_CACHE_BYTES

DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class BrokerConfig:
    """Everything the broker needs to run; the CLI builds it from TOML, env and flags."""

    data_dir: Path = field(default_factory=lambda: Path("data"))
    # storage
    map_size: int = DEFAULT_MAP_SIZE
    low_watermark: int = 6 << 20
    max_blob_size: int = 8 << 20
    min_disk_free: int = 64 << 20
    verify_on_start: bool = False
    read_cache_bytes: int = DEFAULT_READ_CACHE_BYTES  # shared by all partitions; 0: off
    # limits and backpressure
    max_batch_bytes: int = 64 << 20  # one incoming batch / request
    max_partition_queue_bytes: int = 128 << 20  # bytes waiting for commit, per partition
    max_commit_bytes: int = 16 << 20  # bytes of one partition in one commit
    max_session_inflight_bytes: int = 128 << 20  # per write session, unacknowledged
    # topic defaults
    default_partitions: int = 1
    default_retention_ms: int | None = 7 * DAY_MS
    default_retention_bytes: int | None = None
    retention_interval_s: float = 10.0
    auto_create_consumers: bool = True
    # read sessions
    rebalance_timeout_s: float = 10.0
    # auth: user -> password; empty means no static users
    users: dict[str, str] = field(default_factory=dict)
    allow_anonymous: bool = True
