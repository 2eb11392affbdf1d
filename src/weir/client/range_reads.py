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
from weir.errors import WeirTimeoutError
from weir.protocols.native import weir_pb2 as pb


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
        if assemble_chunks:
            return self._assembled_range(
                topic,
                partition,
                from_offset,
                to_offset,
                max_bytes,
                timeout,
                compacted,
                read_committed,
            )
        return self._raw_range(
            topic,
            partition,
            from_offset,
            to_offset,
            max_bytes,
            timeout,
            compacted,
            read_committed,
        )

    async def _assembled_range(
        self,
        topic: str,
        partition: int,
        from_offset: int,
        to_offset: int,
        max_bytes: int,
        timeout: float | None,
        compacted: bool,
        read_committed: bool = False,
    ) -> AsyncIterator[RangeChunk]:
        asm = RangeAssembler()
        raw = self._raw_range(
            topic,
            partition,
            from_offset,
            to_offset,
            max_bytes,
            timeout,
            compacted,
            read_committed,
        )
        async for rc in raw:
            msgs = rc.messages()
            wanted = asm.orphans(msgs)
            if wanted:
                await self._read_back(
                    topic,
                    partition,
                    from_offset,
                    rc.start_offset,
                    wanted,
                    asm,
                    max_bytes,
                    timeout,
                    compacted,
                    read_committed,
                )
            yield dataclasses.replace(rc, assembled=asm.feed(msgs))

    async def _read_back(
        self,
        topic: str,
        partition: int,
        hi: int,
        start: int,
        wanted: dict[str, int],
        asm: RangeAssembler,
        max_bytes: int,
        timeout: float | None,
        compacted: bool,
        read_committed: bool = False,
    ) -> None:
        """Read back from ``hi`` in growing windows until the first chunk of every
        ``wanted`` message is found (or the partition's start is reached)."""
        missing = dict(wanted)
        window = 64
        while missing and hi > start:
            lo = max(start, hi - window)
            found: list[Message] = []
            async for rc in self._raw_range(
                topic, partition, lo, hi, max_bytes, timeout, compacted, read_committed
            ):
                found.extend(rc.messages())
            asm.add_earlier(found, missing)
            for m in found:
                h = m.headers
                if h and h.get(CHUNK_ID) == "0":
                    missing.pop(h.get(CHUNK_UUID, ""), None)
            hi, window = lo, window * 4
        if missing:
            asm.give_up(set(missing))

    async def _raw_range(
        self,
        topic: str,
        partition: int,
        from_offset: int,
        to_offset: int,
        max_bytes: int,
        timeout: float | None,
        compacted: bool,
        read_committed: bool = False,
    ) -> AsyncIterator[RangeChunk]:
        req = pb.ReadRangeRequest(
            topic=topic,
            partition=partition,
            from_offset=from_offset,
            to_offset=to_offset,
            max_bytes=max_bytes,
            compacted=compacted,
            read_committed=read_committed,
        )
        conn = self.conn
        call = conn.read_range(req)
        try:
            while True:
                try:
                    r = await asyncio.wait_for(call.read(), timeout)
                except TimeoutError:
                    raise WeirTimeoutError(
                        f"no answer from {conn.endpoint} for {timeout:g} s while reading "
                        f"{topic}/{partition} from offset {from_offset}"
                    ) from None
                if r is grpc.aio.EOF:
                    return
                conn.ever_connected = True
                yield RangeChunk(
                    topic,
                    partition,
                    list(r.chunks),
                    r.first_offset,
                    r.next_offset,
                    r.start_offset,
                    r.end_offset,
                    from_offset,
                    to_offset,
                )
        except grpc.aio.AioRpcError as exc:
            err = error_from_rpc(exc)
            raise (conn.unreachable(err) or err) from None
        finally:
            call.cancel()  # the caller may stop early: do not leave the call pending
