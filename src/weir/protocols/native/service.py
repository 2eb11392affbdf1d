"""The native front: weir.proto over grpc.aio, batches in and out untouched.

A write session validates each batch (header, both CRCs, column structure,
producer id) and queues it on the partition actor in arrival order; acks go
back in the same order as the commits complete. A read session sends stored
chunks as they are, within the byte credit the client grants.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import operator
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from weir.access_mode import AccessMode
from weir.broker.broker import Broker
from weir.broker.topic_admin import UNSET
from weir.broker.consumers import ConsumerGroup
from weir.broker.tenancy.limits import Lease
from weir.broker.topics import ConsumerConfig, TopicConfig, canonical_topic, short_topic
from weir.errors import (
    BadRequestError,
    InternalError,
    MessageTooLargeError,
    OverloadedError,
    ProducerFencedError,
    UnavailableError,
    WeirError,
)
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native import weir_pb2_grpc as pb_grpc
from weir.protocols.native.auth import PUBLIC_METHODS, guard
from weir.protocols.native.policy_values import from_wire, to_wire
from weir.protocols.native.security_methods import SecurityMethods
from weir.protocols.native.status import CODE_KEY, grpc_status
from weir.protocols.native.subscriptions import SubscriptionRpcs
from weir.protocols.native.tenancy_service import TenancyCalls
from weir.protocols.native.unary import unary as _unary
from weir.protocols.native.wire import (
    RawRangeResponse,
    RawReadData,
    RawWriteRequest,
    decode_write_request,
    encode_range_response,
    encode_read_response,
)
from weir.security import Security, current_principal
from weir.security.grants import Permission
from weir.security.tls import peer_host
from weir.storage.batch import BatchHeader, decode_payload
from weir.storage.codecs import codec_name
from weir.storage.partition import BatchResult, IncomingBatch, validate_incoming

log = logging.getLogger("weir.native")

T = TypeVar("T")
MAX_CHUNK_BYTES = 4 << 20


def _error(err: BaseException) -> pb.Error:
    if not isinstance(err, WeirError):
        err = InternalError(f"unexpected server error: {err!r}")
    return pb.Error(code=err.code, message=err.message, retryable=err.retryable)


def _opt(msg: Any, name: str) -> Any:
    """The value of an optional proto field, UNSET when absent, None for -1 (clear)."""
    if not msg.HasField(name):
        return UNSET
    v = getattr(msg, name)
    if v == -1:
        return None
    if v < 0:
        raise BadRequestError(f"{name} must be positive, or -1 to clear it; got {v}")
    return v


def describe(broker: Broker, cfg: TopicConfig) -> pb.TopicDescription:
    d = pb.TopicDescription(
        topic=short_topic(cfg.name),
        partitions=cfg.partitions,
        codecs=[codec_name(c) for c in cfg.codecs],
        consumers=[
            pb.ConsumerSettings(name=c.name, important=c.important, read_from_ms=c.read_from_ms)
            for c in cfg.consumers.values()
        ],
        partition_status=[
            pb.PartitionStatus(
                partition=p.partition,
                start_offset=p.start_offset,
                end_offset=p.end_offset,
                size_bytes=p.size_bytes,
                generation=p.generation,
                last_write_ms=p.last_write_ms,
            )
            for p in broker.partitions(cfg.name)
        ],
        created_at_ms=cfg.created_at_ms,
    )
    to_wire(cfg.policies, d.policies)
    to_wire(broker.topic_policies(cfg), d.effective_policies)
    for name in (
        "retention_ms",
        "retention_bytes",
        "max_partition_bytes",
        "max_partition_messages",
    ):
        v = getattr(cfg, name)
        if v is not None:
            setattr(d, name, v)
    return d


class NativeService(TenancyCalls, SubscriptionRpcs, SecurityMethods, pb_grpc.WeirServicer):
    """The gRPC servicer of weir.proto (subscriptions: `weir.protocols.native.subscriptions`,
    tenants and namespaces: `weir.protocols.native.tenancy_service`, security:
    `weir.protocols.native.security_methods`)."""

    def __init__(
        self,
        broker: Broker,
        stopping: asyncio.Event | None = None,
        security: Security | None = None,
    ) -> None:
        self.broker = broker
        self.stopping = stopping or asyncio.Event()
        self.security = security if security is not None else Security.for_broker(broker)

    @_unary
    async def Login(
        self, request: pb.LoginRequest, context: grpc.aio.ServicerContext
    ) -> pb.LoginResponse:
        # the password check (scrypt, tens of ms) runs off the event loop
        issued = await asyncio.to_thread(
            self.security.login, request.user, request.password, peer_host(context)
        )
        return pb.LoginResponse(token=issued.token, expires_in_ms=issued.expires_in_ms)

    # ------------------------------------------------------------------ admin

    def _allow(self, permission: Permission | None, topic: str, operation: str) -> None:
        """Authorization of the caller for ``operation`` on ``topic``, before it is looked up."""
        self.security.authorize(
            current_principal.get(), permission, canonical_topic(topic), operation
        )

    @_unary
    async def CreateTopic(
        self, request: pb.CreateTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.TopicDescription:
        self._allow(Permission.ADMIN, request.topic, "create")
        cfg = await self.broker.create_topic(
            request.topic,
            partitions=request.partitions or None,
            retention_ms=_opt(request, "retention_ms"),
            retention_bytes=_opt(request, "retention_bytes"),
            max_partition_bytes=_none(_opt(request, "max_partition_bytes")),
            max_partition_messages=_none(_opt(request, "max_partition_messages")),
            codecs=list(request.codecs),
            consumers=[
                ConsumerConfig(c.name, c.important, c.read_from_ms) for c in request.consumers
            ],
            policies=from_wire(request.policies),
        )
        return describe(self.broker, cfg)

    @_unary
    async def DescribeTopic(
        self, request: pb.DescribeTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.TopicDescription:
        self._allow(None, request.topic, "describe")
        return describe(self.broker, self.broker.topic(request.topic))

    @_unary
    async def AlterTopic(
        self, request: pb.AlterTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.TopicDescription:
        self._allow(Permission.ADMIN, request.topic, "alter")
        cfg = await self.broker.alter_topic(
            request.topic,
            partitions=request.partitions if request.HasField("partitions") else None,
            retention_ms=_opt(request, "retention_ms"),
            retention_bytes=_opt(request, "retention_bytes"),
            max_partition_bytes=_opt(request, "max_partition_bytes"),
            max_partition_messages=_opt(request, "max_partition_messages"),
            codecs=list(request.codecs) if request.set_codecs else None,
            add_consumers=[
                ConsumerConfig(c.name, c.important, c.read_from_ms) for c in request.add_consumers
            ],
            drop_consumers=list(request.drop_consumers),
            policies=from_wire(request.policies),
            inherit=list(request.inherit_policies),
        )
        return describe(self.broker, cfg)

    @_unary
    async def DropTopic(
        self, request: pb.DropTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.DropTopicResponse:
        self._allow(Permission.ADMIN, request.topic, "drop")
        await self.broker.drop_topic(request.topic)
        return pb.DropTopicResponse()

    @_unary
    async def ListTopics(
        self, request: pb.ListTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTopicsResponse:
        me = current_principal.get()
        visible = [
            c for c in self.broker.list_topics(request.prefix) if self.security.can_see(me, c.name)
        ]
        return pb.ListTopicsResponse(topics=[describe(self.broker, c) for c in visible])

    @_unary
    async def DescribeConsumer(
        self, request: pb.DescribeConsumerRequest, context: grpc.aio.ServicerContext
    ) -> pb.ConsumerDescription:
        self._allow(Permission.CONSUME, request.topic, "describe a consumer of")
        c = self.broker.consumer(request.topic, request.consumer)
        parts = self.broker.describe_consumer(request.topic, request.consumer)
        return pb.ConsumerDescription(
            topic=short_topic(self.broker.topic(request.topic).name),
            consumer=pb.ConsumerSettings(
                name=c.name, important=c.important, read_from_ms=c.read_from_ms
            ),
            partitions=[
                pb.ConsumerPartition(
                    partition=p.partition,
                    committed_offset=p.committed_offset,
                    start_offset=p.start_offset,
                    end_offset=p.end_offset,
                    lag=p.lag,
                )
                for p in parts
            ],
        )

    @_unary
    async def CommitOffset(
        self, request: pb.CommitOffsetRequest, context: grpc.aio.ServicerContext
    ) -> pb.CommitOffsetResponse:
        self._allow(Permission.CONSUME, request.topic, "commit an offset of")
        changed = await self.broker.commit_offset(
            request.topic,
            request.partition,
            request.consumer,
            request.offset,
            allow_backwards=request.allow_backwards,
        )
        return pb.CommitOffsetResponse(changed=changed)

    @_unary
    async def OffsetsForTime(
        self, request: pb.OffsetsForTimeRequest, context: grpc.aio.ServicerContext
    ) -> pb.OffsetsForTimeResponse:
        self._allow(Permission.CONSUME, request.topic, "look up offsets by time in")
        cfg = self.broker.topic(request.topic)
        return pb.OffsetsForTimeResponse(
            offsets=[
                self.broker.actor(cfg.name, p).log.offset_for_time(request.timestamp_ms)
                for p in range(cfg.partitions)
            ]
        )

    # ------------------------------------------------------------------ range read

    async def ReadRange(
        self, request: pb.ReadRangeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ReadRangeResponse | RawRangeResponse]:
        try:
            self._allow(Permission.CONSUME, request.topic, "read")
            actor = self.broker.actor(request.topic, request.partition)
            if request.from_offset < 0:
                raise BadRequestError(f"from_offset must be >= 0, got {request.from_offset}")
            to = (
                actor.end_offset
                if request.to_offset < 0
                else min(request.to_offset, actor.end_offset)
            )
            budget = max(1, min(request.max_bytes or MAX_CHUNK_BYTES, 64 << 20))
            pos = request.from_offset
            sent = False
            while pos < to:
                res = actor.read(pos, budget, to)
                if not res.chunks:
                    break
                self.broker.observer.on_read(actor.topic, actor.partition, res.nbytes)
                yield RawRangeResponse(
                    res.chunks, res.first_offset, res.next_offset, res.start_offset, res.end_offset
                )
                sent = True
                pos = res.next_offset
            if not sent:
                yield pb.ReadRangeResponse(
                    first_offset=max(pos, actor.start_offset),
                    next_offset=max(pos, actor.start_offset),
                    start_offset=actor.start_offset,
                    end_offset=actor.end_offset,
                )
        except WeirError as err:
            await context.abort(
                grpc_status(err), err.message, trailing_metadata=((CODE_KEY, err.code),)
            )

    # ------------------------------------------------------------------ streams

    async def StreamWrite(
        self, request_iterator: AsyncIterator[pb.WriteRequest], context: grpc.aio.ServicerContext
    ) -> None:
        session = WriteSession(self.broker, context, self.stopping, allow=self._allow)
        await session.run(request_iterator)

    async def StreamRead(
        self, request_iterator: AsyncIterator[pb.ReadRequest], context: grpc.aio.ServicerContext
    ) -> None:
        session = ReadSession(self.broker, context, self.stopping, allow=self._allow)
        await session.run(request_iterator)


Allow = Callable[[Permission | None, str, str], None]


def _allow_all(permission: Permission | None, topic: str, operation: str) -> None:
    """Sessions made without a service (tests of the session alone) check nothing."""


def _none(v: Any) -> Any:
    return None if v is UNSET else v


class WriteSession:
    """One StreamWrite: init, then batches in, acks out in order; the first error ends it."""

    def __init__(
        self,
        broker: Broker,
        context: grpc.aio.ServicerContext,
        stopping: asyncio.Event | None = None,
        allow: Allow | None = None,
    ) -> None:
        self.broker = broker
        self.context = context
        self.stopping = stopping or asyncio.Event()
        self.allow: Allow = allow or _allow_all
        self.session_id = uuid.uuid4().hex[:16]
        self._pending: deque[tuple[asyncio.Future[list[BatchResult]], int]] = deque()
        self._have_pending = asyncio.Event()
        self._inflight = 0
        self._failure: BaseException | None = None
        self._done = asyncio.Event()

    def _fail(self, err: BaseException) -> None:
        if self._failure is None:
            self._failure = err
        self._done.set()

    async def run(self, requests: AsyncIterator[pb.WriteRequest]) -> None:
        token = lease = None
        claim = None
        reader = acker = None
        try:
            first = await anext(requests, None)
            if first is None:
                return
            if first.WhichOneof("kind") != "init":
                raise BadRequestError("the first message of a write stream must be init")
            init = first.init
            self.allow(Permission.PRODUCE, init.topic, "write to")
            cfg = await self.broker.topic_for_use(init.topic)
            self.topic = cfg.name
            self.producer_id = init.producer_id
            self.message_limit = self.broker.message_limit(cfg.name)
            self.partition = await self.broker.resolve_partition(
                cfg.name,
                init.producer_id,
                init.partition if init.HasField("partition") else None,
                init.generation if init.HasField("generation") else None,
                routed=init.routed,
            )
            mode = AccessMode.parse(init.access_mode)
            if mode.exclusive and not self.producer_id:
                raise BadRequestError(f"a {mode.title} producer needs a producer_id")
            lease = self.broker.count_producer(cfg.name, self.producer_id)
            claim = await self.broker.open_producer(
                cfg.name,
                self.producer_id or f"\0session {self.session_id}",
                mode,
                init.producer_epoch if init.HasField("producer_epoch") else None,
                self._fail,
            )
            if self.producer_id:
                # one live session per producer, per partition for a routing writer's
                one = f"{self.producer_id}\0{self.partition}" if init.routed else self.producer_id
                token = self.broker.register_writer(cfg.name, one, self._superseded)
            last = (
                self.broker.last_seq_no(cfg.name, self.partition, self.producer_id)
                if self.producer_id
                else None
            )
            result = pb.WriteInitResult(
                topic=short_topic(cfg.name),
                partition=self.partition,
                generation=self.broker.generation,
                session_id=self.session_id,
                max_message_bytes=self.message_limit,
                producer_epoch=claim.epoch,
                partitions=cfg.partitions,
            )
            if last is not None:
                result.last_seq_no = last
            await self.context.write(pb.WriteResponse(init=result))
            log.debug(
                "write session opened",
                extra={
                    "session": self.session_id,
                    "topic": short_topic(cfg.name),
                    "partition": self.partition,
                    "producer": self.producer_id,
                },
            )
            reader = asyncio.create_task(self._read(requests))
            acker = asyncio.create_task(self._ack())
            await _first(self._done.wait(), self.stopping.wait())
            if not self._done.is_set():
                # the server is stopping: take no more batches, ack what is in flight, end
                reader.cancel()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._drained(), 10)
                raise UnavailableError("server is shutting down; reconnect to another or later")
            if self._failure is not None:
                raise self._failure
        except asyncio.CancelledError:
            raise
        except Exception as err:
            if not isinstance(err, WeirError):
                log.exception(
                    "write session failed",
                    extra={"session": self.session_id, "topic": getattr(self, "topic", "")},
                )
            # gRPC takes one write at a time: stop the acker before sending the error
            await _stop(reader, acker)
            with contextlib.suppress(Exception):
                await self.context.write(pb.WriteResponse(error=_error(err)))
        finally:
            await _stop(reader, acker)
            if token is not None:
                self.broker.unregister_writer(token)
            if claim is not None:
                self.broker.close_producer(claim)
            if lease is not None:
                lease.release()

    async def _drained(self) -> None:
        while self._pending and self._failure is None:
            await asyncio.sleep(0.01)

    def _superseded(self) -> None:
        self._fail(
            ProducerFencedError(f"another write session of producer {self.producer_id!r} took over")
        )

    async def _read(self, requests: AsyncIterator[pb.WriteRequest]) -> None:
        cfg = self.broker.config
        try:
            async for req in requests:
                if req.WhichOneof("kind") != "batches":
                    raise BadRequestError("only batches may follow init on a write stream")
                bufs = req.batches if isinstance(req, RawWriteRequest) else req.batches.batches
                if not bufs:
                    continue
                nbytes = 0
                for b in bufs:
                    if len(b) > cfg.max_batch_bytes:
                        raise MessageTooLargeError(
                            f"batch of {len(b)} bytes exceeds max_batch_bytes {cfg.max_batch_bytes}"
                        )
                    nbytes += len(b)
                batches = validate_incoming(bufs)
                for inc in batches:
                    self._check_producer(inc.header)
                    check_message_sizes(inc, self.message_limit)
                if self._failure is not None:
                    return  # fenced or superseded: nothing more of this session is stored
                if self._inflight and self._inflight + nbytes > cfg.max_session_inflight_bytes:
                    self.broker.observer.on_refused(self.topic, self.partition, "overloaded")
                    raise OverloadedError(
                        f"write session has {self._inflight} bytes unacknowledged "
                        f"(limit {cfg.max_session_inflight_bytes}); slow down"
                    )
                fut = self.broker.submit(self.topic, self.partition, batches, nbytes)
                self._inflight += nbytes
                self._pending.append((fut, nbytes))
                self._have_pending.set()
            # the client half-closed: finish acking what is pending, then end
            self._pending.append((_closed_marker(), 0))
            self._have_pending.set()
        except asyncio.CancelledError:
            raise
        except BaseException as err:
            self._fail(err)

    def _check_producer(self, h: BatchHeader) -> None:
        if h.producer_id != self.producer_id:
            raise BadRequestError(
                f"batch producer_id {h.producer_id!r} differs from the session's {self.producer_id!r}"
            )

    async def _ack(self) -> None:
        try:
            while True:
                while not self._pending:
                    self._have_pending.clear()
                    await self._have_pending.wait()
                fut, nbytes = self._pending[0]
                # shielded: when the session ends, cancelling this task must not cancel the
                # write (the actor would drop it and commit the session's later writes: a gap
                # in the producer's seq_nos, and a resend of it "skipped" yet never stored)
                results = await asyncio.shield(fut)
                self._pending.popleft()
                if results is None:  # end of input
                    self._done.set()
                    return
                self._inflight -= nbytes
                acks = [
                    pb.BatchAck(offset=r.offset, written=r.written, skipped=r.skipped)
                    for r in results
                ]
                await self.context.write(pb.WriteResponse(ack=pb.WriteAck(acks=acks)))
        except asyncio.CancelledError:
            raise
        except BaseException as err:
            self._fail(err)


def check_message_sizes(inc: IncomingBatch, limit: int) -> None:
    """Refuse a batch holding a message (data plus key) over ``limit`` bytes.

    A payload no bigger than the limit cannot hold such a message, so only the
    rare batch with a bigger one is decoded again for its lengths.
    """
    h = inc.header
    if h.raw_len <= limit:
        return
    p = decode_payload(inc.buf, 0, h)
    sizes = p.data_lens if p.key_lens is None else map(operator.add, p.data_lens, p.key_lens)
    biggest = max(sizes, default=0)
    if biggest > limit:
        raise MessageTooLargeError(
            f"a message of {biggest} bytes exceeds the limit of {limit} bytes "
            "(limits.max_message_bytes, or the topic's max_message_bytes policy)"
        )


async def _stop(*tasks: asyncio.Task[None] | None) -> None:
    """Cancel tasks and wait until they are done."""
    live = [t for t in tasks if t is not None and not t.done()]
    for t in live:
        t.cancel()
    for t in live:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t


async def _first(*aws: Awaitable[Any]) -> None:
    """Wait until the first of ``aws`` finishes; cancel the others."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


def _closed_marker() -> asyncio.Future[Any]:
    f: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    f.set_result(None)
    return f


@dataclass(eq=False)
class _Assignment:
    id: int
    topic: str
    partition: int
    offset: int
    task: asyncio.Task[None] | None = None
    revoking: bool = False
    group: ConsumerGroup | None = None
    commits: set[asyncio.Task[None]] = field(default_factory=set)


_assignment_ids = itertools.count(1)


class ReadSession:
    """One StreamRead: partitions assigned by the consumer group (or all, without a consumer)."""

    def __init__(
        self,
        broker: Broker,
        context: grpc.aio.ServicerContext,
        stopping: asyncio.Event | None = None,
        allow: Allow | None = None,
    ) -> None:
        self.broker = broker
        self.context = context
        self.stopping = stopping or asyncio.Event()
        self.allow: Allow = allow or _allow_all
        self.session_id = uuid.uuid4().hex[:16]
        self.consumer = ""
        self.start = pb.START_COMMITTED
        self.read_from_ms = 0
        self._credit = 0
        self._credit_event = asyncio.Event()
        self._out: asyncio.Queue[pb.ReadResponse | RawReadData | None] = asyncio.Queue()
        self._assignments: dict[int, _Assignment] = {}
        self._by_tp: dict[tuple[str, int], _Assignment] = {}
        self._groups: list[ConsumerGroup] = []
        self._failure: BaseException | None = None
        self._stop = asyncio.Event()
        self._leases: list[Lease] = []

    async def run(self, requests: AsyncIterator[pb.ReadRequest]) -> None:
        sender = asyncio.create_task(self._send())
        handler = asyncio.create_task(self._handle(requests))
        stop = asyncio.create_task(self._stop.wait())
        server_stop = asyncio.create_task(self.stopping.wait())
        try:
            await asyncio.wait({handler, stop, server_stop}, return_when=asyncio.FIRST_COMPLETED)
            if server_stop.done() and not stop.done():
                await self._drain_commits()  # their acks go out before the error
                self._fail(UnavailableError("server is shutting down; reconnect later"))
        finally:
            server_stop.cancel()
            handler.cancel()
            stop.cancel()
            for lease in self._leases:
                lease.release()
            for g in self._groups:
                g.leave(self.session_id)
            for a in list(self._assignments.values()):
                if a.task is not None:
                    a.task.cancel()
            self._out.put_nowait(None)
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(sender, 5)

    def _fail(self, err: BaseException) -> None:
        """Send the error and end the session (the client reconnects if it is retryable)."""
        if self._failure is None:
            self._failure = err
            if not isinstance(err, WeirError):
                log.error("read session failed: %r", err, extra={"session": self.session_id})
            self._out.put_nowait(pb.ReadResponse(error=_error(err)))
        self._stop.set()

    async def _handle(self, requests: AsyncIterator[pb.ReadRequest]) -> None:
        try:
            first = await anext(requests, None)
            if first is None:
                return
            if first.WhichOneof("kind") != "init":
                raise BadRequestError("the first message of a read stream must be init")
            init = first.init
            if not init.topics:
                raise BadRequestError("a read session needs at least one topic")
            self.consumer = init.consumer
            self.start = init.start
            self.read_from_ms = init.read_from_ms
            self._add_credit(init.credit_bytes or (16 << 20))
            for t in init.topics:
                self.allow(Permission.CONSUME, t, "read")
            topics = [(await self.broker.topic_for_use(t)).name for t in init.topics]
            for t in dict.fromkeys(topics):
                self._leases.append(self.broker.count_consumer(t))
            if self.consumer:
                for t in topics:
                    await self.broker.ensure_consumer(t, self.consumer)
            self._out.put_nowait(
                pb.ReadResponse(init=pb.ReadInitResult(session_id=self.session_id))
            )
            log.debug(
                "read session opened",
                extra={
                    "session": self.session_id,
                    "topics": ",".join(map(short_topic, topics)),
                    "consumer": self.consumer,
                },
            )
            for t in topics:
                if self.consumer:
                    g = self.broker.group(t, self.consumer)
                    self._groups.append(g)
                    g.join(self)
                else:
                    for p in range(self.broker.topic(t).partitions):
                        self.assign(t, p)
            async for req in requests:
                kind = req.WhichOneof("kind")
                if kind == "credit":
                    self._add_credit(req.credit.bytes)
                elif kind == "commit":
                    self._commit(req.commit)
                elif kind == "released":
                    self._released(req.released.assignment_id)
                else:
                    raise BadRequestError(f"unexpected {kind} on a read stream")
            # client half-closed: let commits finish so their acks go out
            await self._drain_commits()
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._fail(err)

    async def _send(self) -> None:
        while True:
            msg = await self._out.get()
            if msg is None:
                return
            try:
                await self.context.write(msg)
            except Exception:
                return

    def _add_credit(self, n: int) -> None:
        if n < 0:
            raise BadRequestError("credit must not be negative")
        self._credit += n
        if self._credit > 0:
            self._credit_event.set()

    async def _drain_commits(self) -> None:
        tasks = [t for a in self._assignments.values() for t in a.commits]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # GroupMember -------------------------------------------------------------

    def assign(self, topic: str, partition: int) -> None:
        actor = self.broker.actor(topic, partition)
        committed = (
            self.broker.committed_offset(topic, partition, self.consumer) if self.consumer else None
        )
        if self.start == pb.START_LATEST:
            offset = actor.end_offset
        elif self.start == pb.START_EARLIEST or not self.consumer:
            offset = actor.start_offset
            if self.read_from_ms:
                offset = actor.log.offset_for_time(self.read_from_ms)
        else:
            consumer = self.broker.consumer(topic, self.consumer)
            offset = self.broker.read_start(
                topic, partition, self.consumer, self.read_from_ms or consumer.read_from_ms
            )
        a = _Assignment(next(_assignment_ids), topic, partition, offset)
        a.group = next((g for g in self._groups if g.topic == topic), None)
        self._assignments[a.id] = a
        self._by_tp[(topic, partition)] = a
        self._out.put_nowait(
            pb.ReadResponse(
                assigned=pb.PartitionAssigned(
                    assignment_id=a.id,
                    topic=short_topic(topic),
                    partition=partition,
                    read_offset=offset,
                    committed_offset=committed if committed is not None else actor.start_offset,
                    start_offset=actor.start_offset,
                    end_offset=actor.end_offset,
                )
            )
        )
        a.task = asyncio.get_running_loop().create_task(self._pump(a))

    def revoke(self, topic: str, partition: int, graceful: bool) -> None:
        a = self._by_tp.get((topic, partition))
        if a is None:
            return
        a.revoking = True
        if a.task is not None:
            a.task.cancel()
        self._out.put_nowait(
            pb.ReadResponse(revoked=pb.PartitionRevoked(assignment_id=a.id, graceful=graceful))
        )
        if not graceful:
            self._forget(a)

    def _forget(self, a: _Assignment) -> None:
        self._assignments.pop(a.id, None)
        if self._by_tp.get((a.topic, a.partition)) is a:
            del self._by_tp[(a.topic, a.partition)]

    def _released(self, assignment_id: int) -> None:
        a = self._assignments.get(assignment_id)
        if a is None:
            return
        self._forget(a)
        if a.group is not None:
            a.group.released(self.session_id, a.partition)

    def _commit(self, c: pb.ReadCommit) -> None:
        a = self._assignments.get(c.assignment_id)
        if a is None:
            raise BadRequestError(
                f"commit for assignment {c.assignment_id}, which this session does not hold"
            )
        if not self.consumer:
            raise BadRequestError("a read session without a consumer cannot commit")

        async def do() -> None:
            try:
                await self.broker.commit_offset(a.topic, a.partition, self.consumer, c.offset)
                committed = self.broker.committed_offset(a.topic, a.partition, self.consumer)
                self._out.put_nowait(
                    pb.ReadResponse(
                        commit_ack=pb.CommitAck(assignment_id=a.id, committed_offset=committed or 0)
                    )
                )
            except WeirError as err:
                self._fail(err)

        t = asyncio.get_running_loop().create_task(do())
        a.commits.add(t)
        t.add_done_callback(a.commits.discard)

    async def _pump(self, a: _Assignment) -> None:
        """Send stored chunks of one partition as data arrives and credit allows."""
        actor = self.broker.actor(a.topic, a.partition)
        try:
            while True:
                if actor.end_offset <= a.offset:
                    await actor.wait_for_data(a.offset, None)
                while self._credit <= 0:
                    self._credit_event.clear()
                    await self._credit_event.wait()
                res = actor.read(a.offset, min(self._credit, MAX_CHUNK_BYTES))
                if not res.chunks:
                    if res.next_offset > a.offset:
                        a.offset = res.next_offset
                    else:
                        await asyncio.sleep(0)
                    continue
                n = res.nbytes
                self._credit -= n
                self.broker.observer.on_read(a.topic, a.partition, n)
                self._out.put_nowait(
                    RawReadData(a.id, res.chunks, res.next_offset, res.end_offset, n)
                )
                a.offset = res.next_offset
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._fail(err)


def add_to_server(servicer: NativeService, server: grpc.aio.Server) -> None:
    """Register every method of weir.proto, the bulk ones with the hand-rolled wire codec,
    each behind the authentication check (`weir.protocols.native.auth`) but Login.

    Built from the service descriptor, so a method added to the .proto is served
    (with generated serialization, and authenticated) without touching this function.
    """
    overrides: dict[str, dict[str, Any]] = {
        "StreamWrite": {"request_deserializer": decode_write_request},
        "StreamRead": {"response_serializer": encode_read_response},
        "ReadRange": {"response_serializer": encode_range_response},
    }
    service = pb.DESCRIPTOR.services_by_name["Weir"]
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for m in service.methods:
        inp = getattr(pb, m.input_type.name)
        out = getattr(pb, m.output_type.name)
        kwargs: dict[str, Any] = {
            "request_deserializer": inp.FromString,
            "response_serializer": out.SerializeToString,
            **overrides.get(m.name, {}),
        }
        make = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[(m.client_streaming, m.server_streaming)]
        behavior = getattr(servicer, m.name)
        if m.name not in PUBLIC_METHODS:
            behavior = guard(servicer.security, behavior, client_streaming=m.client_streaming)
        handlers[m.name] = make(behavior, **kwargs)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
