"""The sync writer on the native TCP port, driven by the caller's thread.

The sync client's other writers run their sender and ack reader as tasks in the
client's loop thread, so every request is a hand-off from the producing thread to
that thread, and the two contend for the GIL (a 100 B produce loop ran slower over
TCP than over gRPC for that reason). This writer is the sync twin of the asyncio
one in the way httpcore's sync connection is: it owns a plain socket, and the
caller's own calls drive it.

* ``write()`` buffers (the same buffer, batches and seq_nos as `WriterCore`), then
  sends at once when nothing is in flight (one message in flight costs no wait), and
  otherwise when the message is alone in the buffer (a slow producer's), once a
  millisecond, or when a part of a batch is buffered (a non-blocking read of the acks,
  then what is buffered goes as the in-flight window allows): what waits for the window
  piles up into bigger requests, with no thread hand-off.
* Acks are read when the caller waits (``flush()``, ``wait_init()``, a future's
  ``result()``, a full buffer) and whenever it sends: a non-blocking read.
* A lost connection or a retryable refusal: the next call that drives reconnects
  after the backoff and resends every unacknowledged request in order (the broker's
  dedup drops what it already has), as `weir.client.write_stream` does; both classify
  the loss with `WriterState._lost`. In a cluster, a not-owner answer or the failure of
  the owner's broker makes that call look the partition's owner up first (`_follow`)
  and connect to the owner's native TCP port.
* A caller that leaves work behind (a message buffered behind one in flight, acks
  for futures nobody waits on) is not left stranded: a timer in the client's loop
  thread looks every `IDLE_TICK_S` while there is work, and drives the writer only
  when the caller has not written since the last look. While the caller writes, the
  tick does no I/O at all, so the hot path has no hand-off.

Used by `weir.Client.writer` for ``transport="tcp"`` writers with one session (a
``partition=`` or ``routing="pinned"``); routing writers and gRPC keep the loop's
writer. ``on_reconnect`` runs in whichever thread drives the writer.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as dt
import errno
import itertools
import select
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures._base import PENDING
from time import time as _time
from typing import Any

from google.protobuf.message import DecodeError

from weir.client.connection import Connection
from weir.client.deliver_at import with_deliver_at
from weir.client.delivery import StallClock
from weir.client.loop import LoopThread
from weir.client.write_buffer import AnyFuture, Request
from weir.client.write_compiled import FastWrite
from weir.client.writer import WriterCore
from weir.client.writer_settings import WriteResult, WriterSettings
from weir.errors import (
    ClosedError,
    TokenRejectedError,
    UnauthorizedError,
    UnavailableError,
    WeirError,
    WeirTimeoutError,
    error_from_code,
)
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.framing import HEADER, MAGIC, METHOD_WRITE, VERSION, frame
from weir.protocols.native.wire import encode_write_request, write_request_parts

IDLE_TICK_S = 0.001
IDLE_TICKS_KEPT = 100  # ticks with nothing to do before the tick stops
CONNECT_TIMEOUT_S = 10.0
MAX_RESPONSE_BYTES = 16 << 20  # an ack is small: what a broken server could make us hold
_SLICE_S = 0.05  # a waiting caller lets other threads at the socket this often
LOOK_PER_S = 10_000  # `write_future` reads acks at most this often while requests are in flight
LOOK_BUFFERED = 4  # ... and only with this few messages buffered (a paced producer)
_RECV = 256 << 10
_GATHER_BYTES = 64 << 10  # a request (or a batch in it) this big is sent without a copy
_IOV_MAX = 512  # pieces per sendmsg (the kernel takes up to 1,024)
_GATHER = hasattr(socket.socket, "sendmsg")
_BLOCKED = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


class DrivenFuture(concurrent.futures.Future[WriteResult]):
    """A write's future whose ``result()`` / ``exception()`` drive the writer while they
    wait (nothing else reads the acks while the caller is busy).

    The futures of one writer share one condition (the writer's): a plain Future makes
    its own, 8 of its 11 new objects and about a microsecond, on every `write_future`;
    the garbage collector then ran once per ~60 messages of a paced producer. Sharing is
    safe because nobody sleeps on it: ``result()`` drives the socket instead of waiting,
    and waits on it only with a timeout of 0 (`concurrent.futures.wait` and
    ``as_completed`` wait on their own waiters, which ``set_result`` still notifies)."""

    def __init__(self, core: DirectWriterCore) -> None:
        # concurrent.futures.Future.__init__, with the condition shared
        self._condition = core._futures_cond
        self._state = PENDING
        self._result = None
        self._exception = None
        self._waiters = []
        self._done_callbacks: list[Callable[[concurrent.futures.Future[WriteResult]], object]] = []
        self._core = core

    def result(self, timeout: float | None = None) -> WriteResult:
        if not self.done():
            self._core.drive_until(self.done, timeout)
        return super().result(0 if not self.done() else None)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self.done():
            self._core.drive_until(self.done, timeout)
        return super().exception(0 if not self.done() else None)


# the compiled write's base type (its counters are C fields), or a plain object
_Base: type = FastWrite if FastWrite is not None else object


class DirectWriterCore(WriterCore, _Base):  # type: ignore[misc]
    """A `WriterCore` whose stream is a socket driven by the caller (module docstring).

    ``write`` is the compiled one (`weir.client.write_compiled`) when it is built: the
    common call in C, every other by `_write_py`, the reference."""

    def __init__(
        self,
        conn: Connection,
        topic: str,
        settings: WriterSettings,
        runner: LoopThread,
    ) -> None:
        super().__init__(conn, topic, settings, runner.loop)
        self._runner = runner
        self._io = threading.RLock()  # the socket and the in-flight requests: one driver
        self._futures_cond = threading.Condition()  # every DrivenFuture's (see there)
        self._sock: socket.socket | None = None
        self._rbuf = bytearray()
        self._wq: deque[memoryview] = deque()  # bytes accepted for the socket, not yet sent
        self._hello_done = False
        self._session_up = False  # the init of this connection was answered
        self._token = ""
        self._retry_at = 0.0  # monotonic time before which no reconnect is tried
        self._stall = StallClock()
        # buffered bytes that make a write() drive the socket: 0 when nothing is in flight
        # (or no connection: it reconnects once the backoff allows), else part of a batch
        self._pump_at = 0
        self._pumped = 0  # the millisecond of the caller's last time-driven step
        self._looked = 0  # the 1 / LOOK_PER_S of `write_future`'s last read of acks
        self._seen_written = -1  # for the idle tick: has the caller written since?
        self._idle_ticks = 0  # ticks with nothing pending and nothing written
        # the inlined write: automatic seq_nos, no error, open; and the buffer's bounds
        self._fast = False  # until a write has set the seq_no mode
        self._max_n = settings.max_buffer_messages
        self._max_b = settings.max_buffer_bytes
        self._armed = False
        self._connecting = False  # an idle reconnect runs in the loop's executor
        # cluster mode: the error after which the owner is looked up before reconnecting
        self._follow_err: WeirError | None = None
        self._follow_delay = 0.0  # the backoff, when the lookup finds the same broker

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Open the connection (hello and init go out; the answer is read later)."""
        with self._io:
            self._step(0.0)
        self._arm()

    def wait_init_sync(self, timeout: float | None) -> None:
        self.drive_until(lambda: self._init_done.is_set(), timeout)
        self._raise_error()
        if not self._init_done.is_set():
            raise WeirTimeoutError(
                f"writer to {self.topic!r} at {self.target.tcp_endpoint} not connected after "
                f"{timeout or 0:g} s{self._why()}"
            )

    def flush_sync(self, timeout: float | None) -> None:
        """Send everything buffered and wait until it is all acknowledged."""
        if self._closed:
            raise ClosedError(f"writer to {self.topic!r} is closed")
        with self._lock:
            target = self._written
        done = self.drive_until(lambda: self._acked >= target, timeout, force=True)
        self._raise_error()
        if not done:
            if self._closed:
                raise ClosedError(f"writer to {self.topic!r} was closed during the flush")
            raise WeirTimeoutError(
                f"flush timed out: {target - self._acked} messages to {self.topic!r} not "
                f"acknowledged after {timeout or 0:g} s{self._why()}"
            )

    def close_sync(self, timeout: float | None) -> None:
        """As `WriterCore.close`: flush (bounded), then stop; later calls raise ClosedError."""
        if self._closed:
            return
        with self._lock:
            self._closing = True
            self._fast = False
        try:
            if self._error is None:
                self._closed_flush(timeout)
            elif self._unacked and not self._error_seen:
                self._raise_error()
        finally:
            with self._io:
                with self._lock:
                    self._closed = True
                    self._space.notify_all()
                self._drop_socket()
                self._fail_pending(ClosedError("writer closed before the message was acknowledged"))

    def abandon(self) -> None:
        """The client closes under the writer: drop the connection (what is not acknowledged
        fails with ClosedError, as the loop's writers' tasks end with the client's loop)."""
        with self._io:
            with self._lock:
                self._closing = self._closed = True
                self._fast = False
                self._space.notify_all()
            self._drop_socket()
            self._fail_pending(ClosedError("client closed before the message was acknowledged"))

    def _closed_flush(self, timeout: float | None) -> None:
        with self._lock:
            target = self._written
        if not self.drive_until(lambda: self._acked >= target, timeout, force=True):
            self._raise_error()
            if self._closed:
                raise ClosedError(f"writer to {self.topic!r} was closed during the flush")
            raise WeirTimeoutError(
                f"flush timed out: {target - self._acked} messages to {self.topic!r} not "
                f"acknowledged after {timeout or 0:g} s{self._why()}"
            )
        self._raise_error()

    # ------------------------------------------------------------------ the caller's hooks

    def _write_py(
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
        """`weir.Writer.write` itself (the sync writer binds it: one Python call per write,
        not two), with the common call inlined: bytes and nothing else, room in the
        buffer: a lock, two appends and a comparison; anything else goes the general way.
        The compiled write does the same common call and hands every other to this one."""
        if (
            type(data) is bytes
            and key is None
            and headers is None
            and seq_no is None
            and created_at is None
            and deliver_at is None
            and deliver_after is None
        ):
            size = len(data)
            ms = int(_time() * 1000)
            with self._lock:
                ok = (
                    self._fast
                    and self._unacked < self._max_n
                    and self._unacked_bytes < self._max_b
                    and size <= self.limit.bytes
                )
                if ok:
                    b = self._buf
                    b.data.append(data)
                    b.created.append(ms)
                    self._buf_bytes += size
                    self._unacked += 1
                    self._unacked_bytes += size
                    self._written += 1
            if ok:
                # acks in, what is buffered out: once a millisecond, and whenever the
                # message is alone in the buffer (a slow producer's, or the first since the
                # last look); each look costs a read of the socket
                if ms != self._pumped or self._buf_bytes == size:
                    self._pumped = ms
                    self._pump(True)
                elif self._buf_bytes >= self._pump_at:
                    self._pump(False)
                if not self._armed:
                    self._arm()
                return
        if deliver_at is not None or deliver_after is not None:
            headers = with_deliver_at(headers, deliver_at, deliver_after)
        self.write_threadsafe(data, key, headers, seq_no, created_at, timeout)

    write = FastWrite.write if FastWrite is not None else _write_py

    def _pump(self, force: bool) -> None:
        """The compiled write's step: acks in, what is buffered out (see `_write_py`)."""
        with self._io:
            self._step(0.0, force)

    def write_threadsafe(
        self,
        data: Any,
        key: Any = None,
        headers: Mapping[str, str] | None = None,
        seq_no: int | None = None,
        created_at: Any = None,
        timeout: float | None = None,
        fut: AnyFuture | None = None,
    ) -> None:
        """`WriteBatching.write_threadsafe`; after it, whether `write` may take its inlined
        way (automatic seq_nos, no error, open)."""
        super().write_threadsafe(data, key, headers, seq_no, created_at, timeout, fut)
        with self._lock:
            self._fast = self._manual_seq is False and self._ok()

    def _ok(self) -> bool:
        return self._error is None and not (self._closing or self._closed)

    def _fail(self, err: WeirError) -> None:
        with self._lock:
            self._fast = False
        super()._fail(err)

    def _wrote_threadsafe(self, wake: bool) -> None:
        """After a buffered write (not the inlined one): send now when nothing is in
        flight, or a batch is full (see `_pump_at`)."""
        now = _time()
        ms = int(now * 1000)
        look = int(now * LOOK_PER_S)
        if ms != self._pumped or self._buf_bytes >= self._pump_at:
            self._pumped = ms
            with self._io:
                self._step(0.0, True)
        elif self._inflight and len(self._buf.data) <= LOOK_BUFFERED and look != self._looked:
            # a paced producer's futures (few buffered): read the acks that came, at most
            # every 100 µs (a look is a recv; once a millisecond left ~0.5 ms on each ack's
            # way); a fast producer's buffer is fuller and it waits for the millisecond
            self._looked = look
            with self._io:
                self._step(0.0, False)
        if not self._armed:
            self._arm()

    def _wait_space_locked(self, remaining: float | None) -> None:
        """The buffer is full: drive the socket (the lock released) until an ack makes room."""
        self._lock.release()
        try:
            with self._io:
                self._step(min(_SLICE_S, remaining) if remaining is not None else _SLICE_S, True)
        finally:
            self._lock.acquire()

    def _await_limit_threadsafe(self, size: int, timeout: float | None) -> None:
        wait = self._limit_wait(timeout)
        self.drive_until(lambda: self._inited.is_set(), wait)
        if not self._inited.is_set() or self._error is not None:
            raise self._limit_unknown(size, wait)

    def drive_until(
        self, cond: Callable[[], bool], timeout: float | None, force: bool = False
    ) -> bool:
        """Drive the socket until ``cond()`` holds, the writer fails, or ``timeout`` passes;
        ``force``: send what is buffered even while requests are in flight."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not cond():
            if self._error is not None or self._closed:
                return cond()
            wait = _SLICE_S
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return cond()
                wait = min(wait, left)
            with self._io:
                if cond():
                    break
                self._step(wait, force)
        return True

    # ------------------------------------------------------------------ the idle tick

    def _arm(self) -> None:
        with self._lock:
            if self._armed or self._closed:
                return
            self._armed = True
        with contextlib.suppress(RuntimeError):  # the client's loop is stopping
            self.loop.call_soon_threadsafe(self._schedule)

    def _schedule(self) -> None:
        self.loop.call_later(IDLE_TICK_S, self._tick)

    def _pending(self) -> bool:
        return bool(
            self._buf.data
            or self._blocks
            or self._inflight
            or self._wq
            or (self._sock is None and self._unacked)
        )

    def _tick(self) -> None:
        """In the loop thread: drive the writer only if its caller left it alone since the
        last tick; look again while work is pending."""
        if self._closed or self._error is not None:
            self._armed = False
            return
        if self._written != self._seen_written:  # the caller is at work: do nothing
            self._seen_written = self._written
            self._schedule()
            return
        if self._io.acquire(blocking=False):
            try:
                if self._sock is None and not self._connecting and self._pending():
                    # connecting blocks (and may log in through this loop): not here
                    self._connecting = True
                    self.loop.run_in_executor(None, self._idle_connect)
                elif self._sock is not None:
                    self._step(0.0, True, connect=False)
            finally:
                self._io.release()
        with self._lock:
            # a writer that goes quiet keeps its tick a while: a paced producer arms it once
            self._idle_ticks = 0 if self._pending() else self._idle_ticks + 1
            if self._closed or self._idle_ticks > IDLE_TICKS_KEPT:
                self._armed = False
                self._idle_ticks = 0
                return
        self._schedule()

    def _idle_connect(self) -> None:
        try:
            with self._io:
                if not self._closed:
                    self._step(0.0, True)
        finally:
            self._connecting = False

    # ------------------------------------------------------------------ one round of I/O

    def _step(self, wait: float, force: bool = False, connect: bool = True) -> None:
        """Connect if due, read what arrived (waiting up to ``wait`` for it), send what may
        go, and check the delivery timeout. Call with ``_io`` held."""
        if self._error is not None or self._closed:
            return
        try:
            if self._sock is None:
                if (
                    not connect
                    or time.monotonic() < self._retry_at
                    or (self._follow_err is not None and not self._follow())
                ):
                    self._check_stall()
                    if wait > 0:
                        time.sleep(min(wait, max(0.0, self._retry_at - time.monotonic())))
                    return
                self._connect()
            self._send_ready(force)
            self._read(wait)
            self._send_ready(force)
        except (OSError, WeirError) as exc:
            self._broken(exc)
        self._set_pump_at()
        self._check_stall()

    def _send_ready(self, force: bool) -> None:
        """Queue the requests that may go now and push queued bytes into the socket."""
        if self._session_up:
            for req in self._inflight:  # after a reconnect: resend, in order
                if req.sent_on != self._call_id:
                    req.sent_on = self._call_id
                    self._queue(req)
            s = self.settings
            while (self._buf.data or self._blocks) and len(
                self._inflight
            ) < s.max_inflight_requests:
                if not (force or not self._inflight or self._buf_bytes >= self._pump_at):
                    break
                batches = self._take()
                if not batches:
                    break
                req = Request(batches, self._call_id)
                self._inflight.append(req)
                self._queue(req)
        self._push()
        self._set_pump_at()

    def _set_pump_at(self) -> None:
        s = self.settings
        if self._sock is None or (self._session_up and not self._inflight):
            self._pump_at = 0
        elif self._wq or len(self._inflight) >= s.max_inflight_requests:
            # the window full, or the socket: look again after another part of a batch
            self._pump_at = self._buf_bytes + s.max_batch_bytes // 16
        else:
            self._pump_at = s.max_batch_bytes // 4

    def _queue(self, req: Request) -> None:
        batches = [b.data for b in req.batches]
        size, parts = write_request_parts(batches)
        wq = self._wq
        if size < _GATHER_BYTES or not _GATHER or isinstance(self._sock, ssl.SSLSocket):
            wq.append(memoryview(b"".join([HEADER.pack(size), *parts])))
            return
        # a big request: its batches go to the socket as they are (`_push` gathers the
        # pieces into one sendmsg), only the few bytes of framing between them are new;
        # joining them first copied every byte of a 10 KB producer's requests once more
        small: list[Any] = [HEADER.pack(size)]  # joined once before each big piece
        for part in parts:
            if len(part) < _GATHER_BYTES:
                small.append(part)
                continue
            if small:
                wq.append(memoryview(b"".join(small)))
                small = []
            wq.append(memoryview(part))
        if small:
            wq.append(memoryview(b"".join(small)))

    def _push(self) -> None:
        sock = self._sock
        assert sock is not None
        wq = self._wq
        # an SSLSocket has no sendmsg (nor has a socket on Windows)
        gather = _GATHER and not isinstance(sock, ssl.SSLSocket)
        while wq:
            try:
                if gather and len(wq) > 1:
                    n = sock.sendmsg(list(itertools.islice(wq, _IOV_MAX)))
                else:
                    n = sock.send(wq[0])
            except _BLOCKED:
                return  # the socket is full: what is left goes on a later step
            while n:  # drop what went, keep the rest of a piece sent in part
                first = wq[0]
                if n < len(first):
                    wq[0] = first[n:]
                    break
                n -= len(first)
                wq.popleft()

    def _read(self, wait: float) -> None:
        sock = self._sock
        assert sock is not None
        pending = isinstance(sock, ssl.SSLSocket) and sock.pending() > 0
        if wait > 0 and not pending:
            want_write = [sock] if self._wq else []
            r, _, _ = select.select([sock], want_write, [], wait)
            if not r:
                return
        while True:
            try:
                data = sock.recv(_RECV)
            except _BLOCKED:
                break
            if not data:
                raise UnavailableError("server ended the write stream")
            self._rbuf += data
            if len(data) < _RECV and not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                break
        self._frames()

    def _frames(self) -> None:
        buf = self._rbuf
        while len(buf) >= 4:
            (n,) = HEADER.unpack_from(buf)
            if n > MAX_RESPONSE_BYTES:
                raise UnavailableError(
                    f"the write stream's connection was lost: a frame of {n} bytes exceeds "
                    f"the limit of {MAX_RESPONSE_BYTES} bytes"
                )
            if len(buf) < 4 + n:
                return
            payload = bytes(buf[4 : 4 + n])
            del buf[: 4 + n]
            try:
                if not self._hello_done:
                    result = pb.TcpHelloResult.FromString(payload)
                else:
                    resp = pb.WriteResponse.FromString(payload)
            except DecodeError:
                raise UnavailableError(
                    f"the write stream's connection was lost: {self.target.tcp_endpoint} sent "
                    "bytes that are not the weir native protocol"
                ) from None
            if not self._hello_done:
                self._on_hello(result)
            else:
                self._on_response(resp)
            if self._sock is None:
                return

    def _on_hello(self, result: pb.TcpHelloResult) -> None:
        self._hello_done = True
        if result.HasField("error"):
            err = error_from_code(result.error.code, result.error.message)
            tokens = self.target.tokens
            if tokens is not None and isinstance(err, TokenRejectedError | UnauthorizedError):
                tokens.refused(self._token)
            raise err

    def _on_response(self, resp: pb.WriteResponse) -> None:
        kind = resp.WhichOneof("kind")
        if kind == "ack":
            self._on_ack(resp.ack.acks)
        elif kind == "init":
            if self._session_up:
                raise UnavailableError("a second init result on the write stream")
            self.target.got_through(None, tcp=True)
            self._on_init(resp.init)
            self._call_id += 1
            self._session_up = True
            self._ready.set()
            self._init_done.set()
            self._inited.set()
        elif kind == "error":
            raise error_from_code(resp.error.code, resp.error.message)

    # ------------------------------------------------------------------ connecting

    def _connect(self) -> None:
        conn = self.target  # the client's broker, or the partition's owner (cluster mode)
        endpoint = conn.tcp_endpoint
        if not conn.tcp_known:
            endpoint = self._runner.run(conn.learn_tcp_endpoint())
        tokens = conn.tokens
        if tokens is not None:
            self._token = self._runner.run(tokens.token())
        host, _, port = endpoint.rpartition(":")
        host = host.strip("[]")
        try:
            sock = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
        except OSError as exc:
            why = (
                "connection refused"
                if isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED
                else str(exc)
            )
            raise UnavailableError(
                f"cannot reach the weir native TCP port at {endpoint}: {why}"
            ) from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if conn.tls is not None:
                ctx = conn.tcp_ssl_context()
                name = conn.tls.server_name or host
                try:
                    sock = ctx.wrap_socket(sock, server_hostname=name)
                except ssl.SSLError as exc:
                    raise UnavailableError(
                        f"cannot connect to {endpoint}: TLS handshake failed: {exc}"
                    ) from None
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._hello_done = False
        self._session_up = False
        self._rbuf.clear()
        self._wq.clear()
        hello = pb.TcpHello(
            version=VERSION,
            method=METHOD_WRITE,
            authorization=f"Bearer {self._token}" if self._token else "",
        )
        init = encode_write_request(self._init_request())
        self._wq.append(memoryview(MAGIC + frame(hello.SerializeToString()) + frame(init)))

    def _drop_socket(self) -> None:
        sock, self._sock = self._sock, None
        self._session_up = False
        self._ready.clear()
        self._wq.clear()
        self._rbuf.clear()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def _broken(self, exc: OSError | WeirError) -> None:
        """The connection failed: reconnect after the backoff (at once to a new owner, in
        a cluster: `_follow`), or fail on a fatal error (`WriterState._lost`)."""
        if isinstance(exc, WeirError):
            err = exc
        else:
            err = UnavailableError(f"the write stream's connection was lost: {exc}")
        endpoint = self.target.tcp_endpoint
        self._drop_socket()
        delay = self._lost(err, endpoint)
        if delay is None:
            return
        self._retry_at = time.monotonic() + delay
        if self._follow_due(err):
            # the lookup is a call in the client's loop: made by the next connecting step,
            # which never runs in that loop's thread (the idle tick connects in its executor)
            self._follow_err = err
            self._follow_delay = delay
            self._retry_at = time.monotonic()

    def _follow(self) -> bool:
        """Look the partition's owner up (after `_broken`); True: connect now (to another
        broker than the last), False: the same broker, after the backoff."""
        err, self._follow_err = self._follow_err, None
        if err is None:
            return True
        part = self._owner_partition(err)
        before = self.target
        found = self._runner.run(self.conn.owners.lookup(self.topic, part))
        if self._followed(before, found, part):
            return True
        self._retry_at = time.monotonic() + self._follow_delay
        return False

    def _check_stall(self) -> None:
        limit = self.settings.delivery_timeout
        if limit is None or self._error is not None:
            return
        if self._stall.observe(self._unacked, self._acked, time.monotonic()) < limit:
            return
        self._fail(self._delivery_timeout(self._unacked, limit, self.target.tcp_endpoint))
        self._drop_socket()
