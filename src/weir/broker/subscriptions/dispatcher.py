"""The interface of a dispatcher: which attached consumer gets a partition's next messages.

A dispatcher only chooses; the cursor, the pending messages and redelivery live in
the `Subscription`. One implementation per type family: `single_active` (Exclusive,
Failover) and `shared`.
"""

from __future__ import annotations

from typing import Protocol

from weir.broker.subscriptions.consumer import AttachedConsumer
from weir.broker.subscriptions.settings import SubscriptionType


class Dispatcher(Protocol):
    type: SubscriptionType
    #: most messages in one delivery (a Shared dispatcher keeps it small to spread)
    max_batch: int
    #: whether acknowledge_cumulative is allowed (not where messages interleave over consumers)
    allows_cumulative: bool

    def check_join(self, consumers: list[AttachedConsumer], new: AttachedConsumer) -> None:
        """Raise ConsumerBusyError when ``new`` may not join."""

    def owner(self, partition: int, consumers: list[AttachedConsumer]) -> AttachedConsumer | None:
        """The one consumer a partition belongs to (None: messages go to any consumer)."""

    def pick(self, partition: int, consumers: list[AttachedConsumer]) -> AttachedConsumer | None:
        """The consumer to give ``partition``'s next messages to; None: nobody can take any."""
