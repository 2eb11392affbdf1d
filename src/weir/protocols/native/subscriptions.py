"""The native front of durable subscriptions: the Subscribe stream and the admin calls.

A `SubscribeSession` is one consumer: it attaches to the broker's subscription as a
`ConsumerHandle`, turns deliveries into SubscriptionMessages, and answers each ack,
negative ack and unsubscribe with an AckResponse of its own (an ack's response goes
out once the cursor is durable). When the stream ends the consumer is detached and
its unacknowledged messages go to the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import grpc

from weir.broker.broker import Broker
from weir.broker.non_persistent import LiveSubscription
from weir.broker.subscriptions import (
    AttachedConsumer,
    DeadLetterPolicy,
    Delivery,
    InitialPosition,
    Subscription,
    SubscriptionInfo,
    SubscriptionType,
)
from weir.broker.topics import short_topic
from weir.errors import BadRequestError, ConsumerBusyError, UnknownSubscriptionError, WeirError
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.stream import Allow, StreamSession, error_proto
from weir.protocols.native.unary import unary as unary_errors
from weir.security.grants import Permission
from weir.storage.batch_slices import trim_chunks

log = logging.getLogger("weir.native")

TYPES: dict[Any, SubscriptionType] = {
    pb.SUBSCRIPTION_EXCLUSIVE: SubscriptionType.EXCLUSIVE,
    pb.SUBSCRIPTION_FAILOVER: SubscriptionType.FAILOVER,
    pb.SUBSCRIPTION_SHARED: SubscriptionType.SHARED,
    pb.SUBSCRIPTION_KEY_SHARED: SubscriptionType.KEY_SHARED,
}
TYPE_CODES = {v: k for k, v in TYPES.items()}
POSITIONS: dict[Any, InitialPosition] = {
    pb.POSITION_LATEST: InitialPosition.LATEST,
    pb.POSITION_EARLIEST: InitialPosition.EARLIEST,
    pb.POSITION_TIMESTAMP: InitialPosition.TIMESTAMP,
}
POSITION_CODES = {v: k for k, v in POSITIONS.items()}


def _type(code: int) -> SubscriptionType:
    t = TYPES.get(code)
    if t is None:
        raise BadRequestError(f"unknown subscription type {code}")
    return t


def _position(code: int) -> InitialPosition:
    p = POSITIONS.get(code)
    if p is None:
        raise BadRequestError(f"unknown initial position {code}")
    return p


def subscription_description(info: SubscriptionInfo) -> pb.SubscriptionDescription:
    return pb.SubscriptionDescription(
        topic=info.topic,
        subscription=info.name,
        type=TYPE_CODES[info.type],
        initial_position=POSITION_CODES[InitialPosition(info.initial_position)],
        created_at_ms=info.created_at_ms,
        max_redeliver_count=info.max_redeliver_count,
        dead_letter_topic=info.dead_letter_topic,
        msg_rate_out=info.msg_rate_out,
        msg_rate_redeliver=info.msg_rate_redeliver,
        ack_rate=info.ack_rate,
        consumer=info.consumer,
        backlog=info.backlog,
        unacked=info.unacked,
        partitions=[
            pb.SubscriptionPartition(
                partition=p.partition,
                mark_delete=p.mark_delete,
                acked_ranges=p.acked_ranges,
                backlog=p.backlog,
                unacked=p.unacked,
                active_consumer=p.active_consumer,
            )
            for p in info.partitions
        ],
        consumers=[
            pb.SubscriptionConsumer(
                consumer_id=c.consumer_id,
                name=c.name,
                permits=c.permits,
                unacked=c.unacked,
                sticky_ranges=[pb.HashRange(start=a, end=b) for a, b in c.sticky_ranges],
            )
            for c in info.consumers
        ],
    )


class SubscribeSession(StreamSession[pb.SubscribeRequest, pb.SubscribeResponse]):
    """One Subscribe stream: one consumer of one subscription."""

    def __init__(
        self,
        broker: Broker,
        context: grpc.aio.ServicerContext,
        stopping: asyncio.Event,
        allow: Allow,
    ) -> None:
        super().__init__(context, stopping)
        self.broker = broker
        self.allow = allow
        self._sub: Subscription | LiveSubscription | None = None
        self._consumer: AttachedConsumer | None = None
        # with retry_enable: the same consumer on the retry topic's subscription
        self._retry: tuple[Subscription, AttachedConsumer] | None = None
        self._retry_topic = ""  # as its messages name it
        self._outstanding = 0  # retry messages delivered and not given back as permits
        self._tasks: set[asyncio.Task[None]] = set()
        self._unsubscribing = False

    # ConsumerHandle ----------------------------------------------------------

    def deliver(self, d: Delivery) -> None:
        if self._retry is not None and d.topic == self._retry[0].topic:
            self._outstanding += len(d.offsets)
        self._out.put_nowait(
            pb.SubscribeResponse(
                messages=pb.SubscriptionMessages(
                    topic=short_topic(d.topic),
                    partition=d.partition,
                    # only what is delivered of each stored batch, not all of a big one
                    chunks=[bytes(c) for c in trim_chunks(d.chunks, d.offsets)],
                    offsets=d.offsets,
                    redelivery_counts=d.redelivery_counts,
                )
            )
        )

    def close(self, err: WeirError) -> None:
        if not self._unsubscribing:
            self._fail(err)

    # -------------------------------------------------------------------------

    def _error_response(self, error: pb.Error) -> pb.SubscribeResponse:
        return pb.SubscribeResponse(error=error)

    def _release(self) -> None:
        if self._sub is not None and self._consumer is not None:
            self._sub.detach(self._consumer.consumer_id)
        if self._retry is not None:
            self._retry[0].detach(self._retry[1].consumer_id)

    async def _drain(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, requests: AsyncIterator[pb.SubscribeRequest]) -> None:
        try:
            first = await anext(requests, None)
            if first is None:
                return
            if first.WhichOneof("kind") != "init":
                raise BadRequestError("the first message of a subscribe stream must be init")
            init = first.init
            if init.permits < 0:
                raise BadRequestError(f"permits must be >= 0, got {init.permits}")
            self.allow(Permission.CONSUME, init.topic, "subscribe to", init.subscription)
            cfg = self.broker.topic(init.topic)
            sub, c = await self.broker.subscribe(
                cfg.name,
                init.subscription,
                _type(init.type),
                _position(init.initial_position),
                self,
                consumer_name=init.consumer_name,
                ack_timeout_ms=init.ack_timeout_ms,
                create=not init.no_create,
                dead_letter=DeadLetterPolicy(init.max_redeliver_count, init.dead_letter_topic)
                if init.max_redeliver_count > 0
                else None,
                initial_time_ms=init.initial_timestamp_ms
                if init.HasField("initial_timestamp_ms")
                else None,
                hash_ranges=[(r.start, r.end) for r in init.sticky_ranges]
                if init.sticky_ranges
                else None,
            )
            self._sub, self._consumer = sub, c
            if init.retry_enable:
                await self._subscribe_retry(init, sub, c)
            self._out.put_nowait(
                pb.SubscribeResponse(
                    init=pb.SubscribeInitResult(
                        consumer_id=c.consumer_id,
                        topic=init.topic,
                        partitions=cfg.partitions,
                        type=TYPE_CODES[sub.meta.type],
                        consumer_name=c.name,
                        generation=self.broker.generation,
                        retry_topic=self._retry_topic,
                    )
                )
            )
            sub.flow(c.consumer_id, init.permits)
            if self._retry is not None:
                self._retry[0].flow(self._retry[1].consumer_id, init.permits)
            async for req in requests:
                kind = req.WhichOneof("kind")
                if kind == "flow":
                    self._flow(sub, c, req.flow.permits)
                elif kind == "ack":
                    self._spawn(req.ack.request_id, self._ack(sub, req.ack))
                elif kind == "nack":
                    self._answer(req.nack.request_id, sub, req.nack)
                elif kind == "reconsume":
                    self._spawn(req.reconsume.request_id, self._reconsume(sub, req.reconsume))
                elif kind == "unsubscribe":
                    await self._unsubscribe(sub, req.unsubscribe.request_id)
                    return
                else:
                    raise BadRequestError(f"unexpected {kind} on a subscribe stream")
            await self._drain()  # half-closed: the acks in flight still get their answers
            self._stop.set()
        except asyncio.CancelledError:
            raise
        except Exception as err:
            if not isinstance(err, WeirError):
                log.exception("subscribe session failed")
            self._fail(err)

    async def _subscribe_retry(
        self, init: pb.SubscribeInit, sub: Subscription | LiveSubscription, c: AttachedConsumer
    ) -> None:
        """Attach this consumer to the subscription of the same name on the retry topic too
        (Shared, or Key_Shared: both deliver a retry letter after its delay)."""
        if not isinstance(sub, Subscription):
            raise BadRequestError(
                f"topic {init.topic!r} is non-persistent: retry letters need a durable subscription"
            )
        if sub.consumer_backed:
            raise BadRequestError(
                f"subscription {sub.name!r} is the committed offsets of consumer {sub.name!r}: "
                "it has no retry letter topic"
            )
        letters = self.broker.retry_letters(sub, init.retry_letter_topic)
        self.allow(Permission.CONSUME, letters.topic, "subscribe to", sub.name)
        rcfg = await self.broker.side_topic(letters.topic)
        rtype = (
            SubscriptionType.KEY_SHARED
            if sub.meta.type is SubscriptionType.KEY_SHARED
            else SubscriptionType.SHARED
        )
        rsub, rc = await self.broker.subscribe(
            rcfg.name,
            sub.name,
            rtype,
            InitialPosition.EARLIEST,
            self,
            consumer_name=c.name,
            ack_timeout_ms=init.ack_timeout_ms,
            dead_letter=DeadLetterPolicy(letters.max_redeliver_count, letters.dead_letter_topic)
            if letters.max_redeliver_count
            else None,
        )
        if not isinstance(rsub, Subscription):  # a retry topic is persistent, as its topic
            rsub.detach(rc.consumer_id)
            raise BadRequestError(f"retry letter topic {letters.topic!r} is not persistent")
        self._retry = (rsub, rc)
        self._retry_topic = short_topic(rcfg.name)

    def _flow(
        self, sub: Subscription | LiveSubscription, c: AttachedConsumer, permits: int
    ) -> None:
        """Permits given back go to the retry subscription as far as it used them."""
        if self._retry is not None and self._outstanding and permits > 0:
            back = min(permits, self._outstanding)
            self._outstanding -= back
            self._retry[0].flow(self._retry[1].consumer_id, back)
            permits -= back
        sub.flow(c.consumer_id, permits)

    def _routed(
        self, sub: Subscription | LiveSubscription, ranges: Any
    ) -> list[tuple[Subscription | LiveSubscription, list[tuple[int, int, int]]]]:
        """Ranges by the subscription they belong to: this one, or its retry topic's."""
        if not ranges:
            raise BadRequestError("an acknowledgement needs at least one message")
        main = [(r.partition, r.start, r.end) for r in ranges if not r.topic]
        other = [r for r in ranges if r.topic]
        out: list[tuple[Subscription | LiveSubscription, list[tuple[int, int, int]]]] = (
            [(sub, main)] if main else []
        )
        if other:
            if self._retry is None or any(r.topic != self._retry_topic for r in other):
                names = sorted({r.topic for r in other} - {self._retry_topic})
                raise BadRequestError(
                    f"messages of {names or [self._retry_topic]} do not belong to this "
                    "consumer (only its topic and, with retry enabled, its retry topic do)"
                )
            out.append((self._retry[0], [(r.partition, r.start, r.end) for r in other]))
        return out

    async def _ack(self, sub: Subscription | LiveSubscription, r: pb.AckRequest) -> None:
        routed = self._routed(sub, r.ranges)
        if r.cumulative:
            if len(routed) != 1 or len(routed[0][1]) != 1:
                raise BadRequestError("a cumulative acknowledgement names exactly one message")
            target, ((p, o, _),) = routed[0]
            await target.acknowledge_cumulative(p, o)
        else:
            await asyncio.gather(*(target.acknowledge(rs) for target, rs in routed))

    async def _reconsume(
        self, sub: Subscription | LiveSubscription, r: pb.ReconsumeRequest
    ) -> None:
        if self._retry is None or not isinstance(sub, Subscription):
            raise BadRequestError(
                "reconsume_later needs a consumer subscribed with retry enabled (retry_enable)"
            )
        letters = self.broker.retry_letters(sub, self._retry[0].topic)
        for target, rs in self._routed(sub, r.ranges):
            assert isinstance(target, Subscription)  # this one, or its retry subscription
            await target.reconsume_later(rs, r.delay_ms, letters)

    def _answer(
        self, request_id: int, sub: Subscription | LiveSubscription, r: pb.NackRequest
    ) -> None:
        try:
            for target, rs in self._routed(sub, r.ranges):
                target.negative_acknowledge(rs, r.delay_ms)
        except WeirError as err:
            self._out.put_nowait(
                pb.SubscribeResponse(
                    ack=pb.AckResponse(request_id=request_id, error=error_proto(err))
                )
            )
            return
        self._out.put_nowait(pb.SubscribeResponse(ack=pb.AckResponse(request_id=request_id)))

    def _spawn(self, request_id: int, work: Awaitable[None]) -> None:
        async def run() -> None:
            try:
                await work
            except WeirError as err:
                resp = pb.AckResponse(request_id=request_id, error=error_proto(err))
            except Exception as err:
                log.exception("acknowledgement failed")
                resp = pb.AckResponse(request_id=request_id, error=error_proto(err))
            else:
                resp = pb.AckResponse(request_id=request_id)
            self._out.put_nowait(pb.SubscribeResponse(ack=resp))

        t = asyncio.get_running_loop().create_task(run())
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _unsubscribe(self, sub: Subscription | LiveSubscription, request_id: int) -> None:
        """Delete the subscription; refused while other consumers are attached."""
        await self._drain()
        others = [c for c in sub.consumers.values() if c is not self._consumer]
        try:
            if others:
                raise ConsumerBusyError(
                    f"subscription {sub.name!r} has {len(others)} other consumer(s) attached; "
                    "unsubscribe needs the last one"
                )
            self._unsubscribing = True
            await self.broker.delete_subscription(sub.topic, sub.name, force=True)
            if self._retry is not None:
                with contextlib.suppress(UnknownSubscriptionError):
                    await self.broker.delete_subscription(
                        self._retry[0].topic, sub.name, force=True
                    )
        except WeirError as err:
            self._unsubscribing = False
            self._out.put_nowait(
                pb.SubscribeResponse(
                    ack=pb.AckResponse(request_id=request_id, error=error_proto(err))
                )
            )
            return
        self._sub = None
        self._out.put_nowait(pb.SubscribeResponse(ack=pb.AckResponse(request_id=request_id)))
        self._stop.set()


class SubscriptionRpcs:
    """The subscription calls of `NativeService` (a mixin: it provides ``broker``, ``stopping``
    and wraps the unary ones so that a WeirError becomes a gRPC status)."""

    broker: Broker
    stopping: asyncio.Event
    _allow: Allow  # NativeService's authorization

    async def Subscribe(
        self,
        request_iterator: AsyncIterator[pb.SubscribeRequest],
        context: grpc.aio.ServicerContext,
    ) -> None:
        await SubscribeSession(self.broker, context, self.stopping, self._allow).run(
            request_iterator
        )

    @unary_errors
    async def CreateSubscription(
        self, request: pb.CreateSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> pb.SubscriptionDescription:
        self._allow(
            Permission.CONSUME, request.topic, "create a subscription on", request.subscription
        )
        info = await self.broker.create_subscription(
            request.topic,
            request.subscription,
            _type(request.type),
            _position(request.initial_position),
            request.initial_timestamp_ms if request.HasField("initial_timestamp_ms") else None,
        )
        return subscription_description(info)

    @unary_errors
    async def DescribeSubscription(
        self, request: pb.DescribeSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> pb.SubscriptionDescription:
        self._allow(
            Permission.CONSUME, request.topic, "describe a subscription of", request.subscription
        )
        return subscription_description(
            self.broker.describe_subscription(request.topic, request.subscription)
        )

    @unary_errors
    async def ListSubscriptions(
        self, request: pb.ListSubscriptionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSubscriptionsResponse:
        self._allow(Permission.CONSUME, request.topic, "list the subscriptions of")
        return pb.ListSubscriptionsResponse(
            subscriptions=[
                subscription_description(i) for i in self.broker.list_subscriptions(request.topic)
            ]
        )

    @unary_errors
    async def SeekSubscription(
        self, request: pb.SeekSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> pb.SubscriptionDescription:
        self._allow(
            Permission.CONSUME, request.topic, "seek a subscription of", request.subscription
        )
        info = await self.broker.seek_subscription(
            request.topic,
            request.subscription,
            {o.partition: o.offset for o in request.offsets},
            request.timestamp_ms if request.HasField("timestamp_ms") else None,
        )
        return subscription_description(info)

    @unary_errors
    async def SkipSubscription(
        self, request: pb.SkipSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> pb.SkipSubscriptionResponse:
        self._allow(
            Permission.CONSUME,
            request.topic,
            "skip messages of a subscription of",
            request.subscription,
        )
        skipped = await self.broker.skip_subscription(
            request.topic,
            request.subscription,
            request.count if request.HasField("count") else None,
            request.partition if request.HasField("partition") else None,
        )
        return pb.SkipSubscriptionResponse(
            skipped=skipped,
            subscription=subscription_description(
                self.broker.describe_subscription(request.topic, request.subscription)
            ),
        )

    @unary_errors
    async def DeleteSubscription(
        self, request: pb.DeleteSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteSubscriptionResponse:
        self._allow(
            Permission.CONSUME, request.topic, "delete a subscription of", request.subscription
        )
        await self.broker.delete_subscription(
            request.topic, request.subscription, force=request.force
        )
        return pb.DeleteSubscriptionResponse()
