"""``Ydb.Topic.V1.TopicService``: the unary scheme and offset calls, and the two streams.

Unary calls answer with an Operation whose status is SUCCESS and whose result
is Any-packed (the SDK unpacks it by type), or the error's YDB status. The
streams are handed to `WriteSession` and `ReadSession`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import Message

from weir.broker.broker import Broker
from weir.broker.cluster.broker_mode import node_id
from weir.broker.topic_admin import UNSET
from weir.broker.topics import TopicConfig
from weir.broker.transactions.facade import TxnOffset
from weir.errors import (
    AlreadyExistsError,
    BadRequestError,
    UnavailableError,
    UnknownConsumerError,
)
from weir.protocols.ydb import topic_settings as ts
from weir.protocols.ydb.auth import Authenticator
from weir.protocols.ydb.conversions import (
    database_of,
    names_database,
    set_ts,
    topic_codecs,
    ydb_codecs,
)
from weir.protocols.ydb.discovery import node_of
from weir.protocols.ydb.protos import (
    StreamRead,
    StreamWrite,
    ydb_scheme_pb2,
    ydb_topic_pb2,
    ydb_topic_v1_pb2_grpc,
)
from weir.protocols.ydb.query_service import txn_id_of
from weir.protocols.ydb.read_session import ReadSession
from weir.protocols.ydb.shutdown import ServerState, Shutdown
from weir.protocols.ydb.status import SchemeError, end_stream, operation
from weir.protocols.ydb.write_session import WriteSession
from weir.security.grants import Permission

log = logging.getLogger("weir.ydb")
OWNER = "weir"

Handler = Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[Any]]


def _unary(response: Callable[..., Any]) -> Callable[[Handler], Handler]:
    """Check the caller's ticket, run the call, and wrap its result or error in ``response``."""

    def wrap(fn: Handler) -> Handler:
        @functools.wraps(fn)
        async def call(self: TopicServicer, request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                self.check(context)
                result: Message | None = await fn(self, request, context)
            except Exception as err:
                return response(operation=operation(error=err))
            return response(operation=operation(result))

        return call

    return wrap


def _entry(cfg: TopicConfig, name: str = "") -> Any:
    return ydb_scheme_pb2.Entry(
        name=name or cfg.name.rsplit("/", 1)[-1], owner=OWNER, type=ydb_scheme_pb2.Entry.TOPIC
    )


class TopicServicer(ydb_topic_v1_pb2_grpc.TopicServiceServicer):
    """The topic calls of the YDB SDK, translated into broker calls."""

    def __init__(self, broker: Broker, auth: Authenticator, server: ServerState) -> None:
        self.broker = broker
        self.auth = auth
        self.server = server
        self.shutdown = Shutdown(server)

    def check(self, context: grpc.aio.ServicerContext) -> None:
        if self.server.stopping:
            raise UnavailableError("server is shutting down")
        self.auth.check(context)

    # ------------------------------------------------------------------ scheme

    @_unary(ydb_topic_pb2.CreateTopicResponse)
    async def CreateTopic(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        database = database_of(context)
        if names_database(request.path, database):
            raise SchemeError(f"{request.path!r} names the database, not a topic in it")
        self.auth.allow(Permission.ADMIN, request.path, database, "create")
        ts.check_create(request)
        parts = request.partitioning_settings.min_active_partitions
        if parts < 0:
            raise BadRequestError(f"min_active_partitions must be positive, got {parts}")
        scaling = ts.scaling_of(request)
        ts.check_max_partitions(parts or self.broker.config.default_partitions, scaling)
        attributes = ts.attribute_settings(request.attributes)
        try:
            await self.broker.create_topic(
                request.path,
                partitions=parts or None,
                retention_ms=ts.retention_ms(request.retention_period)
                if request.HasField("retention_period")
                else UNSET,
                retention_bytes=ts.retention_bytes(request.retention_storage_mb)
                if request.retention_storage_mb
                else UNSET,
                max_partition_bytes=attributes.get("max_partition_bytes"),
                codecs=topic_codecs(request.supported_codecs.codecs),
                consumers=[ts.consumer_config(c) for c in request.consumers],
                scaling=scaling,
                database=database,
            )
        except AlreadyExistsError:
            # YDB: "path exist, request accepts it": SUCCESS, and the topic keeps its settings
            log.debug("create of existing topic %r: nothing to do", request.path)
        return ydb_topic_pb2.CreateTopicResult()

    @_unary(ydb_topic_pb2.DescribeTopicResponse)
    async def DescribeTopic(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.auth.allow(None, request.path, database_of(context), "describe")
        cfg = self.broker.topic(request.path, database_of(context))
        result = ydb_topic_pb2.DescribeTopicResult(
            self=_entry(cfg),
            supported_codecs=ydb_topic_pb2.SupportedCodecs(codecs=ydb_codecs(cfg.codecs)),
            consumers=[ts.consumer_proto(c) for c in cfg.consumers.values()],
        )
        ts.fill_settings(result, cfg)
        total = 0
        last_writes = []
        for p in self.broker.partitions(cfg.name):
            info = result.partitions.add(partition_id=p.partition, active=True)
            st = info.partition_stats
            st.partition_offsets.start = p.start_offset
            st.partition_offsets.end = p.end_offset
            st.store_size_bytes = p.size_bytes
            if p.last_write_ms:
                set_ts(st.last_write_time, p.last_write_ms)
                last_writes.append(p.last_write_ms)
            st.partition_node_id = node_of(self.broker.cluster)
            info.partition_location.node_id = node_of(self.broker.cluster)
            info.partition_location.generation = p.generation
            total += p.size_bytes
        await self._list_elsewhere(cfg, result.partitions)
        result.topic_stats.store_size_bytes = total
        if last_writes:
            set_ts(result.topic_stats.min_last_write_time, min(last_writes))
        return result

    @_unary(ydb_topic_pb2.AlterTopicResponse)
    async def AlterTopic(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        database = database_of(context)
        self.auth.allow(Permission.ADMIN, request.path, database, "alter")
        cfg = self.broker.topic(request.path, database)
        ts.check_alter(request)
        aps = request.alter_partitioning_settings
        partitions = (
            aps.set_min_active_partitions
            if request.HasField("alter_partitioning_settings")
            and aps.HasField("set_min_active_partitions")
            else None
        )
        attributes = ts.attribute_settings(request.alter_attributes)
        add = [ts.consumer_config(c) for c in request.add_consumers]
        for ac in request.alter_consumers:
            current = cfg.consumers.get(ac.name)
            if current is None:
                raise UnknownConsumerError(f"consumer {ac.name!r} is not registered")
            add.append(ts.altered_consumer(current, ac))
        await self.broker.alter_topic(
            cfg.name,
            partitions=partitions,
            retention_ms=ts.retention_ms(request.set_retention_period)
            if request.HasField("set_retention_period")
            else UNSET,
            retention_bytes=ts.retention_bytes(request.set_retention_storage_mb)
            if request.HasField("set_retention_storage_mb")
            else UNSET,
            max_partition_bytes=attributes.get("max_partition_bytes", UNSET),
            codecs=topic_codecs(request.set_supported_codecs.codecs)
            if request.HasField("set_supported_codecs")
            else None,
            add_consumers=add,
            drop_consumers=list(request.drop_consumers),
            scaling=ts.altered_scaling(cfg.scaling, request),
        )
        return ydb_topic_pb2.AlterTopicResult()

    @_unary(ydb_topic_pb2.DropTopicResponse)
    async def DropTopic(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.auth.allow(Permission.ADMIN, request.path, database_of(context), "drop")
        await self.broker.drop_topic(request.path, database_of(context))
        return ydb_topic_pb2.DropTopicResult()

    # ------------------------------------------------------------------ consumers

    @_unary(ydb_topic_pb2.DescribeConsumerResponse)
    async def DescribeConsumer(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.auth.allow(
            Permission.CONSUME,
            request.path,
            database_of(context),
            "describe a consumer of",
            request.consumer,
        )
        cfg = self.broker.topic(request.path, database_of(context))
        consumer = self.broker.consumer(cfg.name, request.consumer)
        # YDB answers with the topic's own entry, named "<topic>/<consumer>"
        result = ydb_topic_pb2.DescribeConsumerResult(
            self=_entry(cfg, f"{cfg.name.rsplit('/', 1)[-1]}/{consumer.name}"),
            consumer=ts.consumer_proto(consumer),
        )
        stats = {p.partition: p for p in self.broker.partitions(cfg.name)}
        for c in self.broker.describe_consumer(cfg.name, request.consumer):
            p = stats[c.partition]
            info = result.partitions.add(partition_id=c.partition, active=True)
            st = info.partition_stats
            st.partition_offsets.start = p.start_offset
            st.partition_offsets.end = p.end_offset
            st.store_size_bytes = p.size_bytes
            if p.last_write_ms:
                set_ts(st.last_write_time, p.last_write_ms)
            st.partition_node_id = node_of(self.broker.cluster)
            info.partition_consumer_stats.committed_offset = c.committed_offset
            info.partition_location.node_id = node_of(self.broker.cluster)
            info.partition_location.generation = p.generation
        await self._list_elsewhere(cfg, result.partitions)
        return result

    async def _list_elsewhere(self, cfg: TopicConfig, partitions: Any) -> None:
        """Replicated mode: add to ``partitions`` (listed with stats: those served here)
        every other partition of the topic, with its owner's node as its location (no
        location while it moves) and no stats: the owner has them (docs/cluster.md)."""
        if self.broker.cluster is None:
            return
        listed = {p.partition_id for p in partitions}
        missing = [p for p in range(cfg.partitions) if p not in listed]
        if not missing:
            return
        for o in await self.broker.owners(cfg.name, missing):
            info = partitions.add(partition_id=o.partition, active=True)
            if o.broker:
                info.partition_location.node_id = node_id(o.broker)
                info.partition_location.generation = o.generation
        partitions.sort(key=lambda p: p.partition_id)

    @_unary(ydb_topic_pb2.CommitOffsetResponse)
    async def CommitOffset(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.auth.allow(
            Permission.CONSUME,
            request.path,
            database_of(context),
            "commit an offset of",
            request.consumer,
        )
        cfg = self.broker.topic(request.path, database_of(context))
        # An explicit commit sets the offset, backwards too (YDB's semantics: a rewind).
        await self.broker.commit_offset(
            cfg.name,
            request.partition_id,
            request.consumer,
            request.offset,
            allow_backwards=True,
        )
        return ydb_topic_pb2.CommitOffsetResult()

    @_unary(ydb_topic_pb2.UpdateOffsetsInTransactionResponse)
    async def UpdateOffsetsInTransaction(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> Any:
        """The consumer's offsets move over the ranges read when the transaction commits.

        Each partition's ranges must run on, without a gap, from where the consumer
        (or this transaction) stands, and not past the partition's end: all are
        checked before any is taken."""
        database = database_of(context)
        txn_id = txn_id_of(request.tx.id)
        owner = request.tx.session
        self.broker.transaction(txn_id, owner)
        offsets = []
        for t in request.topics:
            self.auth.allow(
                Permission.CONSUME, t.path, database, "commit an offset of", request.consumer
            )
            cfg = self.broker.topic(t.path, database)
            for p in t.partitions:
                actor = self.broker.actor(cfg.name, p.partition_id)
                ranges = sorted((r.start, r.end) for r in p.partition_offsets)
                if not ranges:
                    continue
                at = self.broker.transaction_offset(
                    txn_id, cfg.name, p.partition_id, request.consumer, owner
                )
                for start, end in ranges:
                    if start < 0 or end < start:
                        raise BadRequestError(f"bad offset range [{start}, {end})")
                    if start > at:
                        raise BadRequestError(
                            f"offsets {at}..{start} of {t.path}/{p.partition_id} were not "
                            f"committed before range [{start}, {end}) (a gap)"
                        )
                    at = max(at, end)
                if at > actor.end_offset:
                    raise BadRequestError(
                        f"cannot commit offset {at} on {t.path}/{p.partition_id}: beyond the end "
                        f"offset {actor.end_offset}"
                    )
                offsets.append(TxnOffset(cfg.name, p.partition_id, request.consumer, at))
        await self.broker.add_transaction_offsets(txn_id, offsets, owner)
        return ydb_topic_pb2.UpdateOffsetsInTransactionResult()

    # ------------------------------------------------------------------ streams

    async def StreamWrite(
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> None:
        if self.server.stopping:
            await end_stream(
                context, StreamWrite.FromServer, UnavailableError("server is shutting down")
            )
            return
        session = WriteSession(self.broker, self.auth, self.shutdown, context, database_of(context))
        with self.auth.watching(session):
            await session.run(request_iterator)

    async def StreamRead(
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> None:
        if self.server.stopping:
            await end_stream(
                context, StreamRead.FromServer, UnavailableError("server is shutting down")
            )
            return
        session = ReadSession(self.broker, self.auth, self.shutdown, context, database_of(context))
        with self.auth.watching(session):
            await session.run(request_iterator)
