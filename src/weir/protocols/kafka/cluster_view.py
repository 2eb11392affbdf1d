"""Kafka's view of a weir cluster (``storage.mode = "replicated"``, docs/cluster.md).

Every broker of the cluster is a Kafka node: its node id is derived from its broker
id (`node_id`: the same on every broker, so clients see one consistent cluster),
its address is the Kafka endpoint it published (`node_id` is the one YDB
Discovery uses as well). Metadata names each partition's
current owner as its leader (the claim's generation as the leader epoch); a
partition with no owner now (it is moving), or whose owner has no Kafka listener,
is answered LEADER_NOT_AVAILABLE. A produce or fetch sent to a broker that does not
own the partition is refused NOT_LEADER_OR_FOLLOWER: the client refreshes its
metadata and goes to the leader, as it does when a Kafka partition's leader moves.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from weir.broker.cluster.broker_mode import node_id
from weir.protocols.kafka.codec import Message
from weir.protocols.kafka.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from weir.broker.broker import Broker
    from weir.broker.topics import TopicConfig


def node_entry(broker_id: str, kafka: str) -> Message:
    host, _, port = kafka.rpartition(":")
    nid = node_id(broker_id)
    return {
        "node_id": nid,
        "broker_id": nid,
        "host": host.strip("[]"),
        "port": int(port),
        "rack": None,
    }


async def cluster_nodes(broker: Broker) -> list[Message]:
    """Every live broker with a Kafka listener, as Metadata's brokers."""
    assert broker.cluster is not None
    live = await broker.cluster.live_brokers()
    return [node_entry(b, eps["kafka"]) for b, eps in sorted(live.items()) if "kafka" in eps]


async def partition_leaders(
    broker: Broker, cfg: TopicConfig, me: int, leaders: dict[int, Message] | None = None
) -> list[Message]:
    """Metadata's partitions of ``cfg``: each led by its owner (``me``: this broker's node
    id, the leader of what it serves itself). ``leaders`` collects a node entry for each
    other owner named, so Metadata can list every leader among its brokers (a leader id
    missing there makes kafka-python fail every send to it with UnknownBrokerIdError,
    e.g. when the owner list and the live-broker list were read a moment apart)."""
    out: list[Message] = []
    for o in await broker.owners(cfg.name):
        if o.local or (o.broker and "kafka" in o.endpoints):
            nid = me if o.local else node_id(o.broker)
            if leaders is not None and not o.local:
                leaders[nid] = node_entry(o.broker, str(o.endpoints["kafka"]))
            out.append(
                {
                    "error_code": 0,
                    "partition_index": o.partition,
                    "leader_id": nid,
                    "leader_epoch": o.generation & 0x7FFF_FFFF,
                    "replica_nodes": [nid],
                    "isr_nodes": [nid],
                    "offline_replicas": [],
                }
            )
        else:
            out.append(
                {
                    "error_code": ErrorCode.LEADER_NOT_AVAILABLE,
                    "partition_index": o.partition,
                    "leader_id": -1,
                    "leader_epoch": -1,
                    "replica_nodes": [],
                    "isr_nodes": [],
                    "offline_replicas": [],
                }
            )
    return out


def coordinator_of(group: str, candidates: Iterable[str]) -> str | None:
    """The broker that coordinates ``group`` among ``candidates`` (rendezvous hashing: every
    broker computes the same one from the same live brokers, and when a broker leaves or
    joins only the groups it had or takes move). A real hash, not crc32: crc32 is linear,
    so it would order the brokers the same way for every group name of one length."""
    return max(
        sorted(candidates),
        key=lambda b: hashlib.blake2b(f"{group}\0{b}".encode(), digest_size=8).digest(),
        default=None,
    )


class GroupCoordinators:
    """Which broker of a cluster coordinates each Kafka consumer group.

    A group's members must all talk to one coordinator, or each broker they reach would
    run a group of its own and hand every member every partition. FindCoordinator names
    `coordinator_of` the group among the live brokers with a Kafka listener (from
    ZooKeeper, read again at most every ``ttl_s``); JoinGroup, SyncGroup and Heartbeat
    at another broker answer NOT_COORDINATOR, so a member goes to the group's
    coordinator again when brokers join or leave. The group's state (members,
    generation) is the coordinator's memory: when the coordinator moves, the members
    join the new one afresh; committed offsets stay in the partitions' logs.
    """

    def __init__(self, broker: Broker, ttl_s: float = 1.0) -> None:
        self.broker = broker
        self.ttl_s = ttl_s
        self._live: dict[str, str] = {}
        self._read_at = -1e9

    async def _kafka_brokers(self) -> dict[str, str]:
        """Live broker id -> its Kafka endpoint."""
        assert self.broker.cluster is not None
        now = time.monotonic()
        if now - self._read_at > self.ttl_s:
            try:
                live = await self.broker.cluster.live_brokers()
            except Exception as exc:  # ZooKeeper did not answer: clients ask again
                raise KafkaError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE, f"cannot read the live brokers: {exc!r}"
                ) from None
            self._live = {b: eps["kafka"] for b, eps in live.items() if "kafka" in eps}
            self._read_at = now
        return self._live

    async def find(self, group: str) -> Message | None:
        """The node entry of ``group``'s coordinator; None when no broker has a Kafka listener."""
        live = await self._kafka_brokers()
        chosen = coordinator_of(group, live)
        return None if chosen is None else node_entry(chosen, live[chosen])

    async def check(self, group: str) -> None:
        """NOT_COORDINATOR unless this broker coordinates ``group`` (always so outside a cluster)."""
        cluster = self.broker.cluster
        if cluster is None:
            return
        live = await self._kafka_brokers()
        chosen = coordinator_of(group, live)
        if chosen != cluster.broker_id:
            self._read_at = -1e9  # read the live brokers afresh next time
            raise KafkaError(
                ErrorCode.NOT_COORDINATOR,
                f"group {group!r} is coordinated by broker {chosen!r}, not by this one",
            )
