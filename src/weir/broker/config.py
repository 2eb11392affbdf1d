"""Broker configuration: storage layout, limits and defaults, with sane values."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from weir.storage.kv import DEFAULT_MAP_SIZE
from weir.storage.read_cache import DEFAULT_READ_CACHE_BYTES

DAY_MS = 24 * 3600 * 1000
DEFAULT_MAX_MESSAGE_BYTES = 32 << 20
# room a batch needs besides its one message: header, producer id, columns
BATCH_OVERHEAD_BYTES = 4 << 10


@dataclass(frozen=True)
class BrokerConfig:
    """Everything the broker needs to run; the CLI builds it from TOML, env and flags."""

    data_dir: Path = field(default_factory=lambda: Path("weir-data"))
    # storage
    map_size: int = DEFAULT_MAP_SIZE
    low_watermark: int = 6 << 20
    max_blob_size: int = 8 << 20
    min_disk_free: int = 64 << 20
    verify_on_start: bool = False
    read_cache_bytes: int = DEFAULT_READ_CACHE_BYTES  # shared by all partitions; 0: off
    # storage mode (docs/cluster.md): "embedded" (LMDB in data_dir, one server) or
    # "replicated" (partitions on ledgers of the bookies, owned through ZooKeeper)
    storage_mode: str = "embedded"
    cluster_zookeeper: str = ""  # ZooKeeper hosts "h1:2181,h2:2181" (replicated mode)
    cluster_root: str = "/weir"  # the cluster's ZooKeeper root (bookies' and brokers')
    cluster_broker_id: str = ""  # this broker's name in the cluster ("": its listen address)
    cluster_ensemble_size: int = 3  # bookies a partition's ledger is spread over
    cluster_write_quorum: int = 3  # copies of each entry
    cluster_ack_quorum: int = 2  # copies acknowledged before a write is
    cluster_session_timeout_s: float = 10.0  # ZooKeeper session: ownership lapses after it
    # bookie id -> the address this broker connects to instead (NAT, a fault proxy)
    cluster_bookie_routes: dict[str, str] = field(default_factory=dict)
    cluster_bookie_timeout_s: float = 30.0  # a bookie request unanswered this long failed
    # a commit up to this size is made in the event loop when the committer thread is
    # idle (no thread hand-off); 0 (the default): every commit goes to the thread. Off
    # by default: a stalled fsync would freeze every connection (docs/performance.md)
    inline_commit_bytes: int = 0
    # a commit is durable after one journal append (LMDB applied behind it, replayed at
    # start: weir.storage.journaled_kv); off by default (docs/performance.md)
    journal: bool = False
    # tiered storage (docs/tiered-storage.md): where offloaded segments go
    tier_backend: str = "local"  # "local" (a directory) or "s3"
    tier_local_dir: Path | None = None  # None: <data_dir>/tier
    tier_s3_endpoint: str = ""
    tier_s3_bucket: str = ""
    tier_s3_prefix: str = "weir"
    tier_s3_region: str = "us-east-1"
    tier_s3_access_key: str = ""
    tier_s3_secret_key: str = ""
    tier_cache_bytes: int = 128 << 20  # offloaded blobs read back, checked, in memory
    tier_interval_s: float = 10.0  # how often offload, expiry and the sweeper run
    tier_payload_grace_s: float = 600.0  # an unreferenced payload object younger is kept
    tier_object_bytes: int = 0  # pack consecutive blobs into objects this big (0: one each)
    tier_object_wait_s: float = 600.0  # a smaller last object waits this long for more
    # limits and backpressure
    max_batch_bytes: int = 64 << 20  # one incoming batch / request
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES  # one message: data plus key
    max_partition_queue_bytes: int = 128 << 20  # bytes waiting for commit, per partition
    max_commit_bytes: int = 16 << 20  # bytes of one partition in one commit
    max_session_inflight_bytes: int = 128 << 20  # per write session, unacknowledged
    # topic defaults
    default_partitions: int = 1
    default_retention_ms: int | None = 7 * DAY_MS
    default_retention_bytes: int | None = None
    retention_interval_s: float = 10.0
    # a producer idle this long is no longer bound to its partition (None: never)
    producer_idle_timeout_ms: int | None = 7 * DAY_MS
    auto_create_consumers: bool = True
    # a producer or consumer of an unknown topic creates it (namespace policy
    # auto_create_topics overrides); off: UnknownTopicError as before
    auto_create_topics: bool = True
    # compaction (docs/topics.md): how often topics over their compaction threshold are
    # looked for; how long a tombstone stays in a view (the policy's default); whether
    # keyless messages stay in a view (Pulsar < 3.2) or are left out (>= 3.2)
    compaction_interval_s: float = 60.0
    compaction_delete_retention_ms: int | None = DAY_MS
    compaction_retain_keyless: bool = False
    compaction_blob_bytes: int = 1 << 20
    # non-persistent topics: bytes queued for one consumer before its messages are dropped
    non_persistent_queue_bytes: int = 4 << 20
    # read sessions
    rebalance_timeout_s: float = 10.0
    # transactions: aborted when neither committed nor aborted within their timeout
    transaction_timeout_ms: int = 60_000  # when the client asks for none
    max_transaction_timeout_ms: int = 15 * 60_000
    # auth: user -> password; empty means no static users
    users: dict[str, str] = field(default_factory=dict)
    allow_anonymous: bool = True

    @property
    def message_limit(self) -> int:
        """The largest message (data plus key) writers may send: ``max_message_bytes``, or
        less when ``max_batch_bytes`` leaves no room for a batch that big."""
        return self.cap_message_limit(self.max_message_bytes)

    def cap_message_limit(self, limit: int) -> int:
        """``limit`` (a topic's max_message_bytes), capped by what one batch can carry."""
        return max(1, min(limit, self.max_batch_bytes - BATCH_OVERHEAD_BYTES))
