"""The bookie's request handling over asyncio TCP: add, read, read LAC, fence.

Why plain asyncio TCP and not gRPC: a bookie connection is one long pipeline of
small adds from one writer, answered out of order as group commits complete
(BookKeeper's own protocol is the same shape over Netty). A length-prefixed
binary frame costs one struct pack per request and no HTTP/2 stream per call;
the codec (`protocol.py`) is pure and fuzzable, and nothing else speaks it.

Backpressure (the seed's limits): each connection may have at most
``max_requests_per_conn`` requests and ``max_bytes_per_conn`` payload bytes
waiting for their commit, and the whole bookie ``max_requests`` and
``max_bytes``; beyond that a request is refused with OVERLOADED at once (the
writer replaces the bookie, as BookKeeper's client picks another on
TOO_MANY_REQUESTS), so no number of writers can grow the bookie's memory
without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from weir.errors import StorageFullError, WeirError
from weir.replication import protocol as p
from weir.replication.bookie.disk_space import DiskSpaceMonitor, SpacePolicy
from weir.replication.bookie.ledger_descriptor import LedgerDescriptor
from weir.replication.bookie.ledger_storage import LedgerStorage
from weir.replication.bookie.metrics import BookieMetrics
from weir.replication.errors import LedgerFencedError

log = logging.getLogger("weir.replication.bookie")


@dataclass(frozen=True, slots=True)
class BookieLimits:
    max_requests_per_conn: int = 10_000
    max_bytes_per_conn: int = 64 << 20
    max_requests: int = 100_000  # every connection together
    max_bytes: int = 512 << 20


class Bookie:
    """A bookie's ledgers over its storage; `serve` answers clients on a TCP port."""

    def __init__(
        self,
        storage: LedgerStorage,
        limits: BookieLimits | None = None,
        space: SpacePolicy | None = None,
        metrics: BookieMetrics | None = None,
    ) -> None:
        self.storage = storage
        self.metrics = metrics  # None: not counted
        self.limits = limits or BookieLimits()
        self.space = DiskSpaceMonitor(storage.usage, space)
        self.in_flight = 0  # every connection's requests waiting for their commit
        self.bytes_in_flight = 0
        self.space.check()
        # The replay: every ledger's durable state (fenced, LAC) back in memory.
        self.ledgers: dict[int, LedgerDescriptor] = {
            lid: LedgerDescriptor(storage, lid, st) for lid, st in storage.ledgers().items()
        }
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        # long-poll READ_LAC requests waiting for a ledger's LAC to pass their ``previous``
        self.lac_waiters: dict[int, list[tuple[int, asyncio.Future[None]]]] = {}

    def lac_advanced(self, desc: LedgerDescriptor) -> None:
        """Wake the long polls of ``desc``'s ledger that its LAC now passes."""
        waiters = self.lac_waiters.get(desc.ledger)
        if not waiters:
            return
        keep = []
        for previous, fut in waiters:
            if desc.lac > previous or desc.fenced:
                if not fut.done():
                    fut.set_result(None)
            elif not fut.done():
                keep.append((previous, fut))
        if keep:
            self.lac_waiters[desc.ledger] = keep
        else:
            del self.lac_waiters[desc.ledger]

    def descriptor(self, ledger: int, *, create: bool) -> LedgerDescriptor | None:
        desc = self.ledgers.get(ledger)
        if desc is None and create:
            desc = self.ledgers[ledger] = LedgerDescriptor(self.storage, ledger, None)
        return desc

    async def serve(
        self, host: str, port: int, tls: ssl.SSLContext | None = None
    ) -> tuple[str, int]:
        """Listen; with ``tls`` (a server context requiring client certificates) TLS only."""
        self._server = await asyncio.start_server(self._connection, host, port, ssl=tls)
        addr = self._server.sockets[0].getsockname()
        return str(addr[0]), int(addr[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for w in list(self._writers):
                w.close()
            await self._server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(self, writer)
        self._writers.add(writer)
        try:
            while True:
                prefix = await reader.readexactly(4)
                body = await reader.readexactly(p.frame_length(prefix))
                conn.handle(body)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except p.ProtocolError as exc:
            log.warning("closing a connection that sent a bad frame: %s", exc)
        finally:
            self._writers.discard(writer)
            writer.close()


class _Connection:
    """One client connection: its requests in flight and the responses written back."""

    def __init__(self, bookie: Bookie, writer: asyncio.StreamWriter) -> None:
        self.bookie = bookie
        self.writer = writer
        self.loop = asyncio.get_running_loop()
        self.in_flight = 0
        self.bytes_in_flight = 0
        self.tasks: set[asyncio.Future[None]] = set()  # long polls waiting

    def reply(self, resp: p.Response) -> None:
        if not self.writer.is_closing():
            self.writer.write(p.encode_response(resp))

    def error(self, op: int, rid: int, status: p.Status, message: str) -> None:
        metrics = self.bookie.metrics
        if metrics is not None and op in (p.Op.ADD, p.Op.READ):
            (metrics.adds if op == p.Op.ADD else metrics.reads).labels(status.name.lower()).inc()
        self.reply(
            p.ErrorResponse(
                p.Op(op) if op in p.Op._value2member_map_ else p.Op.ADD, rid, status, message
            )
        )

    def handle(self, body: bytes) -> None:
        op, rid = p.request_head(body)
        try:
            req = p.decode_request(body)
        except p.ProtocolError as exc:
            self.error(op, rid, p.Status.BAD_REQUEST, str(exc))
            return
        limits = self.bookie.limits
        size = len(req.payload) if isinstance(req, p.AddRequest) else 0
        bookie = self.bookie
        if (
            self.in_flight >= limits.max_requests_per_conn
            or self.bytes_in_flight + size > limits.max_bytes_per_conn
        ):
            self.error(
                op, rid, p.Status.OVERLOADED, "too many requests in flight on this connection"
            )
            return
        if (
            bookie.in_flight >= limits.max_requests
            or bookie.bytes_in_flight + size > limits.max_bytes
        ):
            self.error(op, rid, p.Status.OVERLOADED, "too many requests in flight on this bookie")
            return
        if isinstance(req, p.AddRequest):
            self._add(req)
        elif isinstance(req, p.ReadRequest):
            self._read(req)
        else:
            self._read_lac(req)

    def _track(
        self, fut: Future[None], size: int, done: Callable[[BaseException | None], None]
    ) -> None:
        """Count a durable write in flight; run ``done(exc)`` on the loop when it completes."""
        bookie = self.bookie
        self.in_flight += 1
        self.bytes_in_flight += size
        bookie.in_flight += 1
        bookie.bytes_in_flight += size

        def finished(f: Future[None]) -> None:
            def on_loop() -> None:
                self.in_flight -= 1
                self.bytes_in_flight -= size
                bookie.in_flight -= 1
                bookie.bytes_in_flight -= size
                done(f.exception())

            self.loop.call_soon_threadsafe(on_loop)

        fut.add_done_callback(finished)

    def _add(self, req: p.AddRequest) -> None:
        space = self.bookie.space
        if space.read_only:
            self.error(
                p.Op.ADD, req.request_id, p.Status.READ_ONLY, f"bookie is read-only: {space.reason}"
            )
            return
        space.account(len(req.payload))
        desc = self.bookie.descriptor(req.ledger, create=True)
        assert desc is not None
        lac_before = desc.lac
        try:
            fut = desc.add(
                req.entry, req.payload, req.lac, recovery=bool(req.flags & p.FLAG_RECOVERY)
            )
        except LedgerFencedError as exc:
            self.error(p.Op.ADD, req.request_id, p.Status.FENCED, exc.message)
            return
        except WeirError as exc:
            self.error(p.Op.ADD, req.request_id, p.Status.READ_ONLY, exc.message)
            return

        if desc.lac > lac_before:
            self.bookie.lac_advanced(desc)

        def done(exc: BaseException | None) -> None:
            if exc is None:
                metrics = self.bookie.metrics
                if metrics is not None:
                    metrics.adds.labels("ok").inc()
                    metrics.add_bytes.inc(len(req.payload))
                self.reply(p.AddResponse(req.request_id, req.ledger, req.entry))
            else:
                status = p.Status.STORAGE_ERROR
                if isinstance(exc, StorageFullError):
                    status = p.Status.READ_ONLY
                    space.storage_full(str(exc))
                self.error(p.Op.ADD, req.request_id, status, str(exc))

        self._track(fut, len(req.payload), done)

    def _after_fence(
        self, req: p.ReadRequest | p.ReadLacRequest, then: Callable[[LedgerDescriptor], None]
    ) -> None:
        """Run ``then(desc)`` now, or once the fence the request asks for is durable."""
        fence = bool(req.flags & p.FLAG_FENCE)
        desc = self.bookie.descriptor(req.ledger, create=fence)
        op = p.Op.READ if isinstance(req, p.ReadRequest) else p.Op.READ_LAC
        if desc is None:
            self.error(
                op, req.request_id, p.Status.NO_LEDGER, f"no ledger {req.ledger} on this bookie"
            )
            return
        if not fence:
            then(desc)
            return

        def done(exc: BaseException | None) -> None:
            if exc is None:
                self.bookie.lac_advanced(desc)  # long polls learn of the fence
                then(desc)
            else:
                self.error(op, req.request_id, p.Status.STORAGE_ERROR, f"fence failed: {exc}")

        self._track(desc.fence(), 0, done)

    def _read(self, req: p.ReadRequest) -> None:
        def read(desc: LedgerDescriptor) -> None:
            data = desc.read(req.entry)
            if data is None:
                self.error(
                    p.Op.READ,
                    req.request_id,
                    p.Status.NO_ENTRY,
                    f"no entry {req.entry} of ledger {req.ledger} on this bookie",
                )
            else:
                if self.bookie.metrics is not None:
                    self.bookie.metrics.reads.labels("ok").inc()
                self.reply(p.ReadResponse(req.request_id, req.ledger, req.entry, desc.lac, data))

        self._after_fence(req, read)

    def _read_lac(self, req: p.ReadLacRequest) -> None:
        if req.flags & p.FLAG_LONG_POLL and not req.flags & p.FLAG_FENCE:
            self._long_poll_lac(req)
            return
        self._after_fence(
            req, lambda desc: self.reply(p.ReadLacResponse(req.request_id, req.ledger, desc.lac))
        )

    def _long_poll_lac(self, req: p.ReadLacRequest) -> None:
        """Answer once the LAC passes ``req.previous`` (or the ledger is fenced), or at the
        timeout with the LAC as it is. A ledger this bookie has not seen yet is waited for too."""
        bookie = self.bookie
        desc = bookie.descriptor(req.ledger, create=False)
        if desc is not None and (desc.lac > req.previous or desc.fenced):
            self.reply(p.ReadLacResponse(req.request_id, req.ledger, desc.lac))
            return
        fut: asyncio.Future[None] = self.loop.create_future()
        bookie.lac_waiters.setdefault(req.ledger, []).append((req.previous, fut))

        async def wait() -> None:
            try:
                await asyncio.wait_for(fut, req.timeout_ms / 1000)
            except TimeoutError:
                waiting = bookie.lac_waiters.get(req.ledger, [])
                with contextlib.suppress(ValueError):
                    waiting.remove((req.previous, fut))
                if not waiting:
                    bookie.lac_waiters.pop(req.ledger, None)
            now = bookie.descriptor(req.ledger, create=False)
            if now is None:
                self.error(
                    p.Op.READ_LAC,
                    req.request_id,
                    p.Status.NO_LEDGER,
                    f"no ledger {req.ledger} on this bookie",
                )
            else:
                self.reply(p.ReadLacResponse(req.request_id, req.ledger, now.lac))

        task = asyncio.ensure_future(wait())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
