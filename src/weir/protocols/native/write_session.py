"""The native front's write session (StreamWrite).

It validates each batch (header, both CRCs, column structure, producer id) and
queues it on the partition actor in arrival order; acks go back in the same
order as the commits complete (on the native TCP port straight from the actor's
turn, `WriteSession._ack_now`; otherwise from the session's ack task). The first
error ends the session. A session whose init names a transaction writes every
batch into it (see `weir.broker.transactions`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import operator
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import grpc

from weir.access_mode import AccessMode
from weir.broker.broker import Broker
from weir.broker.partition_actor import write_failed
from weir.broker.topics import PERSISTENT, short_topic
from weir.errors import (
    BadRequestError,
    MessageTooLargeError,
    OverloadedError,
    ProducerFencedError,
    UnavailableError,
    WeirError,
)
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.stream import Allow, Responses, allow_all, error_proto
from weir.protocols.native.transactions import transaction_owner
from weir.protocols.native.wire import (
    RawWriteRequest,
)
from weir.security.grants import Permission
from weir.storage.batch import BatchHeader, decode_payload
from weir.storage.incoming import IncomingBatch, validate_incoming
from weir.storage.partition import BatchResult

log = logging.getLogger("weir.native")


class WriteSession:
    """One StreamWrite: init, then batches in, acks out in order; the first error ends it."""

    def __init__(
        self,
        broker: Broker,
        context: grpc.aio.ServicerContext | Responses,
        stopping: asyncio.Event | None = None,
        allow: Allow | None = None,
    ) -> None:
        self.broker = broker
        self.context = context
        self.stopping = stopping or asyncio.Event()
        self.allow: Allow = allow or allow_all
        self.session_id = uuid.uuid4().hex[:16]
        self.txn_id = 0
        self.owner = ""
        self._pending: deque[tuple[asyncio.Future[list[BatchResult]], int]] = deque()
        self._have_pending = asyncio.Event()
        self._inflight = 0
        self._failure: BaseException | None = None
        self._done = asyncio.Event()
        # acks sent in the actor's turn when the connection takes them at once (the native
        # TCP port); the ack task sends the rest, and never while it is writing one itself
        self._immediate = getattr(context, "write_nowait", None)
        self._acking = False

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
            self.txn_id = init.transaction_id
            self.owner = transaction_owner()
            if self.txn_id:
                self.broker.transaction(self.txn_id, self.owner)  # known, open, not fenced
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
            if self.broker.cluster is not None and cfg.kind == PERSISTENT:
                # a cluster: NOT_OWNER before the producer is admitted (an exclusive
                # producer's attempt at a non-owner would grow the topic's epoch)
                self.broker.actor(cfg.name, self.partition)
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
            last = None
            if self.producer_id and self.txn_id:
                last = self.broker.last_seq_no_in_transaction(
                    cfg.name, self.partition, self.producer_id, self.txn_id
                )
            elif self.producer_id:
                last = self.broker.last_seq_no(cfg.name, self.partition, self.producer_id)
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
        except Exception as err:  # the stop above too
            self._immediate = None  # the error is the last frame: no ack after it
            if not isinstance(err, WeirError):
                log.exception(
                    "write session failed",
                    extra={"session": self.session_id, "topic": getattr(self, "topic", "")},
                )
            # gRPC takes one write at a time: stop the acker before sending the error
            await _stop(reader, acker)
            with contextlib.suppress(Exception):
                await self.context.write(pb.WriteResponse(error=error_proto(err)))
        finally:
            # ended (cancelled too: a revoked grant, a stop past its grace): a write still
            # committing must not be acked after the error its connection gets next
            self._immediate = None
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
                if self._failure is not None or self._a_write_failed():
                    return  # failed, fenced or superseded: nothing more of this session is stored
                if self._inflight and self._inflight + nbytes > cfg.max_session_inflight_bytes:
                    self.broker.observer.on_refused(self.topic, self.partition, "overloaded")
                    raise OverloadedError(
                        f"write session has {self._inflight} bytes unacknowledged "
                        f"(limit {cfg.max_session_inflight_bytes}); slow down"
                    )
                if self.txn_id:
                    fut = self.broker.submit_in_transaction(
                        self.txn_id, self.topic, self.partition, batches, nbytes, self.owner
                    )
                else:
                    fut = self.broker.submit(
                        self.topic,
                        self.partition,
                        batches,
                        nbytes,
                        on_done=self._ack_now if self._immediate is not None else None,
                    )
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

    def _a_write_failed(self) -> bool:
        """Whether the partition actor failed a write of this session that the ack task has
        not seen yet (it hears of it turns later): the newest pending write tells
        (`write_failed`)."""
        return bool(self._pending) and write_failed(self._pending[-1][0])

    def _check_producer(self, h: BatchHeader) -> None:
        if h.producer_id != self.producer_id:
            raise BadRequestError(
                f"batch producer_id {h.producer_id!r} differs from the session's {self.producer_id!r}"
            )

    def _ack_now(self) -> None:
        """The partition actor resolved one of this session's writes: send the acks of the
        resolved writes at the head of the queue now, in the actor's turn. Awaited by the
        ack task, the ack went out two turns of the loop later, after the actor had
        prepared its next write (bench/latency_breakdown.py: "apply + session ack task").
        What cannot go at once (a failure, the end of input, a connection that must
        drain, an ack the task is writing) is left to the ack task, in order."""
        write_nowait = self._immediate
        pending = self._pending
        if write_nowait is None or self._acking or self._failure is not None:
            return
        while pending:
            fut, nbytes = pending[0]
            if not fut.done() or fut.cancelled() or fut.exception() is not None:
                return
            results = fut.result()
            if results is None or not write_nowait(_ack_response(results)):
                return
            pending.popleft()
            self._inflight -= nbytes

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
                if not self._pending or self._pending[0][0] is not fut:
                    continue  # acknowledged in the actor's turn (_ack_now)
                self._pending.popleft()
                if results is None:  # end of input
                    self._done.set()
                    return
                self._inflight -= nbytes
                self._acking = True
                try:
                    await self.context.write(_ack_response(results))
                finally:
                    self._acking = False
        except asyncio.CancelledError:
            raise
        except BaseException as err:
            self._fail(err)


def _ack_response(results: list[BatchResult]) -> pb.WriteResponse:
    acks = [pb.BatchAck(offset=r.offset, written=r.written, skipped=r.skipped) for r in results]
    return pb.WriteResponse(ack=pb.WriteAck(acks=acks))


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
