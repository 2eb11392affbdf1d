"""Metadata and the admin APIs: topics, partitions and their configs.

This server is the only broker (node 0) and the leader of every partition. Topic
configs map onto weir's topic settings: ``retention.ms`` and ``retention.bytes``
(-1: none), ``max.message.bytes`` (the max_message_bytes policy), ``cleanup.policy``
(``compact``: weir compaction, by the compaction_threshold_bytes policy; Kafka clients
then fetch the compacted view and the tail, see `weir.protocols.kafka.fetch`) and
``delete.retention.ms`` (compaction_delete_retention_ms); the others Kafka clients ask
about are shown read-only with the value weir behaves as.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from weir.errors import AlreadyExistsError, BadRequestError, UnknownTopicError, WeirError
from weir.protocols.kafka.cluster_view import cluster_nodes, partition_leaders
from weir.protocols.kafka.codec import Message, RequestHeader
from weir.protocols.kafka.errors import ErrorCode, KafkaError, error_code
from weir.protocols.kafka.names import kafka_name, topic_uuid, weir_topic
from weir.security.grants import Permission

if TYPE_CHECKING:
    from weir.broker.topics import TopicConfig
    from weir.protocols.kafka.connection import KafkaConnection

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
NODE_ID = 0
SOURCE_TOPIC = 1  # DYNAMIC_TOPIC_CONFIG
SOURCE_DEFAULT = 5  # DEFAULT_CONFIG
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations (APPEND/SUBTRACT are for lists)
WRITABLE = (
    "retention.ms",
    "retention.bytes",
    "max.message.bytes",
    "cleanup.policy",
    "delete.retention.ms",
)
# cleanup.policy=compact sets this compaction threshold (bytes a partition has past its
# compacted view before a run starts): Kafka's cleaner starts on a dirty ratio instead
COMPACT_THRESHOLD_BYTES = 4 << 20
_INHERIT = "inherit"  # key of `_settings`' answer: policies to take from the namespace


def is_compacted(policies: dict[str, Any]) -> bool:
    """Whether a topic is ``cleanup.policy=compact`` for Kafka: compaction runs on it (its
    compaction_threshold_bytes policy is set), so its consumers fetch it compacted."""
    return policies.get("compaction_threshold_bytes") is not None


class AdminHandlers:
    def __init__(self, conn: KafkaConnection) -> None:
        self.conn = conn
        self.broker = conn.broker

    def _broker_entry(self) -> Message:
        host, port = self.conn.front.advertised
        nid = self.conn.front.node_id
        return {"node_id": nid, "broker_id": nid, "host": host, "port": port, "rack": None}

    async def _brokers(self) -> list[Message]:
        """Metadata's brokers: this one, and in a cluster every live broker's Kafka listener."""
        me = self._broker_entry()
        if self.broker.cluster is None:
            return [me]
        others = [n for n in await cluster_nodes(self.broker) if n["node_id"] != me["node_id"]]
        return [me, *others]

    # ------------------------------------------------------------------ metadata

    async def handle_metadata(self, header: RequestHeader, body: Message) -> Message:
        me = self.conn.require_principal()
        requested = body["topics"]
        if requested is None or (header.api_version == 0 and not requested):
            names = [
                kafka_name(c.name)
                for c in self.broker.list_topics()
                if self.conn.security.can_see(me, c.name)
            ]
        else:
            names = [t["name"] for t in requested if t["name"] is not None]
        auto = body["allow_auto_topic_creation"] if header.api_version >= 4 else True
        leaders: dict[int, Message] = {}
        topics = [await self._topic_metadata(name, auto, leaders) for name in names]
        brokers = await self._brokers()
        listed = {b["node_id"] for b in brokers}
        brokers += [n for nid, n in sorted(leaders.items()) if nid not in listed]
        return {
            "brokers": brokers,
            "cluster_id": self.conn.front.cluster_id,
            "controller_id": self.conn.front.node_id,
            "topics": topics,
        }

    async def _topic_metadata(
        self, name: str, auto: bool, leaders: dict[int, Message] | None = None
    ) -> Message:
        try:
            topic = weir_topic(name)
            self.conn.allow(None, topic, "describe")
            try:
                cfg = self.broker.topic(topic)
            except UnknownTopicError:
                if not auto:
                    raise
                cfg = await self.broker.topic_for_use(topic)
        except (WeirError, KafkaError) as exc:
            code = error_code(exc)
            if isinstance(exc, BadRequestError):
                code = ErrorCode.INVALID_TOPIC_EXCEPTION
            return {"error_code": code, "name": name, "partitions": []}
        return {
            "error_code": 0,
            "name": name,
            "topic_id": topic_uuid(cfg),
            "is_internal": False,
            "partitions": await self._partitions(cfg, leaders),
        }

    async def _partitions(
        self, cfg: TopicConfig, leaders: dict[int, Message] | None = None
    ) -> list[Message]:
        if self.broker.cluster is not None:  # each partition led by its owner
            return await partition_leaders(self.broker, cfg, self.conn.front.node_id, leaders)
        return [
            {
                "error_code": 0,
                "partition_index": p,
                "leader_id": NODE_ID,
                "leader_epoch": 0,
                "replica_nodes": [NODE_ID],
                "isr_nodes": [NODE_ID],
                "offline_replicas": [],
            }
            for p in range(cfg.partitions)
        ]

    async def handle_describe_cluster(self, header: RequestHeader, body: Message) -> Message:
        self.conn.require_principal()
        return {
            "error_code": 0,
            "cluster_id": self.conn.front.cluster_id,
            "controller_id": self.conn.front.node_id,
            "brokers": await self._brokers(),
        }

    # ------------------------------------------------------------------ topics

    async def handle_create_topics(self, header: RequestHeader, body: Message) -> Message:
        out = []
        for t in body["topics"]:
            entry: Message = {"name": t["name"], "error_code": 0, "error_message": None}
            try:
                topic = weir_topic(t["name"])
                self.conn.allow(Permission.ADMIN, topic, "create")
                if t["assignments"]:
                    raise KafkaError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT, "weir places partitions itself"
                    )
                if t["replication_factor"] not in (-1, 1):
                    raise KafkaError(
                        ErrorCode.INVALID_REPLICATION_FACTOR,
                        "this server is the only broker: replication factor 1 (or -1)",
                    )
                n = t["num_partitions"]
                if n == 0 or n < -1:
                    raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"{n} partitions")
                settings = _settings({c["name"]: c["value"] for c in t["configs"]})
                settings.pop(_INHERIT, None)  # a new topic inherits what it does not set
                if body.get("validate_only"):
                    if topic in {c.name for c in self.broker.list_topics()}:
                        raise AlreadyExistsError(f"topic {t['name']!r} already exists")
                    entry["num_partitions"] = n
                else:
                    cfg = await self.broker.create_topic(
                        topic, partitions=None if n == -1 else n, **settings
                    )
                    entry.update(
                        topic_id=topic_uuid(cfg),
                        num_partitions=cfg.partitions,
                        replication_factor=1,
                        configs=self._configs(cfg, None),
                    )
            except (WeirError, KafkaError) as exc:
                entry["error_code"] = error_code(exc)
                entry["error_message"] = getattr(exc, "message", str(exc))
                if isinstance(exc, BadRequestError) and not isinstance(exc, AlreadyExistsError):
                    entry["error_code"] = (
                        ErrorCode.INVALID_CONFIG
                        if "config" in exc.message
                        else ErrorCode.INVALID_TOPIC_EXCEPTION
                    )
            out.append(entry)
        return {"topics": out}

    async def handle_delete_topics(self, header: RequestHeader, body: Message) -> Message:
        names = (
            body["topic_names"] if header.api_version < 6 else [t["name"] for t in body["topics"]]
        )
        out = []
        for name in names:
            entry: Message = {"name": name, "error_code": 0}
            try:
                if name is None:
                    raise KafkaError(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "topic ids are not served"
                    )
                topic = weir_topic(name)
                self.conn.allow(Permission.ADMIN, topic, "drop")
                entry["topic_id"] = topic_uuid(self.broker.topic(topic))
                await self.broker.drop_topic(topic)
            except (WeirError, KafkaError) as exc:
                entry["error_code"] = error_code(exc)
                entry["error_message"] = getattr(exc, "message", str(exc))
            out.append(entry)
        return {"responses": out}

    async def handle_create_partitions(self, header: RequestHeader, body: Message) -> Message:
        out = []
        for t in body["topics"]:
            entry: Message = {"name": t["name"], "error_code": 0, "error_message": None}
            try:
                topic = weir_topic(t["name"])
                self.conn.allow(Permission.ADMIN, topic, "alter")
                cfg = self.broker.topic(topic)
                if t["count"] <= cfg.partitions:
                    raise KafkaError(
                        ErrorCode.INVALID_PARTITIONS,
                        f"topic has {cfg.partitions} partitions; partitions can only be added",
                    )
                if not body["validate_only"]:
                    await self.broker.alter_topic(topic, partitions=t["count"])
            except (WeirError, KafkaError) as exc:
                entry["error_code"] = error_code(exc)
                entry["error_message"] = getattr(exc, "message", str(exc))
            out.append(entry)
        return {"results": out}

    async def handle_delete_records(self, header: RequestHeader, body: Message) -> Message:
        """Move each partition's start offset (low watermark) up to the offset asked
        (-1: the high watermark), through the broker's delete_records. Needs the admin
        permission on the topic (Kafka's DELETE)."""
        out = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                entry: Message = {
                    "partition_index": p["partition_index"],
                    "low_watermark": -1,
                    "error_code": 0,
                }
                try:
                    topic = weir_topic(t["name"])
                    self.conn.allow(Permission.ADMIN, topic, "delete records of")
                    entry["low_watermark"] = await self.broker.delete_records(
                        topic, p["partition_index"], p["offset"]
                    )
                except (WeirError, KafkaError) as exc:
                    entry["error_code"] = error_code(exc)
                parts.append(entry)
            out.append({"name": t["name"], "partitions": parts})
        return {"topics": out}

    # ------------------------------------------------------------------ configs

    def _configs(self, cfg: TopicConfig, keys: list[str] | None) -> list[Message]:
        own = cfg.policies
        eff = self.broker.topic_policies(cfg)
        dead = eff["compaction_delete_retention_ms"]
        entries: list[tuple[str, str | None, bool, bool]] = [
            (
                "retention.ms",
                str(-1 if cfg.retention_ms is None else cfg.retention_ms),
                False,
                "retention_ms" in own,
            ),
            (
                "retention.bytes",
                str(-1 if cfg.retention_bytes is None else cfg.retention_bytes),
                False,
                "retention_bytes" in own,
            ),
            (
                "max.message.bytes",
                str(self.broker.message_limit(cfg.name)),
                False,
                "max_message_bytes" in own,
            ),
            (
                "cleanup.policy",
                "compact" if is_compacted(eff) else "delete",
                False,
                "compaction_threshold_bytes" in own,
            ),
            (
                "delete.retention.ms",
                str(-1 if dead is None else dead),
                False,
                "compaction_delete_retention_ms" in own,
            ),
            ("min.insync.replicas", "1", True, False),
            ("message.timestamp.type", "CreateTime", True, False),
            ("compression.type", "producer", True, False),
        ]
        return [
            {
                "name": name,
                "value": value,
                "read_only": ro,
                "is_default": not set_here,
                "config_source": SOURCE_TOPIC if set_here else SOURCE_DEFAULT,
                "is_sensitive": False,
                "synonyms": [],
                "documentation": None,
            }
            for name, value, ro, set_here in entries
            if keys is None or name in keys
        ]

    async def handle_describe_configs(self, header: RequestHeader, body: Message) -> Message:
        out = []
        for r in body["resources"]:
            entry: Message = {
                "resource_type": r["resource_type"],
                "resource_name": r["resource_name"],
                "error_code": 0,
                "error_message": None,
                "configs": [],
            }
            try:
                keys = r["configuration_keys"]
                if r["resource_type"] == TOPIC_RESOURCE:
                    topic = weir_topic(r["resource_name"])
                    self.conn.allow(None, topic, "describe")
                    entry["configs"] = self._configs(self.broker.topic(topic), keys)
                elif r["resource_type"] == BROKER_RESOURCE:
                    self.conn.require_principal()
                    entry["configs"] = [
                        {
                            "name": "auto.create.topics.enable",
                            "value": str(self.broker.config.auto_create_topics).lower(),
                            "read_only": True,
                            "is_default": True,
                            "config_source": SOURCE_DEFAULT,
                        },
                        {
                            "name": "message.max.bytes",
                            "value": str(self.broker.config.max_message_bytes),
                            "read_only": True,
                            "is_default": True,
                            "config_source": SOURCE_DEFAULT,
                        },
                    ]
                    if keys is not None:
                        entry["configs"] = [c for c in entry["configs"] if c["name"] in keys]
                else:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, "only topic and broker configs")
            except (WeirError, KafkaError) as exc:
                entry["error_code"] = error_code(exc)
                entry["error_message"] = getattr(exc, "message", str(exc))
            out.append(entry)
        return {"results": out}

    async def _alter(self, r: Message, changes: dict[str, str | None], validate: bool) -> Message:
        entry: Message = {
            "resource_type": r["resource_type"],
            "resource_name": r["resource_name"],
            "error_code": 0,
            "error_message": None,
        }
        try:
            if r["resource_type"] != TOPIC_RESOURCE:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "only topic configs can be altered")
            topic = weir_topic(r["resource_name"])
            self.conn.allow(Permission.ADMIN, topic, "alter")
            self.broker.topic(topic)
            settings = _settings(changes)
            inherit = [
                k
                for k, v in (
                    ("retention_ms", "retention.ms"),
                    ("retention_bytes", "retention.bytes"),
                    ("max_message_bytes", "max.message.bytes"),
                    ("compaction_threshold_bytes", "cleanup.policy"),
                    ("compaction_delete_retention_ms", "delete.retention.ms"),
                )
                if v in changes and changes[v] is None
            ]
            inherit += settings.pop(_INHERIT, [])
            if not validate:
                await self.broker.alter_topic(topic, inherit=inherit, **settings)
        except (WeirError, KafkaError) as exc:
            entry["error_code"] = error_code(exc)
            entry["error_message"] = getattr(exc, "message", str(exc))
            if isinstance(exc, BadRequestError):
                entry["error_code"] = ErrorCode.INVALID_CONFIG
        return entry

    async def handle_alter_configs(self, header: RequestHeader, body: Message) -> Message:
        return {
            "responses": [
                await self._alter(
                    r, {c["name"]: c["value"] for c in r["configs"]}, body["validate_only"]
                )
                for r in body["resources"]
            ]
        }

    async def handle_incremental_alter_configs(
        self, header: RequestHeader, body: Message
    ) -> Message:
        out = []
        for r in body["resources"]:
            changes: dict[str, str | None] = {}
            bad = None
            for c in r["configs"]:
                if c["config_operation"] == SET:
                    changes[c["name"]] = c["value"]
                elif c["config_operation"] == DELETE:
                    changes[c["name"]] = None
                else:
                    bad = c["name"]
            if bad is not None:
                out.append(
                    {
                        "resource_type": r["resource_type"],
                        "resource_name": r["resource_name"],
                        "error_code": ErrorCode.INVALID_CONFIG,
                        "error_message": f"{bad}: only SET and DELETE",
                    }
                )
                continue
            out.append(await self._alter(r, changes, body["validate_only"]))
        return {"responses": out}


def _settings(configs: dict[str, str | None]) -> dict[str, Any]:
    """create_topic / alter_topic keyword arguments for Kafka topic configs."""
    out: dict[str, Any] = {}
    policies: dict[str, Any] = {}
    for name, value in configs.items():
        if name not in WRITABLE:
            raise BadRequestError(
                f"config {name!r} is not served (weir serves {', '.join(WRITABLE)})"
            )
        if value is None:
            continue
        if name == "cleanup.policy":
            kinds = {k.strip() for k in value.split(",")}
            if not kinds or not kinds <= {"compact", "delete"}:
                raise BadRequestError(
                    f"config 'cleanup.policy' is compact, delete or both, not {value!r}"
                )
            if "compact" in kinds:  # with delete too: the log keeps its retention anyway
                policies["compaction_threshold_bytes"] = COMPACT_THRESHOLD_BYTES
            else:
                out.setdefault(_INHERIT, []).append("compaction_threshold_bytes")
            continue
        try:
            n = int(value)
        except ValueError:
            raise BadRequestError(f"config {name!r} must be an integer, got {value!r}") from None
        if name == "retention.ms":
            out["retention_ms"] = None if n < 0 else n
        elif name == "retention.bytes":
            out["retention_bytes"] = None if n < 0 else n
        elif name == "delete.retention.ms":
            # 0 (tombstones go at the next run) is 1 ms for weir, whose limits are positive
            policies["compaction_delete_retention_ms"] = None if n < 0 else max(1, n)
        else:
            if n <= 0:
                raise BadRequestError(f"config {name!r} must be positive")
            policies["max_message_bytes"] = n
    if policies:
        out["policies"] = policies
    return out


__all__ = ["AdminHandlers"]
