"""The synchronous SDK: `weir.Client`, `Writer`, `Reader`, twins of `weir.aio`.

Calls run on the client's private event loop thread; `Writer.write` is the
exception: it only touches the thread-safe buffer, so it is as cheap as a
local append.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as dt
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

from weir.access_mode import AccessMode
from weir.client import aio
from weir.client import subscription as aio_subscription
from weir.client.admin import CompactionInfo, Consumer, ConsumerInfo, SubscriptionInfo, TopicInfo
from weir.client.aio import _KEEP, DEFAULT_ENDPOINT, RangeChunk
from weir.client.chunks import DEFAULT_CHUNK_EXPIRY
from weir.client.credentials import CredentialsArg
from weir.client.deliver_at import with_deliver_at
from weir.client.direct_writer import DirectWriterCore, DrivenFuture
from weir.client.loop import LoopThread
from weir.client.messages import Batch, Message
from weir.client.owners import PartitionOwner
from weir.client.reader import PartitionSession, Start
from weir.client.routing import CustomRouter, parse_routing
from weir.client.security_admin import SyncSecurityCalls
from weir.client.subscription import DeadLetterPolicy, ReceivedMessage
from weir.client.subscription_sync import SubscriptionConsumer
from weir.client.tenancy import SyncTenancyCalls
from weir.client.tier_admin import SyncTierCalls
from weir.client.tls import TlsArg
from weir.client.transaction import Transaction as AioTransaction
from weir.client.writer_settings import WriteResult, writer_settings
from weir.errors import ClosedError, WeirError
from weir.hashing import KeyHash
from weir.storage.codecs import Codec

# False: every sync writer runs in the client's loop thread, as before the direct writer
# (bench/transport_bench.py compares the two)
DIRECT_TCP_WRITERS = True


class Writer:
    """Synchronous writer: `write()` buffers and returns; `flush()` waits for acks."""

    def __init__(self, inner: aio.Writer, loop: LoopThread) -> None:
        self._inner = inner
        self._core = inner._core
        self._loop = loop
        # the caller's calls drive it (`weir.client.direct_writer`), not the loop
        self._direct = self._core if isinstance(self._core, DirectWriterCore) else None
        if self._direct is not None:  # its write() is this one, a Python call less per message
            self.write = self._direct.write  # type: ignore[method-assign]

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

    def wait_init(self, timeout: float | None = 30.0) -> Writer:
        if self._direct is not None:
            self._direct.wait_init_sync(timeout)
        else:
            self._loop.run(self._core.wait_init(timeout))
        return self

    def write(
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
        """Buffer a message; returns at once unless the buffer is full (then waits up to ``timeout``)."""
        if deliver_at is not None or deliver_after is not None:  # (a call less per write)
            headers = with_deliver_at(headers, deliver_at, deliver_after)
        self._core.write_threadsafe(data, key, headers, seq_no, created_at, timeout)

    def write_many(
        self,
        values: Sequence[bytes | str],
        *,
        keys: Sequence[bytes | str | None] | None = None,
        headers: Sequence[Mapping[str, str] | None] | None = None,
        seq_nos: Sequence[int] | None = None,
        created_at: Sequence[int] | int | None = None,
        timeout: float | None = None,
    ) -> None:
        """Buffer many messages in one call (columns of equal length): for bulk producers."""
        self._core.write_many_threadsafe(values, keys, headers, seq_nos, created_at, timeout)

    def write_future(
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
    ) -> concurrent.futures.Future[WriteResult]:
        """Buffer a message; the future resolves with its WriteResult once acknowledged."""
        if deliver_at is not None or deliver_after is not None:  # (a call less per write)
            headers = with_deliver_at(headers, deliver_at, deliver_after)
        fut: concurrent.futures.Future[WriteResult] = (
            concurrent.futures.Future() if self._direct is None else DrivenFuture(self._direct)
        )
        self._core.write_threadsafe(data, key, headers, seq_no, created_at, timeout, fut)
        return fut

    def write_with_result(
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
        fut = self.write_future(
            data, key=key, headers=headers, seq_no=seq_no, created_at=created_at, timeout=timeout
        )
        return fut.result(timeout)

    def flush(self, timeout: float | None = None) -> None:
        if self._direct is not None:
            self._direct.flush_sync(timeout)
        else:
            self._loop.run(self._core.flush(timeout))

    def close(self, timeout: float | None = None) -> None:
        if self._core.closed:
            return
        if self._direct is not None:
            self._direct.close_sync(timeout)
        else:
            self._loop.run(self._core.close(timeout))

    def __enter__(self) -> Writer:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if e is None:
            self.close()
            return
        # an error is on its way out already (often this writer's own): do not mask it
        with contextlib.suppress(WeirError):
            self.close()


class Reader:
    """Synchronous reader: iterate messages, or take batches; commit what you processed."""

    def __init__(self, inner: aio.Reader, loop: LoopThread) -> None:
        self._inner = inner
        self._loop = loop
        self._batch: Batch | None = None
        self._pos = 0

    @property
    def connected(self) -> bool:
        """Whether the reader has a live stream now (False while it reconnects)."""
        return self._inner._core.connected

    @property
    def disconnected_for(self) -> float:
        """Seconds since the stream was lost, 0 while connected."""
        return self._inner._core.disconnected_for

    @property
    def last_error(self) -> WeirError | None:
        """The error behind the latest reconnect (the reader retries for as long as it lives)."""
        return self._inner._core.last_error

    @property
    def reconnects(self) -> int:
        return self._inner._core.reconnects

    @property
    def partitions(self) -> list[PartitionSession]:
        """The partitions this reader holds now (read in the loop thread that changes them)."""

        async def get() -> list[PartitionSession]:
            return self._inner.partitions

        return self._loop.run(get())

    def wait_connected(self, timeout: float | None = 30.0) -> Reader:
        self._loop.run(self._inner.wait_connected(timeout))
        return self

    def receive_batch(self, timeout: float | None = None) -> Batch | None:
        return self._loop.run(self._inner.receive_batch(timeout))

    def receive_message(self, timeout: float | None = None) -> Message | None:
        if self._batch is None or self._pos >= len(self._batch.messages):
            self._batch = self.receive_batch(timeout)
            self._pos = 0
            if self._batch is None:
                return None
        msg = self._batch.messages[self._pos]
        self._pos += 1
        return msg

    def __iter__(self) -> Iterator[Message]:
        while True:
            if self._batch is not None and self._pos < len(self._batch):
                msg = self.receive_message()  # what receive_message left of its batch
                if msg is not None:
                    yield msg
                continue
            batch = self.receive_batch()
            if batch is None:
                continue
            # built one at a time as the loop takes them (`Batch.__iter__`); the position
            # is kept so that receive_message after a break goes on from the next one
            self._batch, self._pos = batch, 0
            for msg in batch:
                self._pos += 1
                yield msg

    def commit(self, item: Message | Batch, *, transaction: Transaction | None = None) -> None:
        """Commit up to and including ``item``; returns at once (`close()` waits for the ack).
        With a ``transaction`` the offset moves when it commits (this waits until the
        transaction holds it)."""
        self._inner._core.check_commit(item)
        if transaction is not None:
            transaction.commit_offsets(item, self._inner._core.consumer)
            return
        self._loop.loop.call_soon_threadsafe(self._inner.commit, item)

    def commit_with_ack(self, item: Message | Batch, timeout: float | None = 30.0) -> None:
        self._loop.run(self._inner.commit_with_ack(item, timeout))

    def close(self, timeout: float | None = 10.0) -> None:
        self._loop.run(self._inner.close(timeout))

    def __enter__(self) -> Reader:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class Transaction:
    """A transaction (`weir.Client.transaction`): ``with client.transaction() as tx:``
    begins it and commits it at the end of the block (aborts it on an exception). See
    `weir.client.transaction`; the asyncio twin is `weir.aio.Client.transaction`."""

    def __init__(self, inner: AioTransaction, loop: LoopThread) -> None:
        self._inner = inner
        self._loop = loop

    @property
    def id(self) -> int | None:
        return self._inner.id

    @property
    def state(self) -> str:
        """new, open, ending, committed or aborted."""
        return self._inner.state

    @property
    def timeout_ms(self) -> int | None:
        return self._inner.timeout_ms

    def begin(self, *, call_timeout: float | None = 30.0) -> Transaction:
        self._loop.run(self._inner.begin(call_timeout=call_timeout))
        return self

    def writer(self, topic: str, **kwargs: Any) -> Writer:
        """A writer (same arguments as `Client.writer`) whose messages belong to the
        transaction; the commit flushes and closes it."""

        async def make() -> aio.Writer:
            return self._inner.writer(topic, **kwargs)

        return Writer(self._loop.run(make()), self._loop)

    def commit_offsets(
        self,
        items: Message | Batch | Iterable[Message | Batch],
        consumer: str,
        *,
        call_timeout: float | None = 30.0,
    ) -> None:
        """Commit ``consumer``'s offsets past ``items`` when the transaction commits."""
        self._loop.run(self._inner.commit_offsets(items, consumer, call_timeout=call_timeout))

    def commit(self, *, call_timeout: float | None = 60.0) -> None:
        self._loop.run(self._inner.commit(call_timeout=call_timeout))

    def abort(self, *, call_timeout: float | None = 30.0) -> None:
        self._loop.run(self._inner.abort(call_timeout=call_timeout))

    def __enter__(self) -> Transaction:
        if self.state == "new":
            self.begin()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._loop.run(self._inner.__aexit__(et, e, tb))


class Client(SyncTenancyCalls, SyncSecurityCalls, SyncTierCalls):
    """Synchronous weir client.

    >>> client = weir.Client("127.0.0.1:2136")
    >>> client.create_topic("orders", partitions=4)
    >>> with client.writer("orders", producer_id="svc-1") as w:
    ...     w.write(b"hello")

    ``credentials`` (``weir.UserPassword(user, password)`` or a ``(user, password)``
    tuple) logs in to a server with users; every call then carries the token.
    ``tls`` (``weir.Tls(ca=..., cert=..., key=...)``) or a ``grpcs://`` endpoint
    speaks TLS. ``transport="tcp"``: writers use the server's native TCP port
    (``tcp_endpoint``, by default the port the server reports), as in `weir.aio`.
    """

    def __init__(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        credentials: CredentialsArg = None,
        tls: TlsArg = None,
        transport: str = "grpc",
        tcp_endpoint: str | None = None,
    ) -> None:
        self.endpoint = endpoint
        self._loop = LoopThread()
        self._aio = aio.Client(
            endpoint,
            credentials=credentials,
            tls=tls,
            transport=transport,
            tcp_endpoint=tcp_endpoint,
        )
        self._closed = False
        # the caller-driven writers (no task in the loop to end): closed with the client
        self._direct_writers: weakref.WeakSet[DirectWriterCore] = weakref.WeakSet()
        self._loop.run(self._connect())

    async def _connect(self) -> None:
        self._aio.conn  # noqa: B018 - creates the channel inside the client's loop

    def _run(self, coro: Any, timeout: float | None = None) -> Any:
        if self._closed:
            coro.close()
            raise ClosedError("client is closed")
        return self._loop.run(coro, timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for core in list(self._direct_writers):
            core.abandon()
        self._loop.run(self._aio.close())
        self._loop.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # admin ---------------------------------------------------------------

    def create_topic(
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
        """Create a topic; ``exist_ok=True`` accepts an existing one of the same shape.

        See ``weir.aio.Client.create_topic``: an existing topic that differs
        from what was asked for raises AlreadyExistsError naming the differences.
        """
        return self._run(  # type: ignore[no-any-return]
            self._aio.create_topic(
                name,
                partitions,
                retention=retention,
                retention_bytes=retention_bytes,
                max_partition_bytes=max_partition_bytes,
                max_partition_messages=max_partition_messages,
                codecs=codecs,
                consumers=consumers,
                policies=policies,
                kind=kind,
                exist_ok=exist_ok,
                timeout=timeout,
            )
        )

    def describe_topic(self, name: str, *, timeout: float | None = 30.0) -> TopicInfo:
        return self._run(self._aio.describe_topic(name, timeout=timeout))  # type: ignore[no-any-return]

    def owners(self, topic: str, *, timeout: float | None = 30.0) -> list[PartitionOwner]:
        """Which broker serves each partition of ``topic``; see `weir.aio.Client.owners`."""
        return self._run(self._aio.owners(topic, timeout=timeout))  # type: ignore[no-any-return]

    def alter_topic(
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
        """Change a topic; see ``weir.aio.Client.alter_topic``."""
        return self._run(  # type: ignore[no-any-return]
            self._aio.alter_topic(
                name,
                partitions=partitions,
                retention=retention,
                retention_bytes=retention_bytes,
                max_partition_bytes=max_partition_bytes,
                max_partition_messages=max_partition_messages,
                codecs=codecs,
                add_consumers=add_consumers,
                drop_consumers=drop_consumers,
                policies=policies,
                inherit=inherit,
                timeout=timeout,
            )
        )

    def drop_topic(self, name: str, *, timeout: float | None = 30.0) -> None:
        self._run(self._aio.drop_topic(name, timeout=timeout))

    def list_topics(self, prefix: str = "", *, timeout: float | None = 30.0) -> list[TopicInfo]:
        return self._run(self._aio.list_topics(prefix, timeout=timeout))  # type: ignore[no-any-return]

    def describe_consumer(
        self, topic: str, consumer: str, *, timeout: float | None = 30.0
    ) -> ConsumerInfo:
        return self._run(self._aio.describe_consumer(topic, consumer, timeout=timeout))  # type: ignore[no-any-return]

    def commit_offset(
        self,
        topic: str,
        partition: int,
        consumer: str,
        offset: int,
        *,
        allow_backwards: bool = False,
        timeout: float | None = 30.0,
    ) -> bool:
        return self._run(  # type: ignore[no-any-return]
            self._aio.commit_offset(
                topic, partition, consumer, offset, allow_backwards=allow_backwards, timeout=timeout
            )
        )

    def offsets_for_time(
        self, topic: str, timestamp: dt.datetime | int, *, timeout: float | None = 30.0
    ) -> list[int]:
        return self._run(self._aio.offsets_for_time(topic, timestamp, timeout=timeout))  # type: ignore[no-any-return]

    def read_range(
        self,
        topic: str,
        partition: int,
        from_offset: int,
        to_offset: int = -1,
        *,
        max_bytes: int = 4 << 20,
        timeout: float | None = None,
        read_committed: bool = False,
        compacted: bool = False,
        assemble_chunks: bool = False,
    ) -> Iterator[RangeChunk]:
        """Stored batches of ``[from_offset, to_offset)`` of one partition, no consumer involved;
        ``timeout`` bounds the wait for each chunk, ``compacted`` reads the range as
        compacted, ``assemble_chunks`` returns chunked messages whole (see
        `weir.aio.Client.read_range`)."""
        it = self._aio.read_range(
            topic,
            partition,
            from_offset,
            to_offset,
            max_bytes=max_bytes,
            timeout=timeout,
            read_committed=read_committed,
            compacted=compacted,
            assemble_chunks=assemble_chunks,
        )

        async def step() -> RangeChunk | None:
            try:
                return await it.__anext__()
            except StopAsyncIteration:
                return None

        try:
            while True:
                chunk = self._run(step())
                if chunk is None:
                    return
                yield chunk
        finally:
            if not self._closed:
                self._run(it.aclose())  # type: ignore[attr-defined]

    # compaction ----------------------------------------------------------

    def compact(
        self, topic: str, *, wait: bool = False, timeout: float | None = 30.0
    ) -> CompactionInfo:
        """Start compacting ``topic`` (``wait``: until the run ends); see `weir.aio.Client.compact`."""
        return self._run(self._aio.compact(topic, wait=wait, timeout=timeout))  # type: ignore[no-any-return]

    def describe_compaction(self, topic: str, *, timeout: float | None = 30.0) -> CompactionInfo:
        """The topic's compacted views and run; see `weir.aio.Client.describe_compaction`."""
        return self._run(self._aio.describe_compaction(topic, timeout=timeout))  # type: ignore[no-any-return]

    # subscriptions -------------------------------------------------------

    def create_subscription(
        self,
        topic: str,
        subscription: str,
        *,
        type: str = "exclusive",
        initial_position: str | dt.datetime | int = "latest",
        timeout: float | None = 30.0,
    ) -> SubscriptionInfo:
        """See `weir.aio.Client.create_subscription`."""
        return self._run(  # type: ignore[no-any-return]
            self._aio.create_subscription(
                topic,
                subscription,
                type=type,
                initial_position=initial_position,
                timeout=timeout,
            )
        )

    def describe_subscription(
        self, topic: str, subscription: str, *, timeout: float | None = 30.0
    ) -> SubscriptionInfo:
        return self._run(self._aio.describe_subscription(topic, subscription, timeout=timeout))  # type: ignore[no-any-return]

    def list_subscriptions(
        self, topic: str, *, timeout: float | None = 30.0
    ) -> list[SubscriptionInfo]:
        return self._run(self._aio.list_subscriptions(topic, timeout=timeout))  # type: ignore[no-any-return]

    def delete_subscription(
        self, topic: str, subscription: str, *, force: bool = False, timeout: float | None = 30.0
    ) -> None:
        self._run(self._aio.delete_subscription(topic, subscription, force=force, timeout=timeout))

    def seek_subscription(
        self,
        topic: str,
        subscription: str,
        *,
        offsets: Mapping[int, int] | None = None,
        timestamp: dt.datetime | int | None = None,
        timeout: float | None = 30.0,
    ) -> SubscriptionInfo:
        """See `weir.aio.Client.seek_subscription`."""
        return self._run(  # type: ignore[no-any-return]
            self._aio.seek_subscription(
                topic, subscription, offsets=offsets, timestamp=timestamp, timeout=timeout
            )
        )

    def skip_subscription(
        self,
        topic: str,
        subscription: str,
        count: int | None = None,
        *,
        partition: int | None = None,
        timeout: float | None = 30.0,
    ) -> int:
        """See `weir.aio.Client.skip_subscription`."""
        return self._run(  # type: ignore[no-any-return]
            self._aio.skip_subscription(
                topic, subscription, count, partition=partition, timeout=timeout
            )
        )

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
        """A consumer of a durable subscription; see `weir.aio.Client.subscribe`."""

        async def make() -> aio_subscription.SubscriptionConsumer:
            return self._aio.subscribe(
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
            )

        consumer = SubscriptionConsumer(self._run(make()), self._loop)
        if listener is not None:
            consumer.listen(listener)
        return consumer

    # transactions --------------------------------------------------------

    def transaction(
        self,
        *,
        transactional_id: str | None = None,
        key: str | None = None,
        timeout: float | dt.timedelta | None = None,
    ) -> Transaction:
        """A transaction; see `weir.aio.Client.transaction`."""
        if self._closed:
            raise ClosedError("client is closed")
        inner = self._aio.transaction(transactional_id=transactional_id, key=key, timeout=timeout)
        return Transaction(inner, self._loop)

    def commit_transaction(self, transaction_id: int, *, timeout: float | None = 60.0) -> None:
        """Commit a transaction by its id; see `weir.aio.Client.commit_transaction`."""
        self._run(self._aio.commit_transaction(transaction_id, timeout=timeout))

    def abort_transaction(self, transaction_id: int, *, timeout: float | None = 30.0) -> None:
        """Abort a transaction by its id."""
        self._run(self._aio.abort_transaction(transaction_id, timeout=timeout))

    # streams -------------------------------------------------------------

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
        """A writer to ``topic``; see `weir.aio.Client.writer`. Over ``transport="tcp"``
        a writer with one session (``partition=`` or ``routing="pinned"``) is driven by
        the calling thread (`weir.client.direct_writer`)."""
        if self._closed:
            raise ClosedError("client is closed")
        conn = self._aio.conn
        direct = DIRECT_TCP_WRITERS and conn.transport == "tcp"
        if direct and parse_routing(routing, partition, key_hash) is None:
            s = writer_settings(producer_id, partition, codec, access_mode, settings)
            core = DirectWriterCore(conn, topic, s, self._loop)
            self._direct_writers.add(core)
            core.start()
            return Writer(aio.Writer(core), self._loop)

        async def make() -> aio.Writer:
            return self._aio.writer(
                topic,
                producer_id=producer_id,
                partition=partition,
                codec=codec,
                access_mode=access_mode,
                routing=routing,
                key_hash=key_hash,
                **settings,
            )

        return Writer(self._run(make()), self._loop)

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
        """A reader; see `weir.aio.Client.reader`."""

        async def make() -> aio.Reader:
            return self._aio.reader(
                topics,
                consumer=consumer,
                start=start,
                read_from=read_from,
                buffer_bytes=buffer_bytes,
                on_reconnect=on_reconnect,
                read_committed=read_committed,
                compacted=compacted,
                chunk_expiry=chunk_expiry,
            )

        return Reader(self._run(make()), self._loop)
