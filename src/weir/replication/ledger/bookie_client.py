"""One pipelined asyncio connection per bookie, shared by every ledger of a client.

Requests carry ids; responses resolve their futures in whatever order they come.
A broken connection fails every request in flight with `BookieUnavailableError`
(the caller decides: another bookie, the quorum, or a retry); the next request
connects again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl

from weir.errors import BadRequestError, CommitFailedError, WeirError
from weir.replication import protocol as p
from weir.replication.errors import (
    BookieOverloadedError,
    BookieReadOnlyError,
    BookieUnavailableError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
)

_STATUS_ERRORS: dict[p.Status, type[WeirError]] = {
    p.Status.NO_ENTRY: NoSuchEntryError,
    p.Status.NO_LEDGER: NoSuchLedgerError,
    p.Status.FENCED: LedgerFencedError,
    p.Status.BAD_REQUEST: BadRequestError,
    p.Status.OVERLOADED: BookieOverloadedError,
    p.Status.READ_ONLY: BookieReadOnlyError,
    p.Status.STORAGE_ERROR: CommitFailedError,
}


def error_of(resp: p.ErrorResponse, bookie: str) -> WeirError:
    return _STATUS_ERRORS[resp.status](f"bookie {bookie}: {resp.message}")


class BookieClient:
    """Requests to the bookie at ``address`` (``host:port``)."""

    def __init__(
        self,
        address: str,
        *,
        connect_timeout: float = 5.0,
        request_timeout: float = 30.0,
        connect_to: str | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """``tls``: a client context (`weir.replication.tls.BookieTls.client_context`) for
        a bookie that speaks TLS; the bookie id's host is the name its certificate must bear."""
        self.address = address
        self.tls = tls
        # where to connect, when it is not the bookie's id (a proxy, a NAT'd address)
        self.connect_to = connect_to or address
        self.connect_timeout = connect_timeout
        # A bookie that stops answering (paused, disk hung) fails its requests after this
        # long, so a writer replaces it and a recoverer counts it as not answering.
        self.request_timeout = request_timeout
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[p.Response]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()
        self._closed = False

    async def _connection(self) -> asyncio.StreamWriter:
        async with self._connecting:
            if self._writer is not None and not self._writer.is_closing():
                return self._writer
            if self._closed:
                raise BookieUnavailableError(f"client of bookie {self.address} is closed")
            host, _, port = self.connect_to.rpartition(":")
            try:
                server_name = self.address.rpartition(":")[0] if self.tls else None
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(
                        host, int(port), ssl=self.tls, server_hostname=server_name
                    ),
                    self.connect_timeout,
                )
            except (OSError, TimeoutError) as exc:
                raise BookieUnavailableError(f"bookie {self.address}: {exc!r}") from None
            self._writer = writer
            self._reader_task = asyncio.create_task(self._read_loop(reader, writer))
            return writer

    async def _read_loop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reason = "connection closed"
        try:
            while True:
                prefix = await reader.readexactly(4)
                resp = p.decode_response(await reader.readexactly(p.frame_length(prefix)))
                fut = self._pending.pop(resp.request_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(resp)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            reason = f"connection lost: {exc!r}"
        except p.ProtocolError as exc:
            reason = f"bad frame from bookie: {exc}"
        finally:
            writer.close()
            if self._writer is writer:
                self._writer = None
            pending, self._pending = self._pending, {}
            for fut in pending.values():
                if not fut.done():
                    fut.set_exception(BookieUnavailableError(f"bookie {self.address}: {reason}"))

    async def request(
        self, make: type[p.Request], *, extra_wait: float = 0.0, **fields: object
    ) -> p.Response:
        """Send one request, wait for its response (an ErrorResponse is returned, not raised).
        ``extra_wait``: seconds the bookie may hold it on purpose (a long poll)."""
        writer = await self._connection()
        rid = next(self._ids)
        req = make(request_id=rid, **fields)  # type: ignore[arg-type]
        fut: asyncio.Future[p.Response] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        writer.write(p.encode_request(req))
        try:
            return await asyncio.wait_for(fut, self.request_timeout + extra_wait)
        except TimeoutError:
            raise BookieUnavailableError(
                f"bookie {self.address}: no answer within {self.request_timeout} s"
            ) from None
        finally:
            self._pending.pop(rid, None)

    async def add(
        self, ledger: int, entry: int, lac: int, payload: bytes, *, recovery: bool = False
    ) -> None:
        flags = p.FLAG_RECOVERY if recovery else 0
        resp = await self.request(
            p.AddRequest, ledger=ledger, entry=entry, lac=lac, flags=flags, payload=payload
        )
        if isinstance(resp, p.ErrorResponse):
            raise error_of(resp, self.address)

    async def read(self, ledger: int, entry: int, *, fence: bool = False) -> p.ReadResponse:
        flags = p.FLAG_FENCE if fence else 0
        resp = await self.request(p.ReadRequest, ledger=ledger, entry=entry, flags=flags)
        if isinstance(resp, p.ErrorResponse):
            raise error_of(resp, self.address)
        assert isinstance(resp, p.ReadResponse)
        return resp

    async def read_lac(self, ledger: int, *, fence: bool = False) -> int:
        flags = p.FLAG_FENCE if fence else 0
        resp = await self.request(p.ReadLacRequest, ledger=ledger, flags=flags)
        if isinstance(resp, p.ErrorResponse):
            raise error_of(resp, self.address)
        assert isinstance(resp, p.ReadLacResponse)
        return resp.lac

    async def wait_lac(self, ledger: int, previous: int, timeout: float) -> int:
        """Long poll: the LAC once it passes ``previous``, or as it is after ``timeout`` s."""
        resp = await self.request(
            p.ReadLacRequest,
            extra_wait=timeout,
            ledger=ledger,
            flags=p.FLAG_LONG_POLL,
            previous=previous,
            timeout_ms=max(0, int(timeout * 1000)),
        )
        if isinstance(resp, p.ErrorResponse):
            raise error_of(resp, self.address)
        assert isinstance(resp, p.ReadLacResponse)
        return resp.lac

    async def close(self) -> None:
        self._closed = True
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            with contextlib.suppress(Exception):
                await self._reader_task


class BookiePool:
    """The client's connections, one per bookie address."""

    def __init__(
        self,
        request_timeout: float = 30.0,
        routes: dict[str, str] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._clients: dict[str, BookieClient] = {}
        self.tls = tls
        self.request_timeout = request_timeout
        self.routes = routes or {}  # bookie id -> the address to connect to

    def get(self, address: str) -> BookieClient:
        client = self._clients.get(address)
        if client is None:
            client = BookieClient(
                address,
                request_timeout=self.request_timeout,
                connect_to=self.routes.get(address),
                tls=self.tls,
            )
            self._clients[address] = client
        return client

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
