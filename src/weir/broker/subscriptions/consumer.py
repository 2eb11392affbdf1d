"""A consumer attached to a subscription, as the broker sees it.

The front implements `ConsumerHandle` (it turns deliveries into protocol messages);
the broker keeps an `AttachedConsumer` per handle with its permits (how many more
messages the consumer asked for: the broker never sends more) and ack timeout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from weir.errors import WeirError


@dataclass(slots=True)
class Delivery:
    """Messages of one partition for one consumer: stored chunks plus which offsets of
    them are delivered (the chunks may hold others: acked, or someone else's)."""

    topic: str
    partition: int
    chunks: list[Any]
    offsets: list[int]
    redelivery_counts: list[int]


class ConsumerHandle(Protocol):
    def deliver(self, delivery: Delivery) -> None:
        """Queue ``delivery`` to the consumer (never blocks)."""

    def close(self, err: WeirError) -> None:
        """The broker dropped this consumer (subscription deleted, topic dropped)."""


class ActivityHandle(Protocol):
    """What a handle may add: told when it becomes (or stops being) the one consumer a
    partition's messages go to (Exclusive / Failover; Pulsar's ActiveConsumerChange)."""

    def active_changed(self, partition: int, active: bool) -> None: ...


@dataclass(eq=False, slots=True)
class AttachedConsumer:
    consumer_id: int
    name: str
    handle: ConsumerHandle
    ack_timeout_ms: int = 0
    permits: int = 0
    unacked: int = 0
    order: tuple[str, int] = field(default=("", 0))
    # None: every partition of the topic; else only these (a Pulsar consumer of one
    # partition of a partitioned topic)
    partitions: frozenset[int] | None = None
    # Deliveries hold whole stored batches (Pulsar clients acknowledge a batch as a whole):
    # a take that ends inside a batch is extended to its end, past the permits if need be
    whole_batches: bool = False

    def takes(self, partition: int) -> bool:
        return self.partitions is None or partition in self.partitions
