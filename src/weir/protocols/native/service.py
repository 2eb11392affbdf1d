"""The native front: weir.proto over grpc.aio, batches in and out untouched.

The unary calls are here; the streams are sessions of their own modules:
`write_session.WriteSession` (StreamWrite), `read_session.ReadSession`
(StreamRead), `subscriptions.SubscribeSession` (Subscribe).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from weir.broker.broker import Broker
from weir.broker.cluster.ownership import zk_reachable
from weir.broker.topic_admin import UNSET
from weir.broker.topics import PERSISTENT, ConsumerConfig, TopicConfig, canonical_topic, short_topic
from weir.errors import (
    BadRequestError,
    UnavailableError,
    WeirError,
)
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native import weir_pb2_grpc as pb_grpc
from weir.protocols.native.auth import PUBLIC_METHODS, guard
from weir.protocols.native.compaction_service import CompactionCalls
from weir.protocols.native.policy_values import from_wire, to_wire
from weir.protocols.native.read_session import MAX_CHUNK_BYTES, ReadSession
from weir.protocols.native.security_methods import SecurityMethods
from weir.protocols.native.status import CODE_KEY, grpc_status
from weir.protocols.native.subscriptions import SubscriptionRpcs
from weir.protocols.native.tenancy_service import TenancyCalls
from weir.protocols.native.transactions import TransactionCalls
from weir.protocols.native.unary import unary as _unary
from weir.protocols.native.wire import (
    RawRangeResponse,
    decode_write_request,
    encode_range_response,
    encode_read_response,
)
from weir.protocols.native.write_session import WriteSession
from weir.security import Security, current_principal
from weir.security.grants import Permission
from weir.security.tls import peer_host
from weir.storage.codecs import codec_name

log = logging.getLogger("weir.native")


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
                stable_offset=p.stable_offset,
                delivered_messages=p.delivered_messages,
                dropped_messages=p.dropped_messages,
            )
            for p in broker.partitions(cfg.name)
        ],
        created_at_ms=cfg.created_at_ms,
        kind=cfg.kind,
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


class NativeService(
    TransactionCalls,
    CompactionCalls,
    TenancyCalls,
    SubscriptionRpcs,
    SecurityMethods,
    pb_grpc.WeirServicer,
):
    """The gRPC servicer of weir.proto (subscriptions: `weir.protocols.native.subscriptions`,
    tenants and namespaces: `weir.protocols.native.tenancy_service`, security:
    `weir.protocols.native.security_methods`, transactions:
    `weir.protocols.native.transactions`)."""

    def __init__(
        self,
        broker: Broker,
        stopping: asyncio.Event | None = None,
        security: Security | None = None,
        native_tcp_port: Callable[[], int] | None = None,
    ) -> None:
        self.broker = broker
        self.stopping = stopping or asyncio.Event()
        self.security = security if security is not None else Security.for_broker(broker)
        # the native TCP front's port once it listens (0: off); the front starts after this
        self._native_tcp_port = native_tcp_port or (lambda: 0)

    @_unary
    async def DescribeServer(
        self, request: pb.DescribeServerRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerDescription:
        return pb.ServerDescription(native_tcp_port=self._native_tcp_port())

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

    def _allow(
        self, permission: Permission | None, topic: str, operation: str, group: str = ""
    ) -> None:
        """Authorization of the caller for ``operation`` on ``topic`` (and under consumer
        group ``group``, when given), before either is looked up."""
        principal = current_principal.get()
        self.security.authorize(principal, permission, canonical_topic(topic), operation)
        if group:
            self.security.authorize_group(principal, group, operation)

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
            kind=request.kind or PERSISTENT,
        )
        return describe(self.broker, cfg)

    @_unary
    async def DescribeTopic(
        self, request: pb.DescribeTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.TopicDescription:
        self._allow(None, request.topic, "describe")
        return describe(self.broker, self.broker.topic(request.topic))

    @_unary
    async def Lookup(
        self, request: pb.LookupRequest, context: grpc.aio.ServicerContext
    ) -> pb.LookupResponse:
        self._allow(None, request.topic, "describe")
        owners = await self.broker.owners(request.topic, list(request.partitions))
        return pb.LookupResponse(
            brokers=await self._live_native_endpoints(),
            partitions=[
                pb.PartitionOwner(
                    partition=o.partition,
                    broker=o.broker,
                    generation=o.generation,
                    endpoints=dict(o.endpoints),
                    local=o.local,
                )
                for o in owners
            ],
        )

    async def _live_native_endpoints(self) -> list[str]:
        """The native endpoints of the cluster's live brokers, for a client to ask when its
        own broker dies (none in embedded mode, nor while ZooKeeper cannot be reached: the
        lookup's owners are still worth answering)."""
        cluster = self.broker.cluster
        if cluster is None:
            return []
        try:
            with zk_reachable("listing the live brokers"):
                live = await cluster.live_brokers()
        except UnavailableError:
            return []
        return sorted(eps["native"] for eps in live.values() if eps.get("native"))

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
        self._allow(Permission.CONSUME, request.topic, "describe a consumer of", request.consumer)
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
        self._allow(Permission.CONSUME, request.topic, "commit an offset of", request.consumer)
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

    @_unary
    async def OffloadTopic(
        self, request: pb.OffloadTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.OffloadTopicResponse:
        self._allow(Permission.ADMIN, request.topic, "offload")
        copied = await self.broker.offload_topic(request.topic, force=request.force)
        return pb.OffloadTopicResponse(copied=[copied[p] for p in sorted(copied)])

    @_unary
    async def TierStatus(
        self, request: pb.TierStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.TierStatusResponse:
        self._allow(Permission.CONSUME, request.topic, "describe the tier of")
        parts = [
            pb.PartitionTier(
                partition=st.partition,
                start_offset=st.start_offset,
                end_offset=st.end_offset,
                local_bytes=st.local_bytes,
                remote_bytes=st.remote_bytes,
                first_local_offset=st.first_local_offset,
                segments=[
                    pb.TierSegment(
                        first_offset=a,
                        end_offset=z,
                        object_key=k,
                        object_size=n,
                        object_crc=c,
                        transactional=t,
                        object_first_offset=oa,
                        object_end_offset=oz,
                    )
                    for a, z, k, n, c, t, oa, oz in st.segments
                ],
            )
            for st in self.broker.tier_status(request.topic)
        ]
        return pb.TierStatusResponse(
            partitions=parts,
            store=self.broker.tier_description(),
            last_error=self.broker.tier_last_error,
        )

    # ------------------------------------------------------------------ range read

    async def ReadRange(
        self, request: pb.ReadRangeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ReadRangeResponse | RawRangeResponse]:
        try:
            self._allow(Permission.CONSUME, request.topic, "read")
            actor = self.broker.actor(request.topic, request.partition)
            compacted = request.compacted
            if request.from_offset < 0:
                raise BadRequestError(f"from_offset must be >= 0, got {request.from_offset}")
            committed = request.read_committed
            end = actor.stable_offset if committed else actor.end_offset
            to = end if request.to_offset < 0 else min(request.to_offset, end)
            budget = max(1, min(request.max_bytes or MAX_CHUNK_BYTES, 64 << 20))
            pos = request.from_offset
            sent = -1  # next_offset of the last response sent
            while pos < to:
                res = await (
                    self.broker.read_compacted(
                        actor.topic, actor.partition, pos, budget, to, committed=committed
                    )
                    if compacted
                    else actor.read_async(pos, budget, to, committed=committed)
                )
                if not res.chunks:
                    if res.next_offset > pos:  # only transaction markers or aborted messages
                        pos = res.next_offset
                        continue
                    break
                self.broker.observer.on_read(actor.topic, actor.partition, res.nbytes)
                yield RawRangeResponse(
                    res.chunks, res.first_offset, res.next_offset, res.start_offset, res.end_offset
                )
                sent = pos = res.next_offset
            if sent < max(pos, actor.start_offset):
                # nothing sent, or what came last was left out (transaction markers, aborted
                # messages): an empty answer says where the range read up to
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


def _none(v: Any) -> Any:
    return None if v is UNSET else v


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
