"""The asyncio SDK: `weir.aio.Client`, `Writer`, `Reader`, `SubscriptionConsumer` (twins of the
sync ones in `weir`)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from weir.access_mode import AccessMode
from weir.client.admin import (
    Consumer,
    ConsumerInfo,
    TopicInfo,
    consumer_info,
    consumer_settings,
    topic_differences,
    topic_info,
)
from weir.client.chunks import DEFAULT_CHUNK_EXPIRY
from weir.client.connection import Connection
from weir.client.credentials import CredentialsArg
from weir.client.deliver_at import with_deliver_at
from weir.client.messages import Batch, Message
from weir.client.owner_readers import OwnerReaders
from weir.client.owners import PartitionOwner
from weir.client.range_reads import AsyncRangeReads, RangeChunk
from weir.client.reader import PartitionSession, ReaderCore, Start
from weir.client.routed_writer import RoutedWriterCore
from weir.client.routing import CustomRouter, parse_routing
from weir.client.security_admin import AsyncSecurityCalls
from weir.client.subscription import (
    DeadLetterPolicy,
    ReceivedMessage,
    SubscriptionConsumer,
)
from weir.client.subscription_admin import AsyncSubscriptionCalls
from weir.client.tenancy import AsyncTenancyCalls
from weir.client.tier_admin import AsyncTierCalls
from weir.client.timestamps import to_ms
from weir.client.tls import TlsArg
from weir.client.transaction import Transaction
from weir.client.write_columns import ArrowColumn, IntColumn
from weir.client.writer import WriterCore
from weir.client.writer_settings import WriteResult, writer_settings
from weir.errors import (
    AlreadyExistsError,
    TransactionCommittedError,
    WeirError,
    WeirTimeoutError,
)
from weir.hashing import KeyHash
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.policy_values import to_wire
from weir.storage.codecs import Codec

DEFAULT_ENDPOINT = "127.0.0.1:2136"
__all__ = ["DEFAULT_ENDPOINT", "Client", "RangeChunk", "Reader", "Writer", "to_ms"]


def _set_limit(req: Any, name: str, value: int | object | None) -> None:
    if value is _KEEP:
        return
    setattr(req, name, -1 if value is None else int(value))  # type: ignore[call-overload]


_KEEP: Any = object()


class Writer:
    """Asynchronous writer; see `weir.client.writer` for the semantics."""

    def __init__(self, core: WriterCore | RoutedWriterCore) -> None:
        self._core = core

    @property
    def partition(self) -> int | None:
        return self._core.partition

    @property
    def producer_epoch(self) -> int | None:
        """The topic's producer epoch when this writer connected (it grows each time an
        exclusive producer takes the topic); None before the first connection."""
        return self._core.producer_epoch

    @property
    def last_seq_no(self) -> int | None:
        """The producer's last seq_no the server had when this writer connected."""
        return self._core.last_seq_no

    @property
    def producer_id(self) -> str:
        """The writer's producer id: the one given, else generated (resends stay safe)."""
        return self._core.producer_id

    @property
    def last_error(self) -> WeirError | None:
        """The error (server down, storage full, overloaded...) behind the latest reconnect;
        the writer keeps retrying until its delivery timeout, this says why it is waiting."""
        return self._core.last_error

    @property
    def reconnects(self) -> int:
        """How many times this writer has reconnected (after a lost stream or a refusal)."""
        return self._core.reconnects

    @property
    def unacknowledged(self) -> int:
        """Messages written and not yet acknowledged (lost, when the writer has failed)."""
        return self._core.unacknowledged

    @property
    def max_message_bytes(self) -> int:
        """The largest message (data plus key) this writer takes: its setting, lowered to
        the server's limit once connected."""
        return self._core.max_message_bytes

    async def wait_init(self, timeout: float | None = 30.0) -> Writer:
        await self._core.wait_init(timeout)
        return self

    async def write(
        self,
        data: bytes | str,
        *,
        key: bytes | str | None = None,
        headers: Mapping[str, str] | None = None,
        seq_no: int | None = None,
        created_at: dt.datetime | int | None = None,
        deliver_at: dt.datetime | int | None = None,
        deliver_after: float | dt.timedelta | None = None,
        timeout: float | None = None,
    ) -> None:
        """Buffer a message; returns at once unless the buffer is full."""
        if deliver_at is not None or deliver_after is not None:  # (a call less per write)
            headers = with_deliver_at(headers, deliver_at, deliver_after)
        await self._core.write_async(data, key, headers, seq_no, created_at, timeout)

    async def write_many(
        self,
        values: Sequence[bytes | str] | ArrowColumn,
        *,
        keys: Sequence[bytes | str | None] | ArrowColumn | None = None,
        headers: Sequence[Mapping[str, str] | None] | None = None,
        seq_nos: Sequence[int] | IntColumn | None = None,
        created_at: Sequence[int] | IntColumn | int | None = None,
        timeout: float | None = None,
    ) -> None:
        """Buffer many messages in one call (columns of equal length): for bulk producers.

        ``values`` and ``keys`` may be pyarrow arrays (binary or string; a null key is
        no key) and ``seq_nos`` / ``created_at`` numpy arrays: they are then checked
        once per column and encoded straight from Arrow's buffers, with no Python
        object per message (the same batches, rules and errors as lists)."""
        await self._core.write_many_async(values, keys, headers, seq_nos, created_at, timeout)

    async def write_future(
        self,
        data: bytes | str,
        *,
        key: bytes | str | None = None,
        headers: Mapping[str, str] | None = None,
        seq_no: int | None = None,
        created_at: dt.datetime | int | None = None,
        deliver_at: dt.datetime | int | None = None,
        deliver_after: float | dt.timedelta | None = None,
        timeout: float | None = None,
    ) -> asyncio.Future[WriteResult]:
        """Buffer a message; the returned future resolves with its WriteResult."""
        if deliver_at is not None or deliver_after is not None:  # (a call less per write)
            headers = with_deliver_at(headers, deliver_at, deliver_after)
        fut: asyncio.Future[WriteResult] = asyncio.get_running_loop().create_future()
        await self._core.write_async(data, key, headers, seq_no, created_at, timeout, fut)
        return fut

    async def write_with_result(
        self,
        data: bytes | str,
        *,
        key: bytes | str | None = None,
        headers: Mapping[str, str] | None = None,
        seq_no: int | None = None,
        created_at: dt.datetime | int | None = None,
        deliver_at: dt.datetime | int | None = None,
        deliver_after: float | dt.timedelta | None = None,
        timeout: float | None = None,
    ) -> WriteResult:
        """Write and wait for the ack: partition, offset and seq_no (or skipped)."""
        if deliver_at is not None or deliver_after is not None:  # (a call less per write)
            headers = with_deliver_at(headers, deliver_at, deliver_after)
        fut = await self.write_future(
            data, key=key, headers=headers, seq_no=seq_no, created_at=created_at, timeout=timeout
        )
        return await fut

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every message written so far is acknowledged."""
        await self._core.flush(timeout)

    async def close(self, timeout: float | None = None) -> None:
        """Flush, then stop; later calls raise ClosedError."""
        await self._core.close(timeout)

    async def __aenter__(self) -> Writer:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if e is None:
            await self.close()
            return
        # an error is on its way out already (often this writer's own): do not mask it
        with contextlib.suppress(WeirError):
            await self.close()


class Reader:
    """Asynchronous reader; see `weir.client.reader` for the semantics."""

    def __init__(self, core: ReaderCore | OwnerReaders) -> None:
        self._core = core
        self._batch: Batch | None = None
        self._pos = 0

    @property
    def connected(self) -> bool:
        """Whether the reader has a live stream now (False while it reconnects)."""
        return self._core.connected

    @property
    def disconnected_for(self) -> float:
        """Seconds since the stream was lost, 0 while connected."""
        return self._core.disconnected_for

    @property
    def last_error(self) -> WeirError | None:
        """The error behind the latest reconnect (the reader retries for as long as it lives)."""
        return self._core.last_error

    @property
    def reconnects(self) -> int:
        return self._core.reconnects

    @property
    def partitions(self) -> list[PartitionSession]:
        return self._core.partitions

    async def wait_connected(self, timeout: float | None = 30.0) -> Reader:
        await self._core.wait_connected(timeout)
        return self

    async def receive_batch(self, timeout: float | None = None) -> Batch | None:
        """The next batch (None if nothing arrives within ``timeout`` seconds)."""
        return await self._core.receive_batch(timeout)

    async def receive_message(self, timeout: float | None = None) -> Message | None:
        """The next message (None if nothing arrives within ``timeout`` seconds)."""
        if self._batch is None or self._pos >= len(self._batch.messages):
            self._batch = await self._core.receive_batch(timeout)
            self._pos = 0
            if self._batch is None:
                return None
        msg = self._batch.messages[self._pos]
        self._pos += 1
        return msg

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[Message]:
        while True:
            if self._batch is not None and self._pos < len(self._batch):
                msg = await self.receive_message()  # what receive_message left of its batch
                if msg is not None:
                    yield msg
                continue
            batch = await self._core.receive_batch(None)
            if batch is None:
                continue
            # built one at a time as the loop takes them (`Batch.__iter__`); the position
            # is kept so that receive_message after a break goes on from the next one
            self._batch, self._pos = batch, 0
            for msg in batch:
                self._pos += 1
                yield msg

    def commit(
        self, item: Message | Batch, *, transaction: Transaction | None = None
    ) -> asyncio.Future[None]:
        """Commit up to and including ``item``; returns at once (the future is the ack).
        With a ``transaction`` the offset moves when it commits (await the future: it
        resolves once the transaction holds the offset)."""
        if transaction is not None:
            self._core.check_commit(item)
            return asyncio.ensure_future(transaction.commit_offsets(item, self._core.consumer))
        fut = self._core.commit(item)
        fut.add_done_callback(_consume_exception)
        return fut

    async def commit_with_ack(self, item: Message | Batch, timeout: float | None = 30.0) -> None:
        """Commit up to and including ``item`` and wait for the server's ack; no ack within
        ``timeout`` raises WeirTimeoutError (retryable: the commit may still land)."""
        try:
            await asyncio.wait_for(self._core.commit(item), timeout)
        except TimeoutError:
            raise WeirTimeoutError(
                f"commit of {item.topic}/{item.partition} up to offset {item.commit_offset - 1} "
                f"not acknowledged within {timeout:g} s"
            ) from None

    async def close(self, timeout: float | None = 10.0) -> None:
        await self._core.close(timeout)

    async def __aenter__(self) -> Reader:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


def _consume_exception(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled():
        fut.exception()


class Client(
    AsyncRangeReads, AsyncSubscriptionCalls, AsyncTenancyCalls, AsyncSecurityCalls, AsyncTierCalls
):
    """Asynchronous weir client: admin calls, writers and readers over one connection.

    >>> async with weir.aio.Client("127.0.0.1:2136") as client:
    ...     await client.create_topic("orders", partitions=4)

    ``credentials`` (``weir.aio.UserPassword(user, password)`` or a ``(user, password)``
    tuple) logs in to a server with users; every call then carries the token.
    ``tls`` (``weir.aio.Tls(ca=..., cert=..., key=...)``) or a ``grpcs://`` endpoint
    speaks TLS. ``transport="tcp"`` sends writers' and readers' streams to the server's
    native TCP port (``native_tcp.enabled``; ``tcp_endpoint``, by default the port the
    server reports, on the endpoint's host) instead of gRPC, for lower latency and less
    CPU a message; the rest (subscriptions, admin, range reads) stays on gRPC.

    A cluster's brokers may be given as ``"h1:p1,h2:p2"`` (or a list): the client talks to
    the first and asks the others (and the live brokers lookups name) when it cannot be
    reached (docs/cluster.md, "What clients do when ownership moves").
    """

    def __init__(
        self,
        endpoint: str | Sequence[str] = DEFAULT_ENDPOINT,
        *,
        credentials: CredentialsArg = None,
        tls: TlsArg = None,
        transport: str = "grpc",
        tcp_endpoint: str | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.credentials = credentials
        self.tls = tls
        self.transport = transport
        self.tcp_endpoint = tcp_endpoint
        self._conn: Connection | None = None
        self._epochs: dict[str, int] = {}  # transactional id -> this instance's epoch

    @property
    def conn(self) -> Connection:
        if self._conn is None:
            self._conn = Connection(
                self.endpoint, self.credentials, self.tls, self.transport, self.tcp_endpoint
            )
        return self._conn

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()

    # ------------------------------------------------------------------ admin

    async def create_topic(
        self,
        name: str,
        partitions: int = 0,
        *,
        retention: dt.timedelta | int | None = _KEEP,
        retention_bytes: int | None = None,
        max_partition_bytes: int | None = None,
        max_partition_messages: int | None = None,
        codecs: Iterable[str] = (),
        consumers: Iterable[Consumer | str] = (),
        policies: Mapping[str, Any] | None = None,
        kind: str = "persistent",
        exist_ok: bool = False,
        timeout: float | None = 30.0,
    ) -> TopicInfo:
        """Create a topic. ``kind="non-persistent"`` makes one whose messages go only to
        the readers and subscribers connected now, never to disk (docs/topics.md).
        ``partitions`` 0 takes the namespace's default_partitions (else
        the server's, 1). ``retention`` (timedelta or ms) left out follows the namespace
        (else the server's, 7 days), as does every policy not in ``policies`` (the topic's
        own: see docs/topics.md).

        With ``exist_ok=True`` an existing topic is returned instead of raising
        AlreadyExistsError, but only if it matches what was given (partitions,
        unless 0; retention, limits, codecs and consumers when given): a topic of
        another shape still raises AlreadyExistsError, naming the differences, so
        that a program never writes into a topic it did not expect.
        """
        consumer_list = [Consumer(c) if isinstance(c, str) else c for c in consumers]
        codec_list = list(codecs)
        req = pb.CreateTopicRequest(
            topic=name,
            partitions=partitions,
            codecs=codec_list,
            consumers=[consumer_settings(c) for c in consumer_list],
            kind=kind,
        )
        to_wire(policies or {}, req.policies)
        retention_ms: int | object | None = _KEEP
        if retention is not _KEEP:
            retention_ms = None if retention is None else to_ms(retention, "retention")
            req.retention_ms = -1 if retention_ms is None else retention_ms
        limits = {
            "retention_bytes": retention_bytes,
            "max_partition_bytes": max_partition_bytes,
            "max_partition_messages": max_partition_messages,
        }
        for attr, v in limits.items():
            if v is not None:
                setattr(req, attr, v)
        try:
            return topic_info(await self.conn.call("CreateTopic", req, timeout))
        except AlreadyExistsError:
            if not exist_ok:
                raise
        existing = await self.describe_topic(name, timeout=timeout)
        diffs = topic_differences(
            existing,
            partitions=partitions,
            retention_ms=retention_ms,
            limits=limits,
            codecs=[Codec.parse(c).name.lower() for c in codec_list],
            consumers=consumer_list,
        )
        if existing.kind != kind:
            diffs.append(f"kind {existing.kind}, not {kind}")
        if diffs:
            raise AlreadyExistsError(
                f"topic {existing.name!r} already exists with {'; '.join(diffs)}"
            )
        return existing

    async def describe_topic(self, name: str, *, timeout: float | None = 30.0) -> TopicInfo:
        return topic_info(
            await self.conn.call("DescribeTopic", pb.DescribeTopicRequest(topic=name), timeout)
        )

    async def owners(self, topic: str, *, timeout: float | None = 30.0) -> list[PartitionOwner]:
        """Which broker serves each partition of ``topic`` and where to reach it (cluster
        mode, docs/cluster.md; writers and readers follow owners on their own). An
        embedded server serves every partition itself (``local``)."""
        resp = await self.conn.call("Lookup", pb.LookupRequest(topic=topic), timeout)
        return [PartitionOwner.from_proto(o) for o in resp.partitions]

    async def alter_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        retention: dt.timedelta | int | None = _KEEP,
        retention_bytes: int | None = _KEEP,
        max_partition_bytes: int | None = _KEEP,
        max_partition_messages: int | None = _KEEP,
        codecs: Iterable[str] | None = None,
        add_consumers: Iterable[Consumer | str] = (),
        drop_consumers: Iterable[str] = (),
        policies: Mapping[str, Any] | None = None,
        inherit: Iterable[str] = (),
        timeout: float | None = 30.0,
    ) -> TopicInfo:
        """Change a topic; arguments left out stay as they are (None clears a limit).
        ``policies`` become the topic's own; those named in ``inherit`` (retention_ms too)
        follow the namespace again."""
        req = pb.AlterTopicRequest(
            topic=name,
            add_consumers=[consumer_settings(c) for c in add_consumers],
            drop_consumers=list(drop_consumers),
            inherit_policies=list(inherit),
        )
        to_wire(policies or {}, req.policies)
        if partitions is not None:
            req.partitions = partitions
        if retention is not _KEEP:
            req.retention_ms = -1 if retention is None else to_ms(retention, "retention")  # type: ignore[assignment]
        _set_limit(req, "retention_bytes", retention_bytes)
        _set_limit(req, "max_partition_bytes", max_partition_bytes)
        _set_limit(req, "max_partition_messages", max_partition_messages)
        if codecs is not None:
            req.codecs.extend(codecs)
            req.set_codecs = True
        return topic_info(await self.conn.call("AlterTopic", req, timeout))

    async def drop_topic(self, name: str, *, timeout: float | None = 30.0) -> None:
        await self.conn.call("DropTopic", pb.DropTopicRequest(topic=name), timeout)

    async def list_topics(
        self, prefix: str = "", *, timeout: float | None = 30.0
    ) -> list[TopicInfo]:
        resp = await self.conn.call("ListTopics", pb.ListTopicsRequest(prefix=prefix), timeout)
        return [topic_info(t) for t in resp.topics]

    async def describe_consumer(
        self, topic: str, consumer: str, *, timeout: float | None = 30.0
    ) -> ConsumerInfo:
        req = pb.DescribeConsumerRequest(topic=topic, consumer=consumer)
        return consumer_info(await self.conn.call("DescribeConsumer", req, timeout))

    async def commit_offset(
        self,
        topic: str,
        partition: int,
        consumer: str,
        offset: int,
        *,
        allow_backwards: bool = False,
        timeout: float | None = 30.0,
    ) -> bool:
        """Set a consumer's committed offset (the next offset it reads)."""
        req = pb.CommitOffsetRequest(
            topic=topic,
            partition=partition,
            consumer=consumer,
            offset=offset,
            allow_backwards=allow_backwards,
        )
        return bool((await self.conn.call("CommitOffset", req, timeout)).changed)

    async def offsets_for_time(
        self, topic: str, timestamp: dt.datetime | int, *, timeout: float | None = 30.0
    ) -> list[int]:
        """Per partition, the first offset written at or after ``timestamp``."""
        req = pb.OffsetsForTimeRequest(topic=topic, timestamp_ms=to_ms(timestamp, "timestamp") or 0)
        return list((await self.conn.call("OffsetsForTime", req, timeout)).offsets)

    def subscribe(
        self,
        topic: str,
        subscription: str,
        *,
        type: str = "exclusive",
        initial_position: str | dt.datetime | int = "latest",
        consumer_name: str = "",
        receiver_queue_size: int = 1000,
        ack_timeout: float | dt.timedelta | None = None,
        create: bool = True,
        dead_letter_policy: DeadLetterPolicy | None = None,
        listener: Callable[[SubscriptionConsumer, ReceivedMessage], Any] | None = None,
        on_reconnect: Callable[[WeirError], None] | None = None,
        sticky_ranges: Sequence[tuple[int, int]] | None = None,
        retry_enable: bool = False,
    ) -> SubscriptionConsumer:
        """A consumer of the durable ``subscription`` of ``topic`` (created on first use
        unless ``create=False``; call inside a running event loop).

        ``type``: "exclusive" (one consumer), "failover" (one active consumer per
        partition, ordered by ``consumer_name``), "shared" (round-robin, individual
        acks only) or "key_shared" (each key to one consumer at a time, in order).
        ``initial_position`` ("latest", "earliest", or a time: a datetime or ms since the
        epoch) applies when this call creates the subscription. ``receiver_queue_size``
        bounds the messages the server
        sends ahead; ``ack_timeout`` (seconds) redelivers what stays unacknowledged longer;
        ``dead_letter_policy`` (`weir.DeadLetterPolicy`) parks what is redelivered too often;
        ``listener(consumer, message)`` (plain or ``async def``) is called for every
        message instead of the application calling ``receive``. ``sticky_ranges``
        (key_shared only): the key-hash slots, inclusive ``(start, end)`` ranges within
        0..65535, this consumer claims (`weir.key_shared_slot(key)` says a key's slot);
        without it keys are split over the consumers automatically. ``retry_enable``:
        the consumer also takes the subscription's retry letter topic, where
        ``reconsume_later(message, delay)`` sends messages to come back after a delay.
        See docs/subscriptions.md.
        """
        consumer = SubscriptionConsumer(
            self.conn,
            topic,
            subscription,
            type=type,
            initial_position=initial_position,
            consumer_name=consumer_name,
            receiver_queue_size=receiver_queue_size,
            ack_timeout=ack_timeout,
            create=create,
            dead_letter_policy=dead_letter_policy,
            on_reconnect=on_reconnect,
            sticky_ranges=sticky_ranges,
            retry_enable=retry_enable,
        ).start()
        if listener is not None:
            consumer.listen(listener)
        return consumer

    # ------------------------------------------------------------------ transactions

    def transaction(
        self,
        *,
        transactional_id: str | None = None,
        key: str | None = None,
        timeout: float | dt.timedelta | None = None,
    ) -> Transaction:
        """A transaction (`weir.client.transaction`): ``async with client.transaction() as
        tx:`` begins it, commits it at the end of the block, aborts it on an exception.
        ``transactional_id`` makes this client an instance of that transactional producer
        (one transaction open at a time; a newer instance fences this one); ``key`` joins
        the producer's open transaction of the same key (several processes writing into
        one). ``timeout`` (seconds): the server aborts it when it runs out (default: the
        server's transactions.timeout_ms)."""
        return Transaction(self, transactional_id=transactional_id, key=key, timeout=timeout)

    async def commit_transaction(
        self, transaction_id: int, *, timeout: float | None = 60.0
    ) -> None:
        """Commit a transaction by its id (one another process began, such as the joinable
        transaction of a Spark micro-batch). "Committed already" counts as done: a commit
        whose answer was lost can be sent again."""
        req = pb.EndTransactionRequest(transaction_id=transaction_id)
        with contextlib.suppress(TransactionCommittedError):
            await self.conn.call("CommitTransaction", req, timeout)

    async def abort_transaction(self, transaction_id: int, *, timeout: float | None = 30.0) -> None:
        """Abort a transaction by its id."""
        req = pb.EndTransactionRequest(transaction_id=transaction_id)
        await self.conn.call("AbortTransaction", req, timeout)

    async def _producer_epoch(self, transactional_id: str, timeout: float | None) -> int:
        """This client's epoch as an instance of ``transactional_id`` (the first call starts
        the instance on the server, fencing older ones)."""
        epoch = self._epochs.get(transactional_id)
        if epoch is None:
            req = pb.InitTransactionsRequest(transactional_id=transactional_id)
            epoch = (await self.conn.call("InitTransactions", req, timeout)).epoch
            self._epochs[transactional_id] = epoch
        return epoch

    # ------------------------------------------------------------------ streams

    def writer(
        self,
        topic: str,
        *,
        producer_id: str | None = None,
        partition: int | None = None,
        codec: str | Codec = Codec.RAW,
        access_mode: str | AccessMode = AccessMode.SHARED,
        routing: str | CustomRouter | None = None,
        key_hash: str | KeyHash = KeyHash.MURMUR3,
        **settings: Any,
    ) -> Writer:
        """A writer to ``topic`` (call inside a running event loop).

        ``producer_id`` names the producer: it sticks to one partition and its
        seq_nos continue across writers; without one a fresh id is generated, so
        resends after a reconnect are safe either way. Settings (see
        `weir.client.writer.WriterSettings`): max_message_bytes (default: the
        server's limit), delivery_timeout (seconds with nothing acknowledged before
        the writer gives up; default 60, None: never), on_reconnect (a callback
        taking the error), max_buffer_messages, max_buffer_bytes, max_batch_messages,
        max_batch_bytes, max_request_bytes, linger_ms, max_inflight_requests.

        ``routing`` (see `weir.client.routing`): ``"single-partition"`` (the default:
        a message with a key goes to ``murmur3_32(key) % partitions``, as Pulsar's
        client puts it; one without a key to the producer's home partition),
        ``"round-robin"`` (keyless messages spread), a function ``(key, partitions) ->
        partition``, or ``"pinned"`` (every message to the producer's pinned partition,
        as YDB's producer_id writers; what ``partition=N`` does too). Dedup holds per
        (producer, partition), so resends after a reconnect stay safe in every mode.
        ``key_hash``: ``"murmur3"`` (Pulsar's client's, the default) or ``"murmur2"``
        (Kafka's default partitioner) places keyed messages (`weir.hashing`);
        ``routing="key"`` is another name of the default.

        ``access_mode`` (Pulsar's): ``"shared"`` (default), ``"exclusive"`` (the
        writer fails with ProducerBusyError when another producer writes to the
        topic), ``"wait-for-exclusive"`` (its messages wait until the others have
        left; the delivery timeout still bounds that wait), ``"exclusive-with-fencing"``
        (takes the topic; the others fail with ProducerFencedError). The writer
        connects in the background: ``await writer.wait_init()`` to learn at once.
        """
        s = writer_settings(producer_id, partition, codec, access_mode, settings)
        router = parse_routing(routing, partition, key_hash)
        loop = asyncio.get_running_loop()
        core: WriterCore | RoutedWriterCore = (
            WriterCore(self.conn, topic, s, loop)
            if router is None
            else RoutedWriterCore(self.conn, topic, s, loop, router)
        )
        core.start()
        self.conn.owners.discover(topic)  # cluster mode: learn the other brokers
        return Writer(core)

    def reader(
        self,
        topics: str | list[str],
        *,
        consumer: str = "",
        start: str | Start = Start.COMMITTED,
        read_from: dt.datetime | int | None = None,
        buffer_bytes: int = 64 << 20,
        on_reconnect: Callable[[WeirError], None] | None = None,
        read_committed: bool = False,
        compacted: bool = False,
        chunk_expiry: float = DEFAULT_CHUNK_EXPIRY,
    ) -> Reader:
        """A reader of one or more topics (call inside a running event loop).

        ``compacted``: read each partition as compacted (Pulsar's readCompacted): the
        latest message of each key below its compacted view's position, at their own
        offsets (a key with empty data is a delete), then the live tail.
        ``chunk_expiry``: seconds a chunked message may stay incomplete before the reader
        drops it (its writer died mid-way; Pulsar's expireTimeOfIncompleteChunkedMessage).

        With a ``consumer``, partitions are shared with the consumer's other
        readers and start at its committed offsets; without one, every
        partition is read from ``start`` (earliest by default) and nothing is committed.
        A lost stream is reconnected for as long as the reader lives; ``on_reconnect``
        (a callback taking the error, run in the event loop) hears of each attempt.
        Without a consumer, a reconnected reader starts again from ``start``: to read
        exact offsets across reconnects, use `read_range`. ``read_committed``: only messages
        of committed transactions (and of no transaction), each partition up to its last
        stable offset; off (the default), every stored message, as Kafka's read_uncommitted.
        """
        names = [topics] if isinstance(topics, str) else list(topics)
        # one stream per broker serving the topics' partitions (one broker: one stream)
        core = OwnerReaders(
            self.conn,
            names,
            consumer=consumer,
            start=Start.parse(start)
            if consumer
            else (Start.parse(start) if start != Start.COMMITTED else Start.EARLIEST),
            read_from_ms=to_ms(read_from, "read_from") or 0,
            buffer_bytes=buffer_bytes,
            on_reconnect=on_reconnect,
            read_committed=read_committed,
            compacted=compacted,
            chunk_expiry=chunk_expiry,
        )
        core.start_session()
        return Reader(core)
