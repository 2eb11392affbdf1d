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

from typing import TYPE_CHECKING

from weir.broker.cluster.broker_mode import node_id
from weir.protocols.kafka.codec import Message
from weir.protocols.kafka.errors import ErrorCode

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
