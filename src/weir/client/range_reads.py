"""Offset-range reads of the asyncio client (`Client.read_range`): stored batches of one
partition, no consumer involved, optionally with chunked messages put back together."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc

from weir.client.chunks import CHUNK_ID, CHUNK_UUID, RangeAssembler
from weir.client.connection import Connection, error_from_rpc
from weir.client.messages import Message
from weir.errors import NotOwnerError, WeirTimeoutError
from weir.protocols.native import weir_pb2 as pb

# a range read told NOT_OWNER looks the owner up and starts again there, this many times
FOLLOW_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class RangeChunk:
    """Part of an offset-range read: whole stored batches plus where they sit.

    ``chunks`` hold whole stored batches, so they may start before the range
    asked for and end after it; `messages` returns only the messages in the
    range (``from_offset`` and ``to_offset`` of the read; ``to_offset`` -1:
    the end of the partition when the read started).
    """

    topic: str
    partition: int
    chunks: list[bytes]
    first_offset: int
    next_offset: int
    start_offset: int
    end_offset: int
    from_offset: int = 0
    to_offset: int = -1
    # read_range(assemble_chunks=True): the messages, chunked ones whole (``chunks`` raw)
    assembled: list[Message] | None = None

    def messages(self, from_offset: int | None = None) -> list[Message]:
        """The messages of this chunk in the range read, from ``from_offset`` on if given."""
        from weir.client.messages import decode_chunks

        lo = self.from_offset if from_offset is None else max(self.from_offset, from_offset)
        if self.assembled is not None:
            return [m for m in self.assembled if m.offset >= lo]
        return decode_chunks(
            self.topic,
            self.partition,
            self.chunks,
            lo,
            to_offset=None if self.to_offset < 0 else self.to_offset,
        )


@dataclass(frozen=True, slots=True)
class RangeQuery:
    """One `read_range` call's arguments, passed whole to the reads it is made of."""

    topic: str
    partition: int
    from_offset: int
    to_offset: int
    max_bytes: int
    timeout: float | None
    compacted: bool
    read_committed: bool

    def between(self, lo: int, hi: int) -> RangeQuery:
        """The same read over ``[lo, hi)`` (reading back for a chunked message's start)."""
        return dataclasses.replace(self, from_offset=lo, to_offset=hi)


class AsyncRangeReads:
    """`Client.read_range` and what it stands on (a mixin of `weir.aio.Client`)."""

    if TYPE_CHECKING:

        @property
        def conn(self) -> Connection: ...

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
    ) -> AsyncIterator[RangeChunk]:
        """Stored batches of ``[from_offset, to_offset)`` of one partition, no consumer involved.

        ``compacted``: the range as compacted (the latest message of each key below the
        compacted view's position, at their own offsets, then every later message).

        ``assemble_chunks``: each chunk's `RangeChunk.messages` has the chunked messages
        whole, at their last chunk's offset; a message is returned by the range holding
        its last chunk (reading back before ``from_offset`` for its first ones), so
        consecutive ranges return each once (`weir.client.chunks.RangeAssembler`).

        ``timeout``: seconds to wait for each chunk before raising WeirTimeoutError
        (a server that stopped answering); None waits as long as the connection lives.
        ``read_committed``: only messages of committed transactions (and of no
        transaction), up to the last stable offset (what ``to_offset`` -1 means then).
        """
        q = RangeQuery(
            topic, partition, from_offset, to_offset, max_bytes, timeout, compacted, read_committed
        )
        return self._assembled_range(q) if assemble_chunks else self._raw_range(q)

    async def _assembled_range(self, q: RangeQuery) -> AsyncIterator[RangeChunk]:
        asm = RangeAssembler()
        async for rc in self._raw_range(q):
            msgs = rc.messages()
            wanted = asm.orphans(msgs)
            if wanted:
                await self._read_back(q, q.from_offset, rc.start_offset, wanted, asm)
            yield dataclasses.replace(rc, assembled=asm.feed(msgs))

    async def _read_back(
        self, q: RangeQuery, hi: int, start: int, wanted: dict[str, int], asm: RangeAssembler
    ) -> None:
        """Read back from ``hi`` in growing windows until the first chunk of every
        ``wanted`` message is found (or the partition's start is reached)."""
        missing = dict(wanted)
        window = 64
        while missing and hi > start:
            lo = max(start, hi - window)
            found: list[Message] = []
            async for rc in self._raw_range(q.between(lo, hi)):
                found.extend(rc.messages())
            asm.add_earlier(found, missing)
            for m in found:
                h = m.headers
                if h and h.get(CHUNK_ID) == "0":
                    missing.pop(h.get(CHUNK_UUID, ""), None)
            hi, window = lo, window * 4
        if missing:
            asm.give_up(set(missing))

    async def _raw_range(self, q: RangeQuery) -> AsyncIterator[RangeChunk]:
        req = pb.ReadRangeRequest(
            topic=q.topic,
            partition=q.partition,
            from_offset=q.from_offset,
            to_offset=q.to_offset,
            max_bytes=q.max_bytes,
            compacted=q.compacted,
            read_committed=q.read_committed,
        )
        owners = self.conn.owners
        for attempt in range(FOLLOW_ATTEMPTS):
            # cluster mode: the partition's owner, as the last lookup found it
            conn = owners.known(q.topic, q.partition) or self.conn
            call = conn.read_range(req)
            got_any = False
            try:
                while True:
                    try:
                        r = await asyncio.wait_for(call.read(), q.timeout)
                    except TimeoutError:
                        raise WeirTimeoutError(
                            f"no answer from {conn.endpoint} for {q.timeout:g} s while reading "
                            f"{q.topic}/{q.partition} from offset {q.from_offset}"
                        ) from None
                    if r is grpc.aio.EOF:
                        return
                    conn.ever_connected = True
                    got_any = True
                    yield RangeChunk(
                        q.topic,
                        q.partition,
                        list(r.chunks),
                        r.first_offset,
                        r.next_offset,
                        r.start_offset,
                        r.end_offset,
                        q.from_offset,
                        q.to_offset,
                    )
            except grpc.aio.AioRpcError as exc:
                err = error_from_rpc(exc)
                moved = (
                    isinstance(err, NotOwnerError)
                    or conn is not self.conn
                    or self.conn.can_fail_over  # the client's own broker down: ask others
                )
                if got_any or not err.retryable or not moved or attempt + 1 == FOLLOW_ATTEMPTS:
                    raise (conn.unreachable(err) or err) from None
                # another broker owns it (or the owner we knew failed): ask, then read there
                owner = await owners.lookup(q.topic, q.partition)
                owners.remember(q.topic, q.partition, owner)
                if owner is None or owner is conn:
                    raise err from None  # moving: retryable, the caller tries again later
            finally:
                call.cancel()  # the caller may stop early: do not leave the call pending
