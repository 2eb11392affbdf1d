"""The writer's stream: the session loop (init, reconnect with backoff, give up on a
fatal error or after ``delivery_timeout``), the sender that sends new requests and
resends unacknowledged ones on a new stream, and the acks that become results."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import grpc

from weir.client.connection import error_from_rpc
from weir.client.delivery import StallClock
from weir.client.write_buffer import Request, Sent
from weir.client.writer_settings import WriteResult
from weir.client.writer_state import WriterState
from weir.errors import (
    UnavailableError,
    WeirError,
    error_from_code,
)
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.wire import RawWriteRequest

log = logging.getLogger("weir.client.writer")


class WriteStream(WriterState):
    """The background tasks of a writer: session, sender, watchdog."""

    if TYPE_CHECKING:  # provided by `weir.client.write_batching.WriteBatching`

        def _take(self) -> list[Sent]: ...

    async def _session_loop(self) -> None:
        while not self._closed:
            call = None
            try:
                call = self.target.stream_write()
                await call.write(self._init_request())
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    raise UnavailableError("server closed the write stream during init")
                kind = resp.WhichOneof("kind")
                if kind == "error":
                    raise error_from_code(resp.error.code, resp.error.message)
                if kind != "init":
                    raise UnavailableError(f"unexpected {kind} before init result")
                self.target.got_through(call)
                self._on_init(resp.init)
                self._call_id += 1
                self._call = call
                self._ready.set()
                self._init_done.set()
                self._inited.set()
                self._wake.set()
                # a sender parked on a full in-flight window (all sent on the old stream,
                # never to be acked) must wake up to resend them on this one
                self._inflight_event.set()
                # no backoff.reset() here: refusals (partition full, overloaded) come after
                # the init; the first ack on this stream resets it (see _on_ack)
                await self._receive(call)
                if self._half_closed:  # by close(): the server let go of the session
                    self._stream_ended.set()
                    return
                raise UnavailableError("server ended the write stream")
            except asyncio.CancelledError:
                if call is not None:
                    call.cancel()
                raise
            except (WeirError, grpc.aio.AioRpcError) as exc:
                err = error_from_rpc(exc) if isinstance(exc, grpc.aio.AioRpcError) else exc
                self._ready.clear()
                self._call = None
                if call is not None:
                    call.cancel()
                if self._half_closed:  # by close(), all acknowledged: nothing to fail or resend
                    self._stream_ended.set()
                    return
                delay = self._lost(err, getattr(call, "endpoint", None))
                if delay is None:
                    return
                if await self._follow_owner(err):
                    continue  # the owner is elsewhere: go there now
                await self.target.pause(delay)  # ends early when the connection is back
            except Exception as exc:  # a bug: fail loudly rather than hang
                log.exception("writer session failed")
                self._fail(UnavailableError(f"writer failed: {exc!r}"))
                return

    async def _follow_owner(self, err: WeirError) -> bool:
        """Cluster mode: after a not-owner answer, or a failure of the owner's broker, find
        the partition's owner and send the next stream there; True when that is another
        broker than the last one (go at once), False when it is the same (back off)."""
        if not self._follow_due(err):
            return False
        part = self._owner_partition(err)
        before = self.target
        found = await self.conn.owners.lookup(self.topic, part)
        return self._followed(before, found, part)

    def _init_request(self) -> pb.WriteRequest:
        """The request that opens (or reopens) this writer's session."""
        init = pb.WriteInit(topic=self.topic, producer_id=self.producer_id)
        if self.settings.partition is not None:
            init.partition = self.settings.partition
        elif self.routed and self.partition is not None:
            init.partition = self.partition  # reconnect: the home stays where it was
        init.routed = self.routed
        init.transaction_id = self.settings.transaction_id
        init.access_mode = int(self.settings.access_mode)  # type: ignore[assignment]
        if self.producer_epoch is not None and self.settings.access_mode.exclusive:
            init.producer_epoch = self.producer_epoch  # fenced if it grew since
        return pb.WriteRequest(init=init)

    def _on_init(self, r: Any) -> None:
        self.partition = r.partition
        self.generation = r.generation
        self.session_id = r.session_id
        self.producer_epoch = r.producer_epoch
        self.partitions = r.partitions or None
        self.last_seq_no = r.last_seq_no if r.HasField("last_seq_no") else None
        if not self._manual_seq:
            self._next_seq = max(self._next_seq, (self.last_seq_no or 0) + 1)
        self.limit.learn(r.max_message_bytes)

    async def _watchdog(self) -> None:
        """Give up when messages wait and none is acknowledged for ``delivery_timeout``."""
        limit = self.settings.delivery_timeout
        assert limit is not None
        tick = min(1.0, limit / 10)
        clock = StallClock()
        while not self._closed and self._error is None:
            await asyncio.sleep(tick)
            with self._lock:
                unacked, acked = self._unacked, self._acked
            if clock.observe(unacked, acked, self.loop.time()) >= limit:
                self._give_up(self._delivery_timeout(unacked, limit, self.conn.endpoint))
                return

    def _give_up(self, err: WeirError) -> None:
        """Fail the writer and stop reconnecting (from a task of its own)."""
        self._fail(err)
        me = asyncio.current_task()
        for t in self._tasks:
            if t is not me:
                t.cancel()
        call, self._call = self._call, None
        if call is not None:
            call.cancel()

    async def _receive(self, call: Any) -> None:
        while True:
            resp = await call.read()
            if resp is grpc.aio.EOF:
                return
            kind = resp.WhichOneof("kind")
            if kind == "ack":
                self._on_ack(resp.ack.acks)
            elif kind == "error":
                raise error_from_code(resp.error.code, resp.error.message)

    def _on_ack(self, acks: Any) -> None:
        if not self._inflight:
            raise UnavailableError("ack for nothing in flight")
        req = self._inflight.popleft()
        if len(acks) != len(req.batches):
            raise UnavailableError(f"ack for {len(acks)} batches, request had {len(req.batches)}")
        n = nbytes = 0
        part = self.partition if self.partition is not None else -1
        for sent, ack in zip(req.batches, acks, strict=True):
            n += sent.count
            nbytes += sent.nbytes
            if sent.futures is not None:
                for i, fut in enumerate(sent.futures):
                    if fut is None or fut.done():
                        continue
                    seq = sent.seqs[i] if sent.seqs is not None else sent.first_seq + i
                    if i < ack.skipped:
                        fut.set_result(WriteResult(part, None, seq, True))
                    else:
                        fut.set_result(WriteResult(part, ack.offset + i - ack.skipped, seq, False))
        self._backoff.reset()  # progress: the next failure starts the backoff over
        with self._lock:
            self._unacked -= n
            self._unacked_bytes -= nbytes
            self._acked += n
            self._space.notify_all()
        self._space_event.set()
        self._acked_event.set()
        self._inflight_event.set()

    async def _sender(self) -> None:
        s = self.settings
        try:
            while True:
                with self._lock:
                    empty = not self._buf.data and not self._blocks
                    if empty:
                        self._sender_idle = True
                        self._wake.clear()
                resend = self._ready.is_set() and any(
                    r.sent_on != self._call_id for r in self._inflight
                )
                if empty and not resend:
                    await self._wake.wait()
                    continue
                if not self._ready.is_set():
                    await self._ready.wait()
                    continue
                call, call_id = self._call, self._call_id
                # resend what the current stream has not seen (after a reconnect), in order
                for req in list(self._inflight):
                    if req.sent_on != call_id:
                        req.sent_on = call_id
                        await self._send(call, req)
                if empty:
                    continue
                if len(self._inflight) >= s.max_inflight_requests:
                    self._inflight_event.clear()
                    await self._inflight_event.wait()
                    continue
                if s.linger_ms and self._buf_bytes < s.max_batch_bytes:
                    await asyncio.sleep(s.linger_ms / 1000)
                batches = self._take()
                if not batches:
                    continue
                req = Request(batches, call_id)
                self._inflight.append(req)
                await self._send(call, req)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("writer sender failed")
            self._fail(UnavailableError(f"writer sender failed: {exc!r}"))

    async def _send(self, call: Any, req: Request) -> None:
        try:
            await call.write(RawWriteRequest([b.data for b in req.batches]))
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the writer is closing
            # grpc.aio raises CancelledError on a call the session loop cancelled
            self._not_ready(call)
        except (
            grpc.aio.AioRpcError,
            grpc.aio.UsageError,
            asyncio.InvalidStateError,
            OSError,  # the native TCP port's connection (weir.client.tcp_call)
            UnavailableError,
        ) as exc:
            # the stream broke; the session loop reconnects and we resend
            log.debug("write stream broke while sending: %r", exc)
            self._not_ready(call)

    def _not_ready(self, call: Any) -> None:
        """A send on ``call`` failed: the sender waits for the next stream. Only if ``call``
        is still the current one: a send to a stream the session loop has already replaced
        (it can end after the new stream is up, now that reconnects follow the connection
        at once) must not park the sender on a healthy stream, where nothing would wake it
        until the delivery timeout."""
        if call is self._call:
            self._ready.clear()
