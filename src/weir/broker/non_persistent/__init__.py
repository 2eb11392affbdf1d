"""Non-persistent topics (Pulsar's ``non-persistent://``): messages go only to the readers
and subscribers connected now, never to disk. See `live_partition` and `live_subscription`."""

from weir.broker.non_persistent.live_partition import LivePartition, LiveQueue
from weir.broker.non_persistent.live_subscription import LiveSubscription, LiveSubscriptions

__all__ = ["LivePartition", "LiveQueue", "LiveSubscription", "LiveSubscriptions"]
