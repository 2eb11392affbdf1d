"""Exclusive and Failover: one active consumer per partition.

Consumers are ordered by (name, arrival); partition p belongs to the consumer at
p mod n in that order, so every partition has exactly one reader and the
assignment is the same whichever broker or moment computes it. When the active
consumer leaves, the next in order takes over (its unacked messages are delivered
again, first, to the new one). Exclusive is the case n = 1: a second consumer is refused.
"""

from __future__ import annotations

from weir.broker.subscriptions.consumer import AttachedConsumer
from weir.broker.subscriptions.settings import SubscriptionType
from weir.errors import ConsumerBusyError


class SingleActiveDispatcher:
    allows_cumulative = True
    max_batch = 1000

    def __init__(self, type: SubscriptionType, subscription: str) -> None:
        self.type = type
        self.subscription = subscription

    def check_join(self, consumers: list[AttachedConsumer], new: AttachedConsumer) -> None:
        overlapping = [c for c in consumers if _overlap(c, new)]
        if self.type is SubscriptionType.EXCLUSIVE and overlapping:
            raise ConsumerBusyError(
                f"subscription {self.subscription!r} is exclusive and already has consumer "
                f"{overlapping[0].name!r}; use type 'failover' or 'shared' to have several"
            )

    def owner(self, partition: int, consumers: list[AttachedConsumer]) -> AttachedConsumer | None:
        if not consumers:
            return None
        ordered = sorted(consumers, key=lambda c: c.order)
        return ordered[partition % len(ordered)]

    def pick(self, partition: int, consumers: list[AttachedConsumer]) -> AttachedConsumer | None:
        c = self.owner(partition, consumers)
        return c if c is not None and c.permits > 0 else None


def _overlap(a: AttachedConsumer, b: AttachedConsumer) -> bool:
    """Whether two consumers take a partition in common (consumers of different partitions
    of one topic, as Pulsar's per-partition consumers are, never compete)."""
    if a.partitions is None or b.partitions is None:
        return True
    return bool(a.partitions & b.partitions)
