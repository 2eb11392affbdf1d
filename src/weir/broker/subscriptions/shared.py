"""Shared: every consumer gets messages, round-robin over those with permits left.

No ordering across consumers; a consumer that goes away leaves its unacked messages
to be delivered again to the others. Cumulative acks are refused (a consumer cannot
acknowledge what another one holds).
"""

from __future__ import annotations

from weir.broker.subscriptions.consumer import AttachedConsumer
from weir.broker.subscriptions.settings import SubscriptionType


class SharedDispatcher:
    type = SubscriptionType.SHARED
    allows_cumulative = False
    # rounds of at most this many messages (bounded by each consumer's permits), so that
    # messages spread over the consumers without a delivery per message
    max_batch = 2000

    def __init__(self, subscription: str) -> None:
        self.subscription = subscription
        self._turn = 0

    def check_join(self, consumers: list[AttachedConsumer], new: AttachedConsumer) -> None:
        return None

    def owner(self, partition: int, consumers: list[AttachedConsumer]) -> AttachedConsumer | None:
        return None

    def pick(self, partition: int, consumers: list[AttachedConsumer]) -> AttachedConsumer | None:
        n = len(consumers)
        for i in range(n):
            c = consumers[(self._turn + i) % n]
            if c.permits > 0:
                self._turn = (self._turn + i + 1) % n
                return c
        return None
