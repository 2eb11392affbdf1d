"""Durable subscriptions (the Pulsar consumer model): cursors with individual acks,
dispatchers per subscription type, redelivery. See docs/subscriptions.md."""

from weir.broker.subscriptions.consumer import AttachedConsumer, ConsumerHandle, Delivery
from weir.broker.subscriptions.cursor import SUBSCRIPTIONS
from weir.broker.subscriptions.dead_letter import DeadLetterPolicy
from weir.broker.subscriptions.info import (
    SubscriptionConsumerInfo,
    SubscriptionInfo,
    SubscriptionPartitionInfo,
)
from weir.broker.subscriptions.registry import Subscriptions
from weir.broker.subscriptions.settings import InitialPosition, SubscriptionType
from weir.broker.subscriptions.subscription import Subscription

__all__ = [
    "SUBSCRIPTIONS",
    "AttachedConsumer",
    "ConsumerHandle",
    "DeadLetterPolicy",
    "Delivery",
    "InitialPosition",
    "Subscription",
    "SubscriptionConsumerInfo",
    "SubscriptionInfo",
    "SubscriptionPartitionInfo",
    "SubscriptionType",
    "Subscriptions",
]
