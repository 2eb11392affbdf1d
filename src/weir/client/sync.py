"""The synchronous SDK: `weir.Client`, twin of `weir.aio.Client`.

Calls run on the client's private event loop thread; `Writer.write` is the
exception: it only touches the thread-safe buffer, so it is as cheap as a
local append. The writer, reader and transaction it hands out live in
`weir.client.writer_sync`, `reader_sync` and `transaction_sync` (re-exported here).
"""

from __future__ import annotations

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
from weir.client.direct_writer import DirectWriterCore
from weir.client.loop import LoopThread
from weir.client.owners import PartitionOwner
from weir.client.reader import Start
from weir.client.reader_sync import Reader
from weir.client.routing import CustomRouter, parse_routing
from weir.client.security_admin import SyncSecurityCalls
from weir.client.subscription import DeadLetterPolicy, ReceivedMessage
from weir.client.subscription_sync import SubscriptionConsumer
from weir.client.tenancy import SyncTenancyCalls
from weir.client.tier_admin import SyncTierCalls
from weir.client.tls import TlsArg
from weir.client.transaction_sync import Transaction
from weir.client.writer_settings import writer_settings
from weir.client.writer_sync import Writer
from weir.errors import ClosedError, WeirError
from weir.hashing import KeyHash
from weir.storage.codecs import Codec

# False: every sync writer runs in the client's loop thread, as before the direct writer
# (bench/transport_bench.py compares the two)
DIRECT_TCP_WRITERS = True

__all__ = ["DIRECT_TCP_WRITERS", "Client", "Reader", "Transaction", "Writer"]


class Client(SyncTenancyCalls, SyncSecurityCalls, SyncTierCalls):
    """Synchronous weir client.

    >>> client = weir.Client("127.0.0.1:2136")
    >>> client.create_topic("orders", partitions=4)
    >>> with client.writer("orders", producer_id="svc-1") as w:
    ...     w.write(b"hello")

    ``credentials`` (``weir.UserPassword(user, password)`` or a ``(user, password)``
    tuple) logs in to a server with users; every call then carries the token.
    ``tls`` (``weir.Tls(ca=..., cert=..., key=...)``) or a ``grpcs://`` endpoint
    speaks TLS. ``transport="tcp"``: writers and readers use the server's native TCP port
    (``tcp_endpoint``, by default the port the server reports), as in `weir.aio`.
    A cluster's brokers may be given as ``"h1:p1,h2:p2"`` (or a list), as in `weir.aio`.
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
            self._loop.loop.call_soon_threadsafe(conn.owners.discover, topic)
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
