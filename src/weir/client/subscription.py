"""A consumer of a durable subscription (asyncio; `weir.Client.subscribe` wraps it for sync
code): messages come as its receiver queue has room, and each one is acknowledged on
its own, cumulatively, or negatively (delivered again later).

The consumer grants the server ``receiver_queue_size`` permits and gives them back
as the application takes messages, so the server never sends more than the queue
holds. A lost stream is reconnected for as long as the consumer lives; what was
queued and not yet taken is dropped then (the server delivers it again). An ack
returns once the server made it durable; an ack whose stream broke before its
answer raises a retryable error (it may or may not have been applied: acking again
is safe).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import groupby, repeat
from operator import itemgetter, lshift, or_, sub
from typing import Any, NamedTuple

import grpc

from weir.client.connection import Backoff, Connection, error_from_rpc
from weir.client.messages import EMPTY_HEADERS, decode_parts
from weir.errors import (
    BadRequestError,
    ClosedError,
    NotOwnerError,
    UnavailableError,
    WeirError,
    error_from_code,
)
from weir.protocols.native import weir_pb2 as pb

log = logging.getLogger("weir.client")

TYPES = {
    "exclusive": pb.SUBSCRIPTION_EXCLUSIVE,
    "failover": pb.SUBSCRIPTION_FAILOVER,
    "shared": pb.SUBSCRIPTION_SHARED,
    "key_shared": pb.SUBSCRIPTION_KEY_SHARED,
}
TYPE_NAMES = {v: k for k, v in TYPES.items()}
POSITIONS = {"latest": pb.POSITION_LATEST, "earliest": pb.POSITION_EARLIEST}
RECONSUME_COUNT = "weir-reconsume-count"  # header of a retry letter (see reconsume_later)
MAX_ACKS_IN_FLIGHT = 2  # ack requests waiting for their answer; later acks group behind them
MAX_GROUPED_RANGES = 10_000  # ranges in one grouped ack request
POSITION_NAMES = {v: k for k, v in POSITIONS.items()}


def type_code(value: str) -> Any:
    code = TYPES.get(str(value).lower().replace("-", "_"))
    if code is None:
        raise BadRequestError(f"subscription type must be one of {sorted(TYPES)}, not {value!r}")
    return code


def position_code(value: str | dt.datetime | int) -> Any:
    """The wire code of an initial position; a time (datetime or ms) is POSITION_TIMESTAMP."""
    if isinstance(value, dt.datetime | int):
        return pb.POSITION_TIMESTAMP
    code = POSITIONS.get(str(value).lower())
    if code is None:
        raise BadRequestError(
            f"initial position must be 'earliest', 'latest' or a time, not {value!r}"
        )
    return code


def position_time_ms(value: str | dt.datetime | int) -> int | None:
    if isinstance(value, dt.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, int):
        if value < 0:
            raise BadRequestError(f"an initial time is ms since the epoch, got {value}")
        return value
    return None


@dataclass(frozen=True, slots=True)
class DeadLetterPolicy:
    """After ``max_redeliver_count`` redeliveries a message goes to ``dead_letter_topic``
    (default ``<topic>-<subscription>-DLQ``, created when missing) and counts as
    acknowledged; its headers gain ``weir-origin-topic``, ``-partition``, ``-offset``
    and ``-subscription``. The policy is stored with the subscription."""

    max_redeliver_count: int
    dead_letter_topic: str = ""
    # with subscribe(retry_enable=True): where reconsume_later sends messages; empty:
    # <topic>-<subscription>-RETRY (a reconsume count past max_redeliver_count: the DLQ)
    retry_letter_topic: str = ""


class ReceivedMessage(NamedTuple):
    """A message delivered by a subscription; acknowledge it by passing it back."""

    topic: str
    partition: int
    offset: int
    seq_no: int
    created_at_ms: int
    written_at_ms: int
    producer_id: str
    key: bytes
    data: bytes
    headers: Mapping[str, str]
    redelivery_count: int  # times it was delivered before this one

    @property
    def message_id(self) -> tuple[int, int]:
        return (self.partition, self.offset)

    @property
    def reconsume_count(self) -> int:
        """Times the message went through ``reconsume_later`` (0: never)."""
        raw = self.headers.get(RECONSUME_COUNT, "")
        return int(raw) if raw.isdigit() else 0


MessageRef = ReceivedMessage | tuple[int, int]


_ID = itemgetter(1, 2)  # (partition, offset) of a ReceivedMessage
_new = tuple.__new__


def _ranges(
    items: MessageRef | Iterable[MessageRef], retry_topic: str = ""
) -> list[pb.MessageRange]:
    """Messages as ranges of consecutive offsets per partition (few, for batches); those
    of the retry topic (retry enabled) as ranges of it."""
    refs: list[Any]
    if isinstance(items, ReceivedMessage) or (
        isinstance(items, tuple) and len(items) == 2 and all(isinstance(x, int) for x in items)
    ):
        refs = [items]
    else:
        refs = list(items)
    if retry_topic and any(type(m) is ReceivedMessage and m.topic == retry_topic for m in refs):
        retries = [m for m in refs if type(m) is ReceivedMessage and m.topic == retry_topic]
        both = _ranges(
            [m for m in refs if not (type(m) is ReceivedMessage and m.topic == retry_topic)]
        )
        for r in _ranges(retries):
            r.topic = retry_topic
            both.append(r)
        return both
    if set(map(type, refs)) == {ReceivedMessage}:
        return _message_ranges(refs)
    ids = sorted({_ID(m) if isinstance(m, ReceivedMessage) else tuple(m) for m in refs})
    out: list[pb.MessageRange] = []
    part = start = end = -1
    for p, o in ids:
        if p == part and o == end:
            end += 1
            continue
        if part >= 0:
            out.append(pb.MessageRange(partition=part, start=start, end=end))
        part, start, end = p, o, o + 1
    if part >= 0:
        out.append(pb.MessageRange(partition=part, start=start, end=end))
    return out


_PART = itemgetter(1)
_OFFSET = itemgetter(2)
_SHIFT = 48  # key = partition << 48 | offset: offsets stay far below 2**48
_MASK = (1 << _SHIFT) - 1


def _message_ranges(msgs: list[ReceivedMessage]) -> list[pb.MessageRange]:
    """The `_ranges` of received messages, with no Python step per message: each becomes
    one int (partition, offset), sorted; offset minus rank is constant along a run of
    consecutive offsets, so the runs are the groups of equal differences."""
    keys = sorted(set(map(or_, map(lshift, map(_PART, msgs), repeat(_SHIFT)), map(_OFFSET, msgs))))
    if keys[-1] - keys[0] == len(keys) - 1:  # one run: the usual batch
        k = keys[0]
        return [
            pb.MessageRange(partition=k >> _SHIFT, start=k & _MASK, end=(k & _MASK) + len(keys))
        ]
    out: list[pb.MessageRange] = []
    i = 0
    for _, run in groupby(map(sub, keys, range(len(keys)))):
        k = keys[i]
        n = len(list(run))
        out.append(pb.MessageRange(partition=k >> _SHIFT, start=k & _MASK, end=(k & _MASK) + n))
        i += n
    return out


def _received(
    topic: str, partition: int, chunks: list[bytes], offsets: list[int], counts: list[int]
) -> list[ReceivedMessage]:
    """The delivered messages of ``chunks``: built column by column (no Python call per
    message) when the offsets are consecutive, as they mostly are."""
    lo, hi = offsets[0], offsets[-1] + 1
    consecutive = hi - lo == len(offsets)
    by_offset = None if consecutive else dict(zip(offsets, counts, strict=False))
    it = iter(counts) if consecutive and any(counts) else None
    out: list[ReceivedMessage] = []
    for p in decode_parts(chunks, lo):
        n = min(p.count, hi - p.first_offset)
        if n <= 0:
            break
        offs = range(p.first_offset, p.first_offset + n)
        if by_offset is not None:
            col: Iterable[int] = [by_offset.get(o, -1) for o in offs]
        elif it is not None:
            col = [next(it) for _ in offs]
        else:
            col = repeat(0)
        rows = zip(
            repeat(topic),
            repeat(partition),
            offs,
            p.seqs,
            repeat(p.created) if isinstance(p.created, int) else p.created,
            repeat(p.written),
            repeat(p.producer_id),
            p.keys if p.keys is not None else repeat(b""),
            p.data,
            p.headers if p.headers is not None else repeat(EMPTY_HEADERS),
            col,
        )
        msgs = map(_new, repeat(ReceivedMessage), rows)
        if by_offset is not None:
            out.extend(m for m in msgs if m.redelivery_count >= 0)
        else:
            out.extend(msgs)
    return out


def _delay_ms(delay: float | dt.timedelta) -> int:
    seconds = delay.total_seconds() if isinstance(delay, dt.timedelta) else float(delay)
    return round(seconds * 1000)


class SubscriptionConsumer:
    """The asyncio consumer of one subscription (create with `weir.aio.Client.subscribe`)."""

    def __init__(
        self,
        conn: Connection,
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
        on_reconnect: Callable[[WeirError], None] | None = None,
        sticky_ranges: Iterable[tuple[int, int]] | None = None,
        retry_enable: bool = False,
    ) -> None:
        if receiver_queue_size < 1:
            raise BadRequestError(f"receiver_queue_size must be >= 1, got {receiver_queue_size}")
        self.conn = conn
        self.target = conn  # the broker the stream goes to: in a cluster, the owner's
        self.topic = topic
        self.subscription = subscription
        self._init = pb.SubscribeInit(
            topic=topic,
            subscription=subscription,
            type=type_code(type),
            initial_position=position_code(initial_position),
            consumer_name=consumer_name,
            permits=receiver_queue_size,
            ack_timeout_ms=0 if ack_timeout is None else _delay_ms(ack_timeout),
            no_create=not create,
        )
        since = position_time_ms(initial_position)
        if since is not None:
            self._init.initial_timestamp_ms = since
        if sticky_ranges is not None:
            ranges = list(sticky_ranges)
            if not ranges:
                raise BadRequestError("sticky_ranges needs at least one (start, end) range")
            for a, b in ranges:
                self._init.sticky_ranges.add(start=a, end=b)
        if dead_letter_policy is not None:
            if dead_letter_policy.max_redeliver_count < 1:
                raise BadRequestError("max_redeliver_count must be >= 1")
            self._init.max_redeliver_count = dead_letter_policy.max_redeliver_count
            self._init.dead_letter_topic = dead_letter_policy.dead_letter_topic
            self._init.retry_letter_topic = dead_letter_policy.retry_letter_topic
        self._init.retry_enable = retry_enable
        if self._init.ack_timeout_ms < 0:
            raise BadRequestError("ack_timeout must not be negative")
        self.receiver_queue_size = receiver_queue_size
        self.consumer_name = consumer_name
        self.on_reconnect = on_reconnect
        self.reconnects = 0
        self.last_error: WeirError | None = None
        self.server_generation = 0  # of the server behind the current stream
        self.retry_topic = ""  # with retry_enable: the retry topic, as its messages name it
        self._queue: deque[ReceivedMessage] = deque()
        self._queue_event = asyncio.Event()
        self._taken = 0
        self._call: Any = None
        self._generation = 0
        self._outbox: asyncio.Queue[tuple[int, pb.SubscribeRequest]] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None
        self._waiting: dict[int, asyncio.Future[None]] = {}
        self._ack_queue: deque[tuple[list[pb.MessageRange], asyncio.Future[None]]] = deque()
        self._acks_in_flight = 0
        self._ack_tasks: set[asyncio.Task[None]] = set()
        self.ack_requests = 0  # ack requests sent (acks are grouped: see acknowledge)
        self._ids = itertools.count(1)
        self._connected = asyncio.Event()
        self._new_stream = asyncio.Event()  # set at each stream's init
        self._error: WeirError | None = None
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None

    def start(self) -> SubscriptionConsumer:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="weir-consumer")
        return self

    def listen(self, listener: Callable[[SubscriptionConsumer, ReceivedMessage], Any]) -> None:
        """Call ``listener(consumer, message)`` for every message, in a task of its own
        (an ``async def`` listener is awaited); it acknowledges what it handled. A
        listener that raises is logged and the message negatively acknowledged."""

        async def run() -> None:
            while not self._closing and self._error is None:
                try:
                    msg = await self.receive(timeout=0.5)
                except WeirError:
                    return
                if msg is None:
                    continue
                try:
                    result = listener(self, msg)
                    if asyncio.iscoroutine(result):
                        await result
                except Exception:
                    log.exception("message listener failed; the message will come again")
                    with contextlib.suppress(WeirError):
                        await self.negative_acknowledge(msg)

        self._listener = asyncio.get_running_loop().create_task(run(), name="weir-listener")

    @property
    def connected(self) -> bool:
        return self._call is not None and self._connected.is_set() and self._error is None

    async def wait_connected(self, timeout: float | None = 30.0) -> SubscriptionConsumer:
        try:
            await asyncio.wait_for(self._connected.wait(), timeout)
        except TimeoutError:
            raise UnavailableError(
                f"consumer of {self.topic!r}/{self.subscription!r} not connected after {timeout} s"
                + (f": {self.last_error.message}" if self.last_error else "")
            ) from None
        if self._error is not None:
            raise self._error
        return self

    # ------------------------------------------------------------------ receive

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closing:
            raise ClosedError("consumer is closed")

    async def _wait_for_messages(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._queue:
            self._check()
            self._queue_event.clear()
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._queue_event.wait(), remaining)
            except TimeoutError:
                return bool(self._queue)
        return True

    async def receive(self, timeout: float | None = None) -> ReceivedMessage | None:
        """The next message; None when none came within ``timeout`` seconds."""
        if not await self._wait_for_messages(timeout):
            return None
        msg = self._queue.popleft()
        self._took(1)
        return msg

    async def receive_batch(
        self, max_messages: int = 100, timeout: float | None = None
    ) -> list[ReceivedMessage]:
        """Up to ``max_messages`` already here, waiting up to ``timeout`` for the first."""
        if not await self._wait_for_messages(timeout):
            return []
        n = min(max_messages, len(self._queue))
        out = [self._queue.popleft() for _ in range(n)]
        self._took(n)
        return out

    def _took(self, n: int) -> None:
        self._taken += n
        if self._taken >= max(1, self.receiver_queue_size // 2):
            permits, self._taken = self._taken, 0
            self._send(pb.SubscribeRequest(flow=pb.SubscribeFlow(permits=permits)))

    # ------------------------------------------------------------------ acks

    async def acknowledge(self, messages: MessageRef | Iterable[MessageRef]) -> None:
        """Acknowledge messages; returns once durable on the server.

        Acks are grouped (Pulsar's ack grouping, with the durable answer kept): while
        `MAX_ACKS_IN_FLIGHT` ack requests wait for their answer, the acks made meanwhile
        queue and go together in the next request; each call returns when the request
        that carried it is answered."""
        ranges = _ranges(messages, self.retry_topic)
        if not ranges:
            return
        self._check()
        if self._call is None:
            await self.wait_connected()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ack_queue.append((ranges, fut))
        self._send_acks()
        await fut

    def _send_acks(self) -> None:
        while self._ack_queue and self._acks_in_flight < MAX_ACKS_IN_FLIGHT:
            group: list[tuple[list[pb.MessageRange], asyncio.Future[None]]] = []
            n = 0
            while self._ack_queue and n < MAX_GROUPED_RANGES:
                item = self._ack_queue.popleft()
                group.append(item)
                n += len(item[0])
            self._acks_in_flight += 1
            task = asyncio.get_running_loop().create_task(self._ack_group(group))
            self._ack_tasks.add(task)
            task.add_done_callback(self._ack_tasks.discard)

    async def _ack_group(
        self, group: list[tuple[list[pb.MessageRange], asyncio.Future[None]]]
    ) -> None:
        try:
            ranges = [r for rs, _ in group for r in rs]
            self.ack_requests += 1
            try:
                await self._request(
                    lambda rid: pb.SubscribeRequest(
                        ack=pb.AckRequest(request_id=rid, ranges=ranges)
                    )
                )
            except WeirError as err:
                if len(group) == 1 or err.retryable:
                    for _, fut in group:
                        if not fut.done():
                            fut.set_exception(err)
                    return
                # one call's bad ack refused the whole request: each on its own, so that
                # the others are applied and only that one fails (acks are all or nothing)
                for rs, fut in group:
                    try:
                        await self._request(
                            lambda rid, rs=rs: pb.SubscribeRequest(  # type: ignore[misc]
                                ack=pb.AckRequest(request_id=rid, ranges=rs)
                            )
                        )
                    except WeirError as one:
                        if not fut.done():
                            fut.set_exception(one)
                    else:
                        if not fut.done():
                            fut.set_result(None)
                return
            for _, fut in group:
                if not fut.done():
                    fut.set_result(None)
        finally:
            self._acks_in_flight -= 1
            self._send_acks()

    def acknowledge_future(
        self, messages: MessageRef | Iterable[MessageRef]
    ) -> asyncio.Future[None]:
        """Send an acknowledgement and return at once: the future resolves once it is durable
        (or with its error). Lets a consumer go on receiving while acks are in flight."""
        return asyncio.ensure_future(self.acknowledge(messages))

    async def acknowledge_cumulative(self, message: MessageRef) -> None:
        """Acknowledge every message of ``message``'s partition up to and including it
        (Exclusive and Failover subscriptions only)."""
        ranges = _ranges(message, self.retry_topic)
        await self._request(
            lambda rid: pb.SubscribeRequest(
                ack=pb.AckRequest(request_id=rid, ranges=ranges, cumulative=True)
            )
        )

    async def negative_acknowledge(
        self, messages: MessageRef | Iterable[MessageRef], delay: float | dt.timedelta = 0
    ) -> None:
        """Have messages delivered again after ``delay`` seconds, their redelivery count raised."""
        ranges = _ranges(messages, self.retry_topic)
        ms = _delay_ms(delay)
        await self._request(
            lambda rid: pb.SubscribeRequest(
                nack=pb.NackRequest(request_id=rid, ranges=ranges, delay_ms=ms)
            )
        )

    async def reconsume_later(
        self, messages: MessageRef | Iterable[MessageRef], delay: float | dt.timedelta
    ) -> None:
        """Consume messages again after ``delay`` seconds, through the retry letter topic
        (subscribe with ``retry_enable=True``): they are copied there with their key and
        properties and a ``reconsume_count`` one higher, then acknowledged here; they come
        back to this subscription's consumers after the delay. Past the dead-letter
        policy's ``max_redeliver_count`` they go to the dead-letter topic instead.
        Returns once durable."""
        if not self._init.retry_enable:
            raise BadRequestError("reconsume_later needs subscribe(..., retry_enable=True)")
        ranges = _ranges(messages, self.retry_topic)
        ms = _delay_ms(delay)
        if ms < 0:
            raise BadRequestError(f"a reconsume delay must not be negative, got {delay!r}")
        await self._request(
            lambda rid: pb.SubscribeRequest(
                reconsume=pb.ReconsumeRequest(request_id=rid, ranges=ranges, delay_ms=ms)
            )
        )

    async def seek(
        self,
        offsets: Mapping[int, int] | None = None,
        *,
        timestamp: dt.datetime | int | None = None,
        timeout: float | None = 30.0,
    ) -> None:
        """Move the subscription (partition -> first offset to deliver, or every partition
        to a time): what was received and not acknowledged is dropped, and delivery
        starts again from there (the consumer reconnects, as all the subscription's do)."""
        req = pb.SeekSubscriptionRequest(
            topic=self.topic,
            subscription=self.subscription,
            offsets=[pb.PartitionOffset(partition=p, offset=o) for p, o in (offsets or {}).items()],
        )
        if timestamp is not None:
            ms = timestamp if isinstance(timestamp, int) else round(timestamp.timestamp() * 1000)
            req.timestamp_ms = ms
        self._check()
        self._new_stream.clear()
        await self.target.call("SeekSubscription", req, timeout)
        # the server dropped every consumer of the subscription: once this one is back on
        # a new stream, nothing received before the seek is left in its queue
        try:
            await asyncio.wait_for(self._new_stream.wait(), timeout)
        except TimeoutError:
            raise UnavailableError(
                f"consumer of {self.topic!r}/{self.subscription!r} did not reconnect after the "
                f"seek within {timeout} s (the seek itself is done)"
            ) from None
        self._check()

    async def unsubscribe(self) -> None:
        """Delete the subscription (this must be its last consumer) and close."""
        await self._request(
            lambda rid: pb.SubscribeRequest(unsubscribe=pb.UnsubscribeRequest(request_id=rid))
        )
        await self.close()

    async def _request(self, make: Callable[[int], pb.SubscribeRequest]) -> None:
        self._check()
        if self._call is None:
            await self.wait_connected()
        rid = next(self._ids)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        self._send(make(rid))
        try:
            await fut
        finally:
            self._waiting.pop(rid, None)

    def _on_ack(self, r: pb.AckResponse) -> None:
        fut = self._waiting.pop(r.request_id, None)
        if fut is None or fut.done():
            return
        if r.HasField("error"):
            fut.set_exception(error_from_code(r.error.code, r.error.message))
        else:
            fut.set_result(None)

    # ------------------------------------------------------------------ stream

    def _send(self, req: pb.SubscribeRequest) -> None:
        if self._call is not None:
            self._outbox.put_nowait((self._generation, req))

    async def _write_outbox(self, call: Any, generation: int) -> None:
        while True:
            gen, req = await self._outbox.get()
            if gen != generation:
                continue
            try:
                await call.write(req)
            except Exception as exc:
                log.debug("subscribe stream write failed: %r", exc)
                return

    def _end_stream(self, call: Any, err: WeirError) -> None:
        self._call = None
        self._connected.clear()
        if self._writer is not None:
            self._writer.cancel()
            self._writer = None
        if call is not None:
            call.cancel()
        self._queue.clear()  # not taken yet: the server delivers these again
        self._taken = 0
        lost = UnavailableError(
            f"connection lost before the server answered ({err.message}); "
            "an acknowledgement may or may not have been applied: repeating it is safe"
        )
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(lost)
        self._waiting.clear()
        while self._ack_queue:  # grouped acks not sent yet: never applied, but say so alike
            _, fut = self._ack_queue.popleft()
            if not fut.done():
                fut.set_exception(lost)

    async def _run(self) -> None:
        backoff = Backoff()
        while not self._closing:
            call = None
            try:
                call = self.target.subscribe()
                await call.write(pb.SubscribeRequest(init=self._init))
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    raise UnavailableError("server ended the subscribe stream")
                if resp.WhichOneof("kind") == "error":
                    raise error_from_code(resp.error.code, resp.error.message)
                self.consumer_name = resp.init.consumer_name
                self.server_generation = resp.init.generation
                self.retry_topic = resp.init.retry_topic
                self._generation += 1
                self._call = call
                self._writer = asyncio.get_running_loop().create_task(
                    self._write_outbox(call, self._generation)
                )
                self.target.ever_connected = True
                backoff.reset()
                self._connected.set()
                self._new_stream.set()
                while True:
                    resp = await call.read()
                    if resp is grpc.aio.EOF:
                        if self._closing:
                            return
                        raise UnavailableError("server ended the subscribe stream")
                    kind = resp.WhichOneof("kind")
                    if kind == "messages":
                        self._on_messages(resp.messages)
                    elif kind == "ack":
                        self._on_ack(resp.ack)
                    elif kind == "error":
                        raise error_from_code(resp.error.code, resp.error.message)
            except asyncio.CancelledError:
                if call is not None:
                    call.cancel()
                raise
            except (WeirError, grpc.aio.AioRpcError) as exc:
                err = error_from_rpc(exc) if isinstance(exc, grpc.aio.AioRpcError) else exc
                fast = self.target.unreachable(err)
                if fast is not None:
                    err = fast
                self.last_error = err
                self._end_stream(call, err)
                if self._closing:
                    return
                if not err.retryable or fast is not None:
                    self._error = err
                    self._connected.set()
                    self._queue_event.set()
                    return
                self.reconnects += 1
                delay = backoff.next_delay()
                log.warning("consumer: %s; reconnecting within %.2f s", err.message, delay)
                if self.on_reconnect is not None:
                    try:
                        self.on_reconnect(err)
                    except Exception:
                        log.exception("on_reconnect callback of the consumer failed")
                if await self._follow_owner(err, backoff):
                    continue  # the owner is elsewhere: go there now
                await self.target.pause(delay)

    async def _follow_owner(self, err: WeirError, backoff: Backoff) -> bool:
        """Cluster mode: after a not-owner answer (the partition moved, or was never
        served by this broker), or a failure of the owner's broker, subscribe at the
        broker owning the partition the error names (the topic's first partition
        otherwise); True when that is another broker than the last one (go at once).
        The subscription's cursors moved with the partition: the new owner delivers
        from what was acknowledged. One stream subscribes at one broker: a topic whose
        partitions several brokers serve needs a consumer per partition for now."""
        if not (
            isinstance(err, NotOwnerError)
            or self.target is not self.conn
            or self.conn.can_fail_over
        ):
            return False
        before = self.target
        if isinstance(err, NotOwnerError) and err.topic:
            topic, part = err.topic, (err.partition if err.partition >= 0 else None)
        else:
            topic, part = self.topic, None
        found = await self.conn.owners.lookup(topic, part)
        self.target = found or self.conn
        if self.target is not before:
            log.info("consumer: %s/%s is served at %s now", topic, part, self.target.endpoint)
        return self.target is not before and backoff.attempt <= 3

    def _on_messages(self, m: pb.SubscriptionMessages) -> None:
        offsets = list(m.offsets)
        if offsets:
            self._queue.extend(
                _received(m.topic, m.partition, list(m.chunks), offsets, list(m.redelivery_counts))
            )
            self._queue_event.set()

    async def close(self, timeout: float | None = 10.0) -> None:
        """Stop consuming: the server gives this consumer's unacknowledged messages to others.
        Acks already answered are durable; await them before closing."""
        if self._closing:
            return
        self._closing = True
        call = self._call
        if self._listener is not None and self._listener is not asyncio.current_task():
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, timeout)
        self._end_stream(call, ClosedError("consumer is closed"))
        self._queue_event.set()
        if self._ack_tasks:  # their requests failed with the stream: let them finish
            await asyncio.gather(*self._ack_tasks, return_exceptions=True)

    async def __aenter__(self) -> SubscriptionConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
