"""Consumer group APIs: membership through the `Coordinator`, offsets as weir consumer offsets.

A Kafka group ``G`` committing on topic ``T`` is weir consumer ``G`` of ``T`` (registered
on first commit when consumers.auto_create is on), so ``weir consumer describe T G``
shows the group's lag, and a YDB or native reader named ``G`` continues where it left.
Group ids must be valid weir consumer names (letters, digits, '.', '_', '-').
Committed metadata strings are not stored (read back empty).

Authorization: joining, committing and fetching offsets need the consume permission on
the topics involved (a refused topic answers TOPIC_AUTHORIZATION_FAILED) and, for a
principal with group grants, consume on ``group:ID`` (Kafka's READ on the Group resource;
refused: GROUP_AUTHORIZATION_FAILED, also for describing, deleting and the group's offsets;
a listing shows only the groups the caller may use).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from weir.broker.topics import check_consumer_name
from weir.errors import (
    BadRequestError,
    ConsumerBusyError,
    NotOwnerError,
    UnavailableError,
    WeirError,
)
from weir.protocols.kafka.codec import Message, RequestHeader
from weir.protocols.kafka.errors import ErrorCode, KafkaError, error_code
from weir.protocols.kafka.groups import Coordinator
from weir.protocols.kafka.names import kafka_name, weir_topic
from weir.security.grants import Permission

if TYPE_CHECKING:
    from weir.protocols.kafka.connection import KafkaConnection

NO_OFFSET = -1
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscribed_topics(protocol_type: str, metadata: bytes) -> list[str]:
    """The topics of a consumer-protocol subscription (version, [topic], user data...);
    empty for other protocol types or bytes that do not parse."""
    if protocol_type != "consumer" or len(metadata) < 6:
        return []
    try:
        pos = 2
        (n,) = _I32.unpack_from(metadata, pos)
        pos += 4
        topics = []
        for _ in range(min(n, len(metadata))):
            (ln,) = _I16.unpack_from(metadata, pos)
            pos += 2
            topics.append(metadata[pos : pos + ln].decode())
            pos += ln
        return topics
    except (struct.error, UnicodeDecodeError):
        return []


def _owner_endpoint(exc: NotOwnerError) -> str:
    """The native endpoint of the partition's owner; while the partition moves (no
    owner yet) COORDINATOR_LOAD_IN_PROGRESS, which Kafka clients retry."""
    native = exc.endpoints.get("native")
    if not native:
        raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, exc.message)
    return native


def members_reading(coordinator: Coordinator, topic: str, group_id: str) -> int:
    """How many members of Kafka group ``group_id`` subscribe to weir topic ``topic`` (the
    Kafka front's readers of consumer ``group_id``'s offsets: `weir.broker.consumer_readers`)."""
    g = coordinator.groups.get(group_id)
    if g is None or not g.members:
        return 0
    name = kafka_name(topic)
    return sum(
        1
        for m in g.members.values()
        if any(name in subscribed_topics(m.protocol_type, meta) for _, meta in m.protocols)
    )


def check_group(group_id: str) -> None:
    try:
        check_consumer_name(group_id)
    except BadRequestError as exc:
        raise KafkaError(ErrorCode.INVALID_GROUP_ID, exc.message) from None


class GroupHandlers:
    def __init__(self, conn: KafkaConnection) -> None:
        self.conn = conn
        self.broker = conn.broker
        self.coordinator = conn.front.coordinator

    def _me(self) -> Message:
        host, port = self.conn.front.advertised
        return {"node_id": self.conn.front.node_id, "host": host, "port": port}

    async def _coordinator(self, key: str, key_type: int) -> Message:
        """The node that coordinates ``key``: this broker, except for a group in a
        cluster (`GroupCoordinators`); COORDINATOR_NOT_AVAILABLE when it has none."""
        if key_type != 0 or self.broker.cluster is None:
            return {**self._me(), "error_code": 0, "error_message": None}
        try:
            found = await self.conn.front.coordinators.find(key)
        except KafkaError:
            found = None
        if found is None:
            return {
                "node_id": -1,
                "host": "",
                "port": -1,
                "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                "error_message": "no coordinator now (no live broker with a Kafka listener)",
            }
        return {
            "node_id": found["node_id"],
            "host": found["host"],
            "port": found["port"],
            "error_code": 0,
            "error_message": None,
        }

    async def handle_find_coordinator(self, header: RequestHeader, body: Message) -> Message:
        self.conn.require_principal()
        key_type = body.get("key_type", 0)
        if header.api_version >= 4:
            return {
                "coordinators": [
                    {"key": k, **await self._coordinator(k, key_type)}
                    for k in body["coordinator_keys"]
                ]
            }
        if body.get("key_type", 0) not in (0, 1):  # 0: a group, 1: a transactional id
            return {
                "error_code": ErrorCode.INVALID_REQUEST,
                "error_message": f"unknown coordinator key type {body['key_type']}",
                "node_id": -1,
                "host": "",
                "port": -1,
            }
        return await self._coordinator(body["key"], key_type)

    async def handle_join_group(self, header: RequestHeader, body: Message) -> Message:
        self.conn.require_principal()
        try:
            check_group(body["group_id"])
            self.conn.allow_group(body["group_id"], "join")
            await self.conn.front.coordinators.check(body["group_id"])
            self._allow_subscription(body["protocol_type"], body["protocols"])
            self._check_not_subscribed(body["group_id"], body["protocol_type"], body["protocols"])
            res = await self.coordinator.join(
                body["group_id"],
                body["member_id"],
                group_instance_id=body.get("group_instance_id"),
                client_id=header.client_id or "",
                client_host=self.conn.peer_host,
                session_timeout_ms=body["session_timeout_ms"],
                rebalance_timeout_ms=body["rebalance_timeout_ms"],
                protocol_type=body["protocol_type"],
                protocols=[(p["name"], p["metadata"]) for p in body["protocols"]],
                require_known_member_id=header.api_version >= 4,
            )
        except KafkaError as exc:
            return {"error_code": exc.code, "member_id": body["member_id"], "protocol_name": ""}
        return {
            "error_code": res.error,
            "generation_id": res.generation,
            "protocol_type": res.protocol_type,
            "protocol_name": res.protocol_name if res.protocol_name is not None else "",
            "leader": res.leader,
            "member_id": res.member_id,
            "members": [
                {"member_id": mid, "group_instance_id": iid, "metadata": meta}
                for mid, iid, meta in res.members
            ],
        }

    def _allow_subscription(self, protocol_type: str, protocols: list[Message]) -> None:
        """A member may join when it may consume every topic it subscribes to (and the group
        itself, checked before)."""
        topics = {t for p in protocols for t in subscribed_topics(protocol_type, p["metadata"])}
        try:
            for t in sorted(topics):
                self.conn.allow(Permission.CONSUME, weir_topic(t), "join a group reading")
        except WeirError as exc:
            raise KafkaError(error_code(exc, group=True), exc.message) from None

    def _check_not_subscribed(
        self, group_id: str, protocol_type: str, protocols: list[Message]
    ) -> None:
        """A group whose name is a consumer held by weir subscription consumers on one of
        its topics is refused: the consumer's offsets serve one kind of reader at a time.
        Kafka's answer to a member of another kind of group is INCONSISTENT_GROUP_PROTOCOL."""
        topics = {t for p in protocols for t in subscribed_topics(protocol_type, p["metadata"])}
        for t in sorted(topics):
            try:
                self.broker.check_not_subscribed(weir_topic(t), group_id)
            except ConsumerBusyError as exc:
                raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, exc.message) from None
            except WeirError:
                continue  # an unknown topic: the member finds out by its metadata

    async def handle_sync_group(self, header: RequestHeader, body: Message) -> Message:
        self.conn.require_principal()
        try:
            self.conn.allow_group(body["group_id"], "sync")
            await self.conn.front.coordinators.check(body["group_id"])
            assignment = await self.coordinator.sync(
                body["group_id"],
                body["generation_id"],
                body["member_id"],
                {a["member_id"]: a["assignment"] for a in body["assignments"]},
            )
        except KafkaError as exc:
            return {"error_code": exc.code, "assignment": b""}
        g = self.coordinator.groups.get(body["group_id"])
        return {
            "error_code": 0,
            "protocol_type": g.protocol_type if g else None,
            "protocol_name": g.protocol_name if g else None,
            "assignment": assignment,
        }

    async def handle_heartbeat(self, header: RequestHeader, body: Message) -> Message:
        self.conn.require_principal()
        try:
            self.conn.allow_group(body["group_id"], "heartbeat in")
            await self.conn.front.coordinators.check(body["group_id"])
            self.coordinator.heartbeat(body["group_id"], body["generation_id"], body["member_id"])
        except KafkaError as exc:
            return {"error_code": exc.code}
        return {"error_code": 0}

    async def handle_leave_group(self, header: RequestHeader, body: Message) -> Message:
        self.conn.require_principal()
        try:
            self.conn.allow_group(body["group_id"], "leave")
        except KafkaError as exc:
            if header.api_version < 3:
                return {"error_code": exc.code}
            return {"error_code": exc.code, "members": []}
        if header.api_version < 3:
            res = self.coordinator.leave(body["group_id"], [body["member_id"]])
            return {"error_code": res[body["member_id"]]}
        ids = [mm["member_id"] for mm in body["members"]]
        res = self.coordinator.leave(body["group_id"], ids)
        return {
            "error_code": 0,
            "members": [
                {
                    "member_id": mm["member_id"],
                    "group_instance_id": mm.get("group_instance_id"),
                    "error_code": res[mm["member_id"]],
                }
                for mm in body["members"]
            ],
        }

    async def handle_offset_commit(self, header: RequestHeader, body: Message) -> Message:
        group = body["group_id"]
        top_error: ErrorCode | None = None
        try:
            self.conn.require_principal()
            check_group(group)
            self.conn.allow_group(group, "commit an offset under")
            self.coordinator.check_commit(
                group, body.get("generation_id", -1), body.get("member_id", "")
            )
        except KafkaError as exc:
            top_error = exc.code
        out = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                code = top_error
                if code is None:
                    code = await self._commit(
                        group, t["name"], p["partition_index"], p["committed_offset"]
                    )
                parts.append({"partition_index": p["partition_index"], "error_code": code})
            out.append({"name": t["name"], "partitions": parts})
        return {"topics": out}

    async def _commit(self, group: str, name: str, partition: int, offset: int) -> ErrorCode:
        try:
            topic = weir_topic(name)
            self.conn.allow(Permission.CONSUME, topic, "commit an offset of")
            if offset < 0:
                return ErrorCode.NONE  # Kafka ignores "no offset" commits
            try:
                await self.broker.commit_offset(
                    topic, partition, group, offset, allow_backwards=True
                )
            except NotOwnerError as exc:  # a cluster: the partition's owner keeps its offsets
                try:
                    await self.conn.front.peers.commit(
                        _owner_endpoint(exc), topic, partition, group, offset, allow_backwards=True
                    )
                except UnavailableError as err:  # it moved, or its owner died: retried
                    raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, err.message) from None
        except ConsumerBusyError:
            # weir subscription consumers are the group's members now: Kafka's answer to
            # a commit from outside a group that has members
            return ErrorCode.UNKNOWN_MEMBER_ID
        except (WeirError, KafkaError) as exc:
            return error_code(exc)
        return ErrorCode.NONE

    async def _fetch_offsets(
        self, group: str, topics: list[Message] | None, stable: bool
    ) -> tuple[list[Message], ErrorCode]:
        """``stable`` (require_stable, KIP-447): a partition whose offset of the group an
        open transaction is about to move answers UNSTABLE_OFFSET_COMMIT (clients retry).
        In a cluster a partition another broker owns is asked of its owner; while one
        moves the whole answer is COORDINATOR_LOAD_IN_PROGRESS (clients retry)."""
        try:
            self.conn.require_principal()
            check_group(group)
            self.conn.allow_group(group, "read the offsets of")
        except KafkaError as exc:
            return [], exc.code
        if topics is None:  # every partition the group has an offset on
            topics = [
                {"name": kafka_name(cfg.name), "partition_indexes": committed}
                for cfg in self.broker.list_topics()
                if group in cfg.consumers
                and self.conn.security.can_see(self.conn.require_principal(), cfg.name)
                and (committed := self.broker.committed_partitions(cfg.name, group))
            ]
        pending = self.broker.pending_transaction_offsets(group) if stable else set()
        out = []
        moving = False
        for t in topics:
            parts = []
            for idx in t["partition_indexes"]:
                entry: Message = {
                    "partition_index": idx,
                    "committed_offset": NO_OFFSET,
                    "metadata": "",
                }
                try:
                    topic = weir_topic(t["name"])
                    self.conn.allow(Permission.CONSUME, topic, "read the offsets of")
                    try:
                        self.broker.actor(topic, idx)
                    except NotOwnerError as exc:  # a cluster: ask the partition's owner
                        try:
                            off = await self.conn.front.peers.committed(
                                _owner_endpoint(exc), topic, idx, group
                            )
                        except (UnavailableError, KafkaError):  # moving, or its owner died
                            moving = True  # the client asks again
                            continue
                    else:
                        if (self.broker.topic(topic).name, idx) in pending:
                            raise KafkaError(ErrorCode.UNSTABLE_OFFSET_COMMIT)
                        off = self.broker.committed_offset(topic, idx, group)
                    if off is not None:
                        entry["committed_offset"] = off
                except (WeirError, KafkaError) as exc:
                    entry["error_code"] = error_code(exc)
                parts.append(entry)
            out.append({"name": t["name"], "partitions": parts})
        if moving:
            return [], ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return out, ErrorCode.NONE

    async def handle_offset_fetch(self, header: RequestHeader, body: Message) -> Message:
        stable = bool(body.get("require_stable"))
        if header.api_version >= 8:
            groups = []
            for g in body["groups"]:
                topics, err = await self._fetch_offsets(g["group_id"], g["topics"], stable)
                groups.append({"group_id": g["group_id"], "topics": topics, "error_code": err})
            return {"groups": groups}
        topics, err = await self._fetch_offsets(body["group_id"], body["topics"], stable)
        return {"topics": topics, "error_code": err}

    # ------------------------------------------------------------------ admin of groups

    def _known_groups(self) -> dict[str, str]:
        """group id -> state, for groups with members or with offsets on any topic."""
        out = {}
        for cfg in self.broker.list_topics():
            if self.conn.security.can_see(self.conn.require_principal(), cfg.name):
                for c in cfg.consumers:
                    out[c] = "Empty"
        for gid, g in self.coordinator.groups.items():
            if g.members or gid in out:
                out[gid] = g.describe_state()
        return out

    async def handle_list_groups(self, header: RequestHeader, body: Message) -> Message:
        states = set(body.get("states_filter") or [])
        me = self.conn.require_principal()
        groups = [
            {"group_id": gid, "protocol_type": "consumer", "group_state": st}
            for gid, st in sorted(self._known_groups().items())
            if (not states or st in states) and self.conn.security.group_allowed(me, gid)
        ]
        return {"error_code": 0, "groups": groups}

    async def handle_describe_groups(self, header: RequestHeader, body: Message) -> Message:
        self.conn.require_principal()
        known = self._known_groups()
        out = []
        for gid in body["groups"]:
            try:
                self.conn.allow_group(gid, "describe")
            except KafkaError as exc:
                out.append(
                    {
                        "error_code": exc.code,
                        "group_id": gid,
                        "group_state": "",
                        "protocol_type": "",
                        "protocol_data": "",
                        "members": [],
                    }
                )
                continue
            g = self.coordinator.groups.get(gid)
            if g is None or not g.members:
                out.append(
                    {
                        "error_code": 0,
                        "group_id": gid,
                        "group_state": "Empty" if gid in known else "Dead",
                        "protocol_type": "consumer" if gid in known else "",
                        "protocol_data": "",
                        "members": [],
                    }
                )
                continue
            out.append(
                {
                    "error_code": 0,
                    "group_id": gid,
                    "group_state": g.describe_state(),
                    "protocol_type": g.protocol_type or "",
                    "protocol_data": g.protocol_name or "",
                    "members": [
                        {
                            "member_id": mm.member_id,
                            "group_instance_id": mm.group_instance_id,
                            "client_id": mm.client_id,
                            "client_host": mm.client_host,
                            "member_metadata": mm.metadata(g.protocol_name or ""),
                            "member_assignment": mm.assignment,
                        }
                        for mm in g.members.values()
                    ],
                }
            )
        return {"groups": out}

    async def handle_delete_groups(self, header: RequestHeader, body: Message) -> Message:
        results = []
        for gid in body["groups_names"]:
            try:
                self.conn.allow_group(gid, "delete")
                self.coordinator.delete(gid)  # NON_EMPTY_GROUP while it has members
                await self._drop_group(gid)
                code = ErrorCode.NONE
            except (KafkaError, WeirError) as exc:
                code = error_code(exc, group=True)
            results.append({"group_id": gid, "error_code": code})
        return {"results": results}

    async def _drop_group(self, group: str) -> None:
        found = False
        for cfg in self.broker.list_topics():
            if group in cfg.consumers:
                self.conn.allow(Permission.CONSUME, cfg.name, "delete the offsets of")
                await self.broker.alter_topic(cfg.name, drop_consumers=[group])
                found = True
        if not found and group not in self.coordinator.groups:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND)

    async def handle_offset_delete(self, header: RequestHeader, body: Message) -> Message:
        """Kafka's rules: an empty group's offsets go; a group with members keeps those of
        the topics its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC) and loses the
        others, unless it is not a consumer-protocol group (NON_EMPTY_GROUP)."""
        group = body["group_id"]
        try:
            self.conn.require_principal()
            check_group(group)
            self.conn.allow_group(group, "delete the offsets of")
            subscribed = self._subscribed(group)
            if subscribed is None and group not in self._known_groups():
                raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group!r} is not known")
        except KafkaError as exc:
            return {"error_code": exc.code, "topics": []}
        out = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                idx = p["partition_index"]
                try:
                    topic = weir_topic(t["name"])
                    self.conn.allow(Permission.CONSUME, topic, "delete the offsets of")
                    self.broker.actor(topic, idx)
                    if subscribed is not None and t["name"] in subscribed:
                        raise KafkaError(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
                    await self.broker.delete_offset(topic, idx, group)
                    code = ErrorCode.NONE
                except ConsumerBusyError:  # weir subscription consumers read the topic
                    code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                except (KafkaError, WeirError) as exc:
                    code = error_code(exc)
                parts.append({"partition_index": idx, "error_code": code})
            out.append({"name": t["name"], "partitions": parts})
        return {"error_code": 0, "topics": out}

    def _subscribed(self, group: str) -> set[str] | None:
        """The topics the group's members subscribe to (None: it has no members); raises
        NON_EMPTY_GROUP for a group with members that is not a consumer-protocol group
        (its subscriptions cannot be read)."""
        g = self.coordinator.groups.get(group)
        if g is None or not g.members:
            return None
        if g.protocol_type != "consumer":
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP, f"group {group!r} has members")
        return {
            topic
            for m in g.members.values()
            for _, meta in m.protocols
            for topic in subscribed_topics(m.protocol_type, meta)
        }
