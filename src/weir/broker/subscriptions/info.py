"""What `describe_subscription` answers: a subscription, its partitions and consumers."""

from __future__ import annotations

from dataclasses import dataclass

from weir.broker.subscriptions.settings import SubscriptionType


@dataclass(frozen=True, slots=True)
class SubscriptionPartitionInfo:
    partition: int
    mark_delete: int  # every offset below is acknowledged
    acked_ranges: int  # ranges acknowledged above mark_delete
    backlog: int  # messages not acknowledged
    unacked: int  # delivered and not acknowledged
    active_consumer: str  # Exclusive / Failover: who gets this partition now


@dataclass(frozen=True, slots=True)
class SubscriptionConsumerInfo:
    consumer_id: int
    name: str
    permits: int
    unacked: int
    sticky_ranges: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    topic: str
    name: str
    type: SubscriptionType
    initial_position: str
    created_at_ms: int
    partitions: list[SubscriptionPartitionInfo]
    consumers: list[SubscriptionConsumerInfo]
    max_redeliver_count: int = 0
    dead_letter_topic: str = ""
    # messages per second over the last ~10 s: delivered (first time or again), delivered
    # again, acknowledged
    msg_rate_out: float = 0.0
    msg_rate_redeliver: float = 0.0
    ack_rate: float = 0.0
    # a consumer's committed offsets (a reader's consumer, a YDB or Kafka consumer):
    # Failover, acknowledged in order or cumulatively
    consumer: bool = False

    @property
    def backlog(self) -> int:
        return sum(p.backlog for p in self.partitions)

    @property
    def unacked(self) -> int:
        return sum(p.unacked for p in self.partitions)
