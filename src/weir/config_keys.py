"""Every configuration key, declared once (`KEYS`): its section, name, kind, default and
meaning. `weir.config` loads them; ``weir config default`` and docs/configuration.md are
made from them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weir.broker.config import BrokerConfig
from weir.config_values import (
    ADDRESS,
    BOOL,
    COUNT,
    DURATION_MS,
    DURATION_S,
    LEVEL,
    NAMES,
    OPTIONAL_ADDRESS,
    OPTIONAL_DURATION_MS,
    OPTIONAL_PATH,
    OPTIONAL_SIZE,
    PARTITIONS,
    PATH,
    ROUTES,
    SECRET,
    SIZE,
    SIZE_OR_ZERO,
    STORAGE_MODE,
    STRING,
    USERS,
    ZK_PATH,
    Kind,
)
from weir.protocols.native.framing import DEFAULT_PORT
from weir.storage.kv import DEFAULT_MAP_SIZE

ENV_PREFIX = "WEIR_"
DEFAULT_LISTEN = "127.0.0.1:2136"
DEFAULT_METRICS_LISTEN = "127.0.0.1:9464"
DEFAULT_KAFKA_PORT = 9092
DEFAULT_PULSAR_PORT = 6650
DEFAULT_HTTP_PORT = 8080
DEFAULT_NATIVE_TCP_PORT = DEFAULT_PORT  # the native protocol's framed TCP port


@dataclass(frozen=True, eq=False)
class Key:
    """One configuration key: ``[section] name``, what it holds and where it goes."""

    section: str
    name: str
    kind: Kind
    default: Any
    doc: str
    broker_field: str = ""  # the BrokerConfig field it sets, if any

    @property
    def path(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def env(self) -> str:
        return f"{ENV_PREFIX}{self.section}_{self.name}".upper()


_B = BrokerConfig()

KEYS: tuple[Key, ...] = (
    Key(
        "server",
        "listen",
        ADDRESS,
        DEFAULT_LISTEN,
        "Address of the gRPC port (native protocol and YDB Topic API).",
    ),
    Key(
        "server",
        "data_dir",
        PATH,
        Path("weir-data"),
        "Directory of the LMDB environment; one server per directory.",
        "data_dir",
    ),
    Key(
        "server",
        "shutdown_grace_s",
        DURATION_S,
        5.0,
        "On SIGTERM/SIGINT, how long open streams get to finish before they are cut.",
    ),
    Key(
        "storage",
        "map_size",
        SIZE,
        DEFAULT_MAP_SIZE,
        "Largest size the LMDB file may grow to (address space, not disk, until used).",
        "map_size",
    ),
    Key(
        "storage",
        "low_watermark",
        SIZE,
        _B.low_watermark,
        "Head size at which small blobs are compacted into a big one. Each compaction is "
        "one commit of this many bytes that the writes behind it wait for: 1MiB took the "
        "p99.9 of paced acks from 25-27 to 12-24 ms, but cost about a sixth of the 100 B "
        "produce and consume rates and made six times as many big blobs to index and "
        "open at start (docs/performance.md).",
        "low_watermark",
    ),
    Key(
        "storage",
        "max_blob_size",
        SIZE,
        _B.max_blob_size,
        "Target size of a compacted blob; larger writes go straight to big blobs.",
        "max_blob_size",
    ),
    Key(
        "storage",
        "min_disk_free",
        SIZE,
        _B.min_disk_free,
        "Free disk kept in reserve: writes that would eat into it are refused (retryable). "
        "The disk is asked at most every 0.1 s while more than 256 MiB above the reserve, "
        "and on every write nearer it.",
        "min_disk_free",
    ),
    Key(
        "storage",
        "verify_on_start",
        BOOL,
        _B.verify_on_start,
        "Check the CRC of every stored batch at start, not only the heads (slow on big data).",
        "verify_on_start",
    ),
    Key(
        "storage",
        "read_cache_bytes",
        SIZE_OR_ZERO,
        _B.read_cache_bytes,
        "Memory for the read cache all partitions share: a big blob is checked once, then "
        "served to every reader from memory; blobs just written enter it as they commit. "
        "0 turns it off.",
        "read_cache_bytes",
    ),
    Key(
        "storage",
        "inline_commit_bytes",
        SIZE_OR_ZERO,
        _B.inline_commit_bytes,
        "A commit up to this size is made in the event loop itself when the committer "
        "thread is idle (no thread hand-off: lower ack latency); larger ones, and all of "
        "them while the thread is busy, go to the committer thread. 0: always the thread. "
        "Off by default: while an inline fsync is slow or stalls, every connection waits.",
        "inline_commit_bytes",
    ),
    Key(
        "storage",
        "journal",
        BOOL,
        _B.journal,
        "Acknowledge a commit after one journal append + fdatasync instead of LMDB's two "
        "durable writes; LMDB is brought up to date behind it in batches and the journal "
        "is replayed at start (docs/storage.md). Off by default (docs/performance.md).",
        "journal",
    ),
    Key(
        "storage",
        "mode",
        STORAGE_MODE,
        _B.storage_mode,
        "'embedded': partitions in the LMDB environment of data_dir (one server). "
        "'replicated': partitions on ledgers of the bookies, each owned by one broker of "
        "the cluster through ZooKeeper ([cluster] keys; docs/cluster.md).",
        "storage_mode",
    ),
    Key(
        "cluster",
        "zookeeper",
        STRING,
        _B.cluster_zookeeper,
        'ZooKeeper hosts of the cluster, "host:port,host:port" (storage.mode = '
        "'replicated' needs it).",
        "cluster_zookeeper",
    ),
    Key(
        "cluster",
        "root",
        ZK_PATH,
        _B.cluster_root,
        "The cluster's ZooKeeper root: the bookies' registry, ledgers, partitions and claims "
        "live under it (the same root as the bookies').",
        "cluster_root",
    ),
    Key(
        "cluster",
        "broker_id",
        STRING,
        _B.cluster_broker_id,
        "This broker's name in the cluster, unique among brokers ('': its server.listen address).",
        "cluster_broker_id",
    ),
    Key(
        "cluster",
        "ensemble_size",
        COUNT,
        _B.cluster_ensemble_size,
        "Bookies each ledger of a partition is spread over (E).",
        "cluster_ensemble_size",
    ),
    Key(
        "cluster",
        "write_quorum",
        COUNT,
        _B.cluster_write_quorum,
        "Bookies each entry is written to (WQ <= E).",
        "cluster_write_quorum",
    ),
    Key(
        "cluster",
        "ack_quorum",
        COUNT,
        _B.cluster_ack_quorum,
        "Bookies that must have an entry before the write is acknowledged (AQ <= WQ).",
        "cluster_ack_quorum",
    ),
    Key(
        "cluster",
        "session_timeout_s",
        DURATION_S,
        _B.cluster_session_timeout_s,
        "ZooKeeper session timeout: a broker cut off this long loses its partitions (it "
        "stops serving them at once when the connection drops).",
        "cluster_session_timeout_s",
    ),
    Key(
        "cluster",
        "bookie_routes",
        ROUTES,
        dict(_B.cluster_bookie_routes),
        "Where this broker connects to reach a bookie, when not at the bookie's id "
        '(bookie id = "host:port": a NAT\'d address; the fault tests put a proxy there). '
        "Bookies not named are reached at their id. In the environment: id=host:port,...",
        "cluster_bookie_routes",
    ),
    Key(
        "cluster",
        "bookie_timeout_s",
        DURATION_S,
        _B.cluster_bookie_timeout_s,
        "A bookie request unanswered this long failed: the bookie is replaced in the "
        "ledger's ensemble (or the write fails without a write quorum).",
        "cluster_bookie_timeout_s",
    ),
    Key(
        "tier",
        "backend",
        STRING,
        _B.tier_backend,
        "Object store of tiered storage: 'local' (a directory, the embedded default) or 's3' "
        "(any S3-compatible endpoint). Nothing is offloaded until a namespace or topic sets "
        "an offload policy (docs/tiered-storage.md).",
        "tier_backend",
    ),
    Key(
        "tier",
        "local_dir",
        OPTIONAL_PATH,
        None,
        "Directory of the 'local' tier back end (default: <data_dir>/tier).",
        "tier_local_dir",
    ),
    Key(
        "tier",
        "s3_endpoint",
        STRING,
        "",
        "S3 endpoint URL ('' : AWS for the region).",
        "tier_s3_endpoint",
    ),
    Key(
        "tier", "s3_bucket", STRING, "", "S3 bucket of the tier (it must exist).", "tier_s3_bucket"
    ),
    Key(
        "tier",
        "s3_prefix",
        STRING,
        _B.tier_s3_prefix,
        "Key prefix of weir's objects in the bucket.",
        "tier_s3_prefix",
    ),
    Key("tier", "s3_region", STRING, _B.tier_s3_region, "S3 region.", "tier_s3_region"),
    Key(
        "tier",
        "s3_access_key",
        STRING,
        "",
        "S3 access key id ('' : the client's own chain: AWS_* variables, instance role).",
        "tier_s3_access_key",
    ),
    Key("tier", "s3_secret_key", SECRET, "", "S3 secret access key.", "tier_s3_secret_key"),
    Key(
        "tier",
        "cache_bytes",
        SIZE_OR_ZERO,
        _B.tier_cache_bytes,
        "Memory for offloaded blobs read back from the store (checked once, then served "
        "from memory); sequential readers also read the next one ahead. 0: no cache.",
        "tier_cache_bytes",
    ),
    Key(
        "tier",
        "interval_s",
        DURATION_S,
        _B.tier_interval_s,
        "How often offload, object expiry and the orphan sweeper run (backing off while "
        "the store is unreachable).",
        "tier_interval_s",
    ),
    Key(
        "tier",
        "payload_grace_s",
        DURATION_S,
        _B.tier_payload_grace_s,
        "A large-payload object no log entry references is collected once older than this "
        "(it may belong to a write in flight).",
        "tier_payload_grace_s",
    ),
    Key(
        "tier",
        "object_bytes",
        SIZE_OR_ZERO,
        _B.tier_object_bytes,
        "Pack consecutive sealed blobs of a partition into objects of up to this size (one "
        "Parquet row group per blob): fewer, larger files for analytics readers such as "
        "Spark, while the broker still reads back one blob by byte range. 0: one blob per "
        "object.",
        "tier_object_bytes",
    ),
    Key(
        "tier",
        "object_wait_s",
        DURATION_S,
        _B.tier_object_wait_s,
        "With object_bytes set, a last object smaller than it waits this long (since its "
        "oldest blob's last write) for more blobs before it is written anyway; "
        "`weir topic offload` writes it at once.",
        "tier_object_wait_s",
    ),
    Key(
        "limits",
        "max_batch_bytes",
        SIZE,
        _B.max_batch_bytes,
        "Largest single batch a client may send.",
        "max_batch_bytes",
    ),
    Key(
        "limits",
        "max_message_bytes",
        SIZE,
        _B.max_message_bytes,
        "Largest message (data plus key) a writer may send, on every front; writers learn it "
        "when they connect (capped at limits.max_batch_bytes less 4KiB).",
        "max_message_bytes",
    ),
    Key(
        "limits",
        "max_partition_queue_bytes",
        SIZE,
        _B.max_partition_queue_bytes,
        "Bytes waiting for commit per partition before writes are refused as overloaded.",
        "max_partition_queue_bytes",
    ),
    Key(
        "limits",
        "max_commit_bytes",
        SIZE,
        _B.max_commit_bytes,
        "Bytes of one partition taken into one group commit.",
        "max_commit_bytes",
    ),
    Key(
        "limits",
        "max_session_inflight_bytes",
        SIZE,
        _B.max_session_inflight_bytes,
        "Unacknowledged bytes per write session: past it the native front refuses with "
        "OVERLOADED; the YDB front stops reading the stream (backpressure) until acks catch up.",
        "max_session_inflight_bytes",
    ),
    Key(
        "topics",
        "default_partitions",
        PARTITIONS,
        _B.default_partitions,
        "Partitions of a topic created without a count.",
        "default_partitions",
    ),
    Key(
        "topics",
        "default_retention_ms",
        OPTIONAL_DURATION_MS,
        _B.default_retention_ms,
        'Retention by age of a topic created without one ("none": keep forever).',
        "default_retention_ms",
    ),
    Key(
        "topics",
        "default_retention_bytes",
        OPTIONAL_SIZE,
        _B.default_retention_bytes,
        'Retention by size per partition of a topic created without one ("none": no limit).',
        "default_retention_bytes",
    ),
    Key(
        "topics",
        "auto_create",
        BOOL,
        _B.auto_create_topics,
        "A producer or consumer (native front) of an unknown topic creates it in its "
        "namespace; a namespace's auto_create_topics policy overrides this.",
        "auto_create_topics",
    ),
    Key(
        "topics",
        "retention_interval_s",
        DURATION_S,
        _B.retention_interval_s,
        "How often retention runs.",
        "retention_interval_s",
    ),
    Key(
        "topics",
        "producer_idle_timeout_ms",
        OPTIONAL_DURATION_MS,
        _B.producer_idle_timeout_ms,
        "A producer that has not written for this long is no longer pinned to its partition "
        '("none": pinned while its messages last).',
        "producer_idle_timeout_ms",
    ),
    Key(
        "topics",
        "non_persistent_queue_bytes",
        SIZE,
        _B.non_persistent_queue_bytes,
        "Non-persistent topics: bytes waiting for one consumer; past it its messages are "
        "dropped (and counted), never queued without bound.",
        "non_persistent_queue_bytes",
    ),
    Key(
        "compaction",
        "interval_s",
        DURATION_S,
        _B.compaction_interval_s,
        "How often topics are checked against their compaction_threshold_bytes policy.",
        "compaction_interval_s",
    ),
    Key(
        "compaction",
        "delete_retention_ms",
        OPTIONAL_DURATION_MS,
        _B.compaction_delete_retention_ms,
        "How long a tombstone (a key with empty data) stays in a compacted view, where the "
        'compaction_delete_retention_ms policy does not say ("none": for ever).',
        "compaction_delete_retention_ms",
    ),
    Key(
        "compaction",
        "retain_keyless",
        BOOL,
        _B.compaction_retain_keyless,
        "Keep keyless messages in compacted views (Pulsar before 3.2) instead of leaving "
        "them out (Pulsar 3.2 on, Kafka).",
        "compaction_retain_keyless",
    ),
    Key(
        "compaction",
        "blob_bytes",
        SIZE,
        _B.compaction_blob_bytes,
        "Size of the blobs a compacted view is written in.",
        "compaction_blob_bytes",
    ),
    Key(
        "consumers",
        "auto_create",
        BOOL,
        _B.auto_create_consumers,
        "A reader or commit naming an unknown consumer registers it (else: an error).",
        "auto_create_consumers",
    ),
    Key(
        "consumers",
        "rebalance_timeout_s",
        DURATION_S,
        _B.rebalance_timeout_s,
        "How long a reader gets to release a partition given to another reader.",
        "rebalance_timeout_s",
    ),
    Key(
        "transactions",
        "timeout_ms",
        DURATION_MS,
        _B.transaction_timeout_ms,
        "A transaction neither committed nor aborted this long after it began is aborted "
        "(when its client asks for no timeout of its own).",
        "transaction_timeout_ms",
    ),
    Key(
        "transactions",
        "max_timeout_ms",
        DURATION_MS,
        _B.max_transaction_timeout_ms,
        "The longest timeout a client may ask for: an open transaction holds back "
        "read-committed readers and retention of its partitions.",
        "max_transaction_timeout_ms",
    ),
    Key(
        "auth",
        "users",
        USERS,
        dict(_B.users),
        'Static users (YDB Auth Login and the native Login), as user = "password" '
        '(env: "user:pw,user2:pw2").',
        "users",
    ),
    Key(
        "auth",
        "allow_anonymous",
        BOOL,
        _B.allow_anonymous,
        "Serve clients that send no credentials (on every front).",
        "allow_anonymous",
    ),
    Key(
        "auth",
        "superusers",
        NAMES,
        [],
        "Principals (users, token subjects, client certificate names) with every permission, "
        "user and grant management included. With anonymous access off, naming one turns "
        'grants on (empty: every authenticated principal may do everything) (env: "admin,ops").',
    ),
    Key(
        "auth",
        "jwt_secret",
        SECRET,
        "",
        "Accept JWTs signed with this HS256 secret (subject = principal; exp required). "
        "Never shown by weir config check.",
    ),
    Key(
        "auth",
        "jwt_public_key_file",
        OPTIONAL_PATH,
        None,
        "Accept JWTs signed (RS256 or ES256) by the private key of this PEM public key.",
    ),
    Key(
        "auth",
        "jwt_audience",
        STRING,
        "",
        'When set, a JWT must name it in its "aud" claim.',
    ),
    Key(
        "auth",
        "cluster_secret",
        SECRET,
        "",
        "Replicated mode: a secret shared by every broker of the cluster (16 characters or "
        "more), required when anonymous access is off. Brokers authenticate to each other "
        "with it and sign login tokens with it, so any broker accepts them. Never shown.",
    ),
    Key(
        "tls",
        "cert_file",
        OPTIONAL_PATH,
        None,
        "PEM certificate (chain) of the gRPC port and the metrics endpoint: set, both speak "
        "TLS only. Replacing the file (or SIGHUP) takes effect at the next handshake.",
    ),
    Key(
        "tls",
        "key_file",
        OPTIONAL_PATH,
        None,
        "PEM private key of tls.cert_file.",
    ),
    Key(
        "tls",
        "client_ca_file",
        OPTIONAL_PATH,
        None,
        "PEM CA bundle that signs client certificates: set, clients present one (mTLS). In "
        "a cluster, brokers present their own certificate (tls.cert_file) to each other.",
    ),
    Key(
        "tls",
        "peer_ca_file",
        OPTIONAL_PATH,
        None,
        "Replicated mode, with tls.cert_file set: the PEM CA bundle this broker checks the "
        "other brokers' certificates with when it calls them (the Kafka group coordinator "
        "asks a partition's owner for its offsets). Unset: the system's trust roots. Read at "
        "start.",
    ),
    Key(
        "pulsar",
        "enabled",
        BOOL,
        True,
        "Serve the Pulsar binary protocol (pulsar-client and every Pulsar client) on pulsar.listen.",
    ),
    Key(
        "pulsar",
        "listen",
        OPTIONAL_ADDRESS,
        "",
        f'Address of the Pulsar port; "" is the host of server.listen, port {DEFAULT_PULSAR_PORT}. '
        "TLS (pulsar+ssl://) when tls.cert_file is set.",
    ),
    Key(
        "pulsar",
        "max_message_size",
        SIZE,
        5 << 20,
        "Largest message a Pulsar client may send in one piece (it chunks bigger ones when "
        "chunking is on); capped at limits.max_message_bytes.",
    ),
    Key(
        "pulsar",
        "batch_index_ack",
        BOOL,
        False,
        "Pulsar's acknowledgmentAtBatchIndexLevelEnabled: consumers are given parts of a "
        "batch (ack sets), so Key_Shared routes every message by its own key and no acked "
        "message of a batch comes back; the clients must set batch_index_ack_enabled too.",
    ),
    Key(
        "pulsar",
        "keep_alive_s",
        DURATION_S,
        30.0,
        "Pulsar's keepAliveIntervalSeconds: a client silent this long is sent a Ping, and "
        "closed if it stays silent as long again (a dead peer's producers and consumers "
        "go); 0: never.",
    ),
    Key(
        "native_tcp",
        "enabled",
        BOOL,
        False,
        "Serve the native protocol's write and read streams over framed TCP on "
        "native_tcp.listen too (lower latency than gRPC; docs/native-protocol.md). "
        "Subscriptions, range reads and admin stay on gRPC.",
    ),
    Key(
        "native_tcp",
        "listen",
        OPTIONAL_ADDRESS,
        "",
        f'Address of the native TCP port; "" is the host of server.listen, port '
        f"{DEFAULT_NATIVE_TCP_PORT}. TLS and authentication follow [tls] and [auth], as on "
        "the gRPC port.",
    ),
    Key(
        "http",
        "enabled",
        BOOL,
        True,
        "Serve HTTP on http.listen: the Pulsar-style admin REST (/admin/v2), /metrics, "
        "/healthz, /readyz and the web console.",
    ),
    Key(
        "http",
        "listen",
        OPTIONAL_ADDRESS,
        "",
        f'Address of the HTTP port; "" is the host of server.listen, port {DEFAULT_HTTP_PORT} '
        "(metrics.enabled with metrics.listen moves it there).",
    ),
    Key(
        "http",
        "admin",
        BOOL,
        True,
        "Serve the Pulsar-style admin REST API at /admin/v2 on the HTTP port.",
    ),
    Key(
        "kafka",
        "enabled",
        BOOL,
        True,
        "Serve the Kafka protocol (docs/kafka.md): unmodified Kafka clients produce, consume "
        "and administer weir topics.",
    ),
    Key(
        "kafka",
        "listen",
        OPTIONAL_ADDRESS,
        "",
        "Address of the Kafka listener. Empty: port 9092 of the server.listen host. TLS and "
        "authentication follow the [tls] and [auth] sections, as on the gRPC port.",
    ),
    Key(
        "kafka",
        "advertised_listener",
        OPTIONAL_ADDRESS,
        "",
        "HOST:PORT Kafka clients are told to connect to (Metadata, FindCoordinator), for "
        "clients that reach the server through another name. Empty: the listen address.",
    ),
    Key(
        "metrics",
        "enabled",
        BOOL,
        False,
        "Serve the HTTP port on metrics.listen instead of http.listen (the older spelling; "
        "http.enabled serves it by default).",
    ),
    Key(
        "metrics",
        "listen",
        ADDRESS,
        DEFAULT_METRICS_LISTEN,
        "Address of the metrics HTTP endpoint (when enabled).",
    ),
    Key(
        "console",
        "enabled",
        BOOL,
        True,
        "Serve the web console at /console on the metrics HTTP endpoint (when that runs).",
    ),
    Key("log", "level", LEVEL, "info", "Least severe level logged: debug, info, warning or error."),
    Key(
        "log",
        "audit_file",
        OPTIONAL_PATH,
        None,
        "Append the audit log here (JSON lines): authentication failures, refusals, admin "
        "operations on topics, changes of users and grants. Empty: no audit log.",
    ),
    Key(
        "log",
        "json",
        BOOL,
        False,
        "One JSON object per line instead of text (one line per event either way).",
    ),
)

_BY_PATH = {k.path: k for k in KEYS}
SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(k.section for k in KEYS))
