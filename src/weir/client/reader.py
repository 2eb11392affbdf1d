"""The reader: partition sessions, batches of messages, commits, flow control.

The server assigns partitions to the reader (spreading a consumer's partitions
over its live readers) and sends stored chunks within the byte credit the
reader grants; the reader gives credit back as the application takes batches,
so memory stays bounded by ``buffer_bytes``.

Commits (seed 001): ``commit(message or batch)`` stores "everything up to and
including this one is processed" for its partition; ``commit_with_ack`` waits
for the server's ack. A commit is only valid in the session that delivered the
message: after a rebalance or reconnect the partition is read again from the
committed offset. ``close()`` waits for the acks of commits made before it and
does not reconnect to deliver them.

A lost stream is reconnected with backoff, for as long as the reader lives
(like a Kafka consumer); ``connected``, ``last_error`` and the ``on_reconnect``
callback tell an application that it is waiting and why. A connection refused
before the reader ever got through fails at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from weir.client.chunks import DEFAULT_CHUNK_EXPIRY, ChunkAssembler
from weir.client.connection import Backoff, Connection, error_from_rpc
from weir.client.messages import Batch, Message, decode_parts
from weir.errors import (
    BadRequestError,
    ClosedError,
    NotOwnerError,
    UnavailableError,
    WeirError,
    WeirTimeoutError,
    error_from_code,
)
from weir.protocols.native import weir_pb2 as pb

log = logging.getLogger("weir.client.reader")


class Start(enum.Enum):
    """Where a reader starts in each partition it is given."""

    COMMITTED = pb.START_COMMITTED  # the consumer's committed offset (earliest if none)
    EARLIEST = pb.START_EARLIEST
    LATEST = pb.START_LATEST

    @classmethod
    def parse(cls, value: str | Start) -> Start:
        if isinstance(value, Start):
            return value
        try:
            return cls[value.upper()]
        except KeyError:
            raise BadRequestError(
                f"start must be committed, earliest or latest, not {value!r}"
            ) from None


class PartitionSessionClosedError(WeirError):
    """The partition was taken from this reader (rebalance or reconnect) before the commit."""

    code = "PARTITION_SESSION_CLOSED"
    retryable = False


@dataclass(eq=False)
class PartitionSession:
    """One partition as currently read by this reader."""

    assignment_id: int
    topic: str
    partition: int
    read_offset: int  # next offset to hand to the application
    committed_offset: int
    end_offset: int
    generation: int  # of the stream that assigned it
    revoking: bool = False
    closed: bool = False
    closed_because: str = ""
    commits: deque[tuple[int, asyncio.Future[None]]] = field(default_factory=deque)
    chunks: ChunkAssembler = field(default_factory=ChunkAssembler)  # chunked messages


def check_reader(topics: list[str], chunk_expiry: Any) -> None:
    """Refuse a reader's settings at once (BadRequestError), before any stream opens."""
    if not topics:
        raise BadRequestError("a reader needs at least one topic")
    if not isinstance(chunk_expiry, int | float) or not chunk_expiry > 0:
        raise BadRequestError(f"chunk_expiry must be > 0 seconds, got {chunk_expiry!r}")


def check_commit(item: Any, consumer: str, closed: bool) -> None:
    """Refuse a commit that can never work: reader closed, not a message or batch, or a
    reader without a consumer (every reader's `check_commit`)."""
    if closed:
        raise ClosedError("reader is closed")
    if not isinstance(item, Message | Batch):
        raise BadRequestError(f"commit takes a Message or a Batch, not {type(item).__name__}")
    if not consumer:
        raise BadRequestError("a reader without a consumer cannot commit; give it consumer=...")


@dataclass(slots=True)
class _Entry:
    session: PartitionSession
    chunks: list[bytes]
    nbytes: int


class ReaderCore:
    """Shared by `weir.Reader` and `weir.aio.Reader` (runs in one event loop)."""

    def __init__(
        self,
        conn: Connection,
        topics: list[str],
        *,
        consumer: str = "",
        start: Start = Start.COMMITTED,
        read_from_ms: int = 0,
        buffer_bytes: int = 64 << 20,
        on_reconnect: Callable[[WeirError], None] | None = None,
        read_committed: bool = False,
        compacted: bool = False,
        chunk_expiry: float = DEFAULT_CHUNK_EXPIRY,
        partitions: Sequence[tuple[str, int]] = (),
        on_moved: Callable[[ReaderCore, WeirError], None] | None = None,
    ) -> None:
        check_reader(topics, chunk_expiry)
        self.compacted = compacted
        self.chunk_expiry = float(chunk_expiry)
        self.conn = conn
        # where the read stream goes: ``conn``, or (cluster mode) the connection to the
        # broker that owns the topic's partitions (`weir.client.owners`)
        self.target = conn
        self.topics = topics
        self.consumer = consumer
        self.start = start
        self.read_from_ms = read_from_ms
        self.read_committed = read_committed
        self.buffer_bytes = buffer_bytes
        self.session_id = ""
        self._queue: deque[_Entry] = deque()
        self._queue_event = asyncio.Event()
        self._sessions: dict[int, PartitionSession] = {}
        self._generation = 0
        self._call: Any = None
        self._credit_back = 0
        self._error: WeirError | None = None
        self._closing = False
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._outbox: asyncio.Queue[tuple[int, pb.ReadRequest]] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None
        self.reconnects = 0
        self.on_reconnect = on_reconnect
        self.last_error: WeirError | None = None  # behind the latest reconnect
        self._live = False  # the current stream got its init result
        self._down_since: float | None = None  # monotonic time the stream was lost (None: up)
        # cluster mode (`weir.client.owner_readers`): read only these (topic, partition)s, at
        # the broker serving them; a not-owner answer or a failure of that broker ends this
        # core and goes to ``on_moved``, which looks the partitions up again
        self.named = list(partitions)
        self.on_moved = on_moved

    @property
    def connected(self) -> bool:
        """Whether the reader has a live stream now (False while it reconnects)."""
        return self._live

    @property
    def disconnected_for(self) -> float:
        """Seconds since the stream was lost (0 while connected or before the first one)."""
        if self._down_since is None:
            return 0.0
        return time.monotonic() - self._down_since

    def start_session(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="weir-reader")

    async def wait_connected(self, timeout: float | None = None) -> None:
        try:
            await asyncio.wait_for(self._connected.wait(), timeout)
        except TimeoutError:
            why = f"; last error: {self.last_error.message}" if self.last_error else ""
            raise WeirTimeoutError(
                f"reader at {self.conn.endpoint} not connected after {timeout:g} s{why}"
            ) from None
        if self._error is not None:
            raise self._error.with_traceback(None)  # see WriterCore._raise_error

    @property
    def partitions(self) -> list[PartitionSession]:
        return [s for s in self._sessions.values() if not s.closed]

    # ------------------------------------------------------------------ receiving

    async def receive_batch(self, timeout: float | None = None) -> Batch | None:
        """The next batch of messages (None if none arrives within ``timeout``)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            if self._closing or self._closed:
                raise ClosedError("reader is closed")
            while self._queue:
                entry = self._queue.popleft()
                batch = self._deliver(entry)
                if batch is not None:
                    return batch
            if self._error is not None:
                raise self._error.with_traceback(None)  # see WriterCore._raise_error
            self._queue_event.clear()
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue_event.wait(), remaining)

    def _deliver(self, entry: _Entry) -> Batch | None:
        ps = entry.session
        current = ps.generation == self._generation and not ps.closed
        if current:
            self._give_credit(entry.nbytes)
        if not current or ps.revoking:
            return None
        parts = decode_parts(entry.chunks, ps.read_offset)
        if not parts:
            return None
        ps.read_offset = parts[-1].first_offset + parts[-1].count
        parts = ps.chunks.feed(parts)  # chunks held until their message is whole
        if not parts:
            return None
        return Batch(ps.topic, ps.partition, parts, entry.nbytes, ps)

    def _give_credit(self, n: int) -> None:
        self._credit_back += n
        if self._credit_back >= self.buffer_bytes // 4 and self._call is not None:
            credit, self._credit_back = self._credit_back, 0
            self._send(pb.ReadRequest(credit=pb.ReadCredit(bytes=credit)))

    def _send(self, req: pb.ReadRequest) -> None:
        """Queue a request for the current stream (gRPC allows one write at a time)."""
        if self._call is not None:
            self._outbox.put_nowait((self._generation, req))

    async def _write_outbox(self, call: Any, generation: int) -> None:
        """The only writer of one stream: requests go out one at a time, in order."""
        while True:
            gen, req = await self._outbox.get()
            if gen != generation:
                continue  # queued for a stream that is gone
            try:
                await call.write(req)
            except Exception as exc:  # the stream broke; the session loop notices
                log.debug("read stream write failed: %r", exc)
                return

    # ------------------------------------------------------------------ commits

    def commit(self, item: Message | Batch) -> asyncio.Future[None]:
        """Commit everything up to and including ``item`` in its partition; the future is the ack."""
        self.check_commit(item)
        ps: PartitionSession | None = item.session
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if ps is None or ps.closed or ps.generation != self._generation or self._call is None:
            why = ps.closed_because if ps is not None and ps.closed_because else ""
            if not why and self._call is None and self.last_error is not None:
                why = f"the connection was lost: {self.last_error.message}"
            fut.set_exception(
                PartitionSessionClosedError(
                    f"{item.topic}/{item.partition} is no longer read by this session"
                    f"{f' ({why})' if why else ''}; its messages after the last acknowledged "
                    "commit will be delivered again"
                )
            )
            return fut
        offset = item.commit_offset
        limit = ps.chunks.commit_limit()  # never past the first chunk of an incomplete message
        if limit is not None:
            offset = min(offset, limit)
        if offset <= ps.committed_offset:
            fut.set_result(None)
            return fut
        ps.commits.append((offset, fut))
        self._send(
            pb.ReadRequest(commit=pb.ReadCommit(assignment_id=ps.assignment_id, offset=offset))
        )
        return fut

    def check_commit(self, item: Any) -> None:
        """Raise at once for a commit that can never work (safe to call from any thread)."""
        check_commit(item, self.consumer, self._closed or self._closing)

    def _on_commit_ack(self, ack: Any) -> None:
        ps = self._sessions.get(ack.assignment_id)
        if ps is None:
            return
        ps.committed_offset = max(ps.committed_offset, ack.committed_offset)
        while ps.commits and ps.commits[0][0] <= ps.committed_offset:
            _, fut = ps.commits.popleft()
            if not fut.done():
                fut.set_result(None)
        if ps.revoking and not ps.commits:
            self._release(ps)

    # ------------------------------------------------------------------ session

    def _stop_writer(self) -> None:
        if self._writer is not None:
            self._writer.cancel()
            self._writer = None
        while not self._outbox.empty():
            self._outbox.get_nowait()

    async def _run(self) -> None:
        try:
            await self._stream_loop()
        finally:
            self._stop_writer()

    async def _stream_loop(self) -> None:
        backoff = Backoff()
        while not self._closing:
            call = None
            try:
                call = self.target.stream_read()
                init = pb.ReadInit(
                    topics=self.topics,
                    consumer=self.consumer,
                    start=self.start.value,
                    read_from_ms=self.read_from_ms,
                    credit_bytes=self.buffer_bytes,
                    read_committed=self.read_committed,
                    compacted=self.compacted,
                    partitions=[pb.ReadPartition(topic=t, partition=p) for t, p in self.named],
                )
                await call.write(pb.ReadRequest(init=init))
                self._generation += 1
                self._stop_writer()
                self._writer = asyncio.get_running_loop().create_task(
                    self._write_outbox(call, self._generation)
                )
                self._call = call
                self._credit_back = 0
                got_init = False
                while True:
                    resp = await call.read()
                    if resp is grpc.aio.EOF:
                        raise UnavailableError("server ended the read stream")
                    kind = resp.WhichOneof("kind")
                    if kind == "data":
                        d = resp.data
                        ps = self._sessions.get(d.assignment_id)
                        if ps is not None:
                            ps.end_offset = d.end_offset
                            self._queue.append(_Entry(ps, list(d.chunks), d.bytes))
                            self._queue_event.set()
                    elif kind == "commit_ack":
                        self._on_commit_ack(resp.commit_ack)
                    elif kind == "assigned":
                        self._on_assigned(resp.assigned)
                    elif kind == "revoked":
                        self._on_revoked(resp.revoked)
                    elif kind == "init":
                        self.session_id = resp.init.session_id
                        got_init = True
                        backoff.reset()
                        self.target.got_through(call)  # later refusals are outages
                        self._live = True
                        self._down_since = None
                        self._connected.set()
                    elif kind == "error":
                        raise error_from_code(resp.error.code, resp.error.message)
                    if not got_init:
                        continue
            except asyncio.CancelledError:
                if call is not None:
                    call.cancel()
                raise
            except (WeirError, grpc.aio.AioRpcError) as exc:
                err = error_from_rpc(exc) if isinstance(exc, grpc.aio.AioRpcError) else exc
                fast = self.target.unreachable(err, getattr(call, "endpoint", None))
                if fast is not None:
                    err = fast
                self.last_error = err
                self._end_stream(call, err)
                if not err.retryable or fast is not None:
                    self._error = err
                    self._connected.set()
                    self._queue_event.set()
                    return
                if self._closing:
                    return
                if self.on_moved is not None and self._follow_due(err):
                    self.on_moved(self, err)  # the owners are looked up again over there
                    return
                self.reconnects += 1
                delay = backoff.next_delay()
                log.warning("reader: %s; reconnecting within %.2f s", err.message, delay)
                if self.on_reconnect is not None:
                    try:
                        self.on_reconnect(err)
                    except Exception:
                        log.exception("on_reconnect callback of the reader failed")
                if await self._follow_owner(err, backoff):
                    continue  # the owner is elsewhere: go there now
                await self.target.pause(delay)
            except Exception as exc:
                log.exception("reader failed")
                self._end_stream(call, UnavailableError(repr(exc)))
                self._error = UnavailableError(f"reader failed: {exc!r}")
                self._queue_event.set()
                return

    def _follow_due(self, err: WeirError) -> bool:
        """Cluster mode: the owner must be looked up after ``err`` (a not-owner answer, a
        failure of an owner's broker, or of the client's own while others are known)."""
        return (
            isinstance(err, NotOwnerError)
            or self.target is not self.conn
            or self.conn.can_fail_over
        )

    async def _follow_owner(self, err: WeirError, backoff: Backoff) -> bool:
        """Cluster mode: after a not-owner answer, or a failure of the owner's broker, read
        from the broker owning the partition the error names (the topic's first partition
        after a failure); True when that is another broker than the last one (go at once).

        One stream reads from one broker: a topic whose partitions are served by several
        brokers needs a reader per broker for now (docs/cluster.md)."""
        if not self._follow_due(err):
            return False
        before = self.target
        if isinstance(err, NotOwnerError) and err.topic:
            topic, part = err.topic, (err.partition if err.partition >= 0 else None)
        else:
            topic, part = self.topics[0], None
        found = await self.conn.owners.lookup(topic, part)
        self.target = found or self.conn
        if self.target is not before:
            log.info("reader: %s/%s is served at %s now", topic, part, self.target.endpoint)
        return self.target is not before and backoff.attempt <= 3

    def _end_stream(self, call: Any, err: WeirError) -> None:
        self._call = None
        if self._live or self._down_since is None:
            self._down_since = time.monotonic()
        self._live = False
        self._stop_writer()
        if call is not None:
            call.cancel()
        for ps in self._sessions.values():
            self._close_session(ps, err)
        self._sessions.clear()
        self._queue.clear()

    def _close_session(self, ps: PartitionSession, err: WeirError) -> None:
        ps.closed = True
        ps.closed_because = err.message
        while ps.commits:
            _, fut = ps.commits.popleft()
            if not fut.done():
                fut.set_exception(
                    PartitionSessionClosedError(
                        f"{ps.topic}/{ps.partition}: session ended before the commit ack ({err.message})"
                    )
                )

    def _on_assigned(self, a: Any) -> None:
        ps = PartitionSession(
            a.assignment_id,
            a.topic,
            a.partition,
            a.read_offset,
            a.committed_offset,
            a.end_offset,
            self._generation,
            chunks=ChunkAssembler(self.chunk_expiry),
        )
        self._sessions[a.assignment_id] = ps

    def _on_revoked(self, r: Any) -> None:
        ps = self._sessions.get(r.assignment_id)
        if ps is None:
            return
        # drop what the application has not taken yet: the next owner reads it again
        self._queue = deque(e for e in self._queue if e.session is not ps)
        if not r.graceful:
            self._close_session(ps, UnavailableError("partition taken away"))
            del self._sessions[r.assignment_id]
            return
        ps.revoking = True
        if not ps.commits:
            self._release(ps)

    def _release(self, ps: PartitionSession) -> None:
        ps.closed = True
        self._sessions.pop(ps.assignment_id, None)
        self._send(pb.ReadRequest(released=pb.PartitionReleased(assignment_id=ps.assignment_id)))

    # ------------------------------------------------------------------ close

    async def close(self, timeout: float | None = 10.0) -> None:
        """Wait for acks of commits made so far (never reconnecting for them), then stop."""
        if self._closed:
            return
        self._closing = True
        pending = [f for ps in self._sessions.values() for _, f in ps.commits]
        if pending and self._call is not None:
            with contextlib.suppress(TimeoutError, Exception):
                await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), timeout)
        self._closed = True
        call = self._call
        self._call = None
        self._stop_writer()  # the stream's only writer; done_writing below is then safe
        if call is not None:
            with contextlib.suppress(Exception):
                await call.done_writing()
            call.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        for ps in self._sessions.values():
            self._close_session(ps, ClosedError("reader closed"))
        self._queue.clear()
        self._queue_event.set()
