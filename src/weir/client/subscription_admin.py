"""Subscription and compaction administration of the asyncio client: create, describe,
list, delete, seek and skip durable subscriptions; start and describe compaction."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING

from weir.client.admin import CompactionInfo, SubscriptionInfo, compaction_info, subscription_info
from weir.client.connection import Connection
from weir.client.subscription import position_code, position_time_ms, type_code
from weir.client.timestamps import to_ms
from weir.protocols.native import weir_pb2 as pb


class AsyncSubscriptionCalls:
    """Subscription and compaction calls (a mixin of `weir.aio.Client`)."""

    if TYPE_CHECKING:

        @property
        def conn(self) -> Connection: ...

    # ------------------------------------------------------------------ compaction

    async def compact(
        self, topic: str, *, wait: bool = False, timeout: float | None = 30.0
    ) -> CompactionInfo:
        """Start compacting every partition of ``topic`` (a run going on is not started
        twice). With ``wait``, return when the run has ended, raising its error if it
        failed (``timeout`` then bounds the wait). Writers are never held up by it."""
        req = pb.CompactTopicRequest(topic=topic, wait=wait)
        return compaction_info(await self.conn.call("CompactTopic", req, timeout))

    async def describe_compaction(
        self, topic: str, *, timeout: float | None = 30.0
    ) -> CompactionInfo:
        """The topic's compacted views (per partition: position, keys, bytes before and
        after) and the run going on, if any, or why the last one failed."""
        req = pb.DescribeCompactionRequest(topic=topic)
        return compaction_info(await self.conn.call("DescribeCompaction", req, timeout))

    # ------------------------------------------------------------------ subscriptions

    async def create_subscription(
        self,
        topic: str,
        subscription: str,
        *,
        type: str = "exclusive",
        initial_position: str | dt.datetime | int = "latest",
        timeout: float | None = 30.0,
    ) -> SubscriptionInfo:
        """Create a durable subscription without attaching a consumer (its cursor starts
        at ``initial_position`` now, and retention keeps what it has not acknowledged)."""
        req = pb.CreateSubscriptionRequest(
            topic=topic,
            subscription=subscription,
            type=type_code(type),
            initial_position=position_code(initial_position),
        )
        since = position_time_ms(initial_position)
        if since is not None:
            req.initial_timestamp_ms = since
        return subscription_info(await self.conn.call("CreateSubscription", req, timeout))

    async def describe_subscription(
        self, topic: str, subscription: str, *, timeout: float | None = 30.0
    ) -> SubscriptionInfo:
        req = pb.DescribeSubscriptionRequest(topic=topic, subscription=subscription)
        return subscription_info(await self.conn.call("DescribeSubscription", req, timeout))

    async def list_subscriptions(
        self, topic: str, *, timeout: float | None = 30.0
    ) -> list[SubscriptionInfo]:
        req = pb.ListSubscriptionsRequest(topic=topic)
        resp = await self.conn.call("ListSubscriptions", req, timeout)
        return [subscription_info(d) for d in resp.subscriptions]

    async def delete_subscription(
        self, topic: str, subscription: str, *, force: bool = False, timeout: float | None = 30.0
    ) -> None:
        """Delete a subscription; refused while consumers are attached unless ``force``."""
        req = pb.DeleteSubscriptionRequest(topic=topic, subscription=subscription, force=force)
        await self.conn.call("DeleteSubscription", req, timeout)

    async def seek_subscription(
        self,
        topic: str,
        subscription: str,
        *,
        offsets: Mapping[int, int] | None = None,
        timestamp: dt.datetime | int | None = None,
        timeout: float | None = 30.0,
    ) -> SubscriptionInfo:
        """Move a subscription: ``offsets`` (partition -> first offset to deliver) or every
        partition to the first message written at or after ``timestamp``. Its consumers
        are disconnected and reconnect on their own; delivery starts again from there."""
        req = pb.SeekSubscriptionRequest(
            topic=topic,
            subscription=subscription,
            offsets=[pb.PartitionOffset(partition=p, offset=o) for p, o in (offsets or {}).items()],
        )
        if timestamp is not None:
            req.timestamp_ms = to_ms(timestamp, "timestamp") or 0
        return subscription_info(await self.conn.call("SeekSubscription", req, timeout))

    async def skip_subscription(
        self,
        topic: str,
        subscription: str,
        count: int | None = None,
        *,
        partition: int | None = None,
        timeout: float | None = 30.0,
    ) -> int:
        """Acknowledge the ``count`` oldest unacknowledged messages of each partition (or
        of ``partition`` only); ``count=None`` skips them all (clears the backlog).
        Returns how many messages were skipped; the consumers stay attached."""
        req = pb.SkipSubscriptionRequest(topic=topic, subscription=subscription)
        if count is not None:
            req.count = count
        if partition is not None:
            req.partition = partition
        resp = await self.conn.call("SkipSubscription", req, timeout)
        return int(resp.skipped)
