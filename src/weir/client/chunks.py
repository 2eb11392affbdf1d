"""Chunked messages: a message bigger than the server's message size limit, split by
the writer and put back together by the reader (Pulsar's chunking).

The writer (``client.writer(..., chunking=True)``) cuts the data into pieces that
fit the limit with the key beside each, and writes them as ordinary consecutive
messages of one producer in one partition, each with the headers `CHUNK_UUID`,
`CHUNK_ID` (0..n-1) and `CHUNK_COUNT`. They get consecutive automatic seq_nos, so
a resend after a reconnect is deduplicated chunk by chunk: the message is stored
once. The write's future resolves with the last chunk's result.

A reader (`ChunkAssembler`, one per partition session) holds chunks until the last
one arrives, then delivers one message at the last chunk's offset, with the data
joined and the chunk headers removed. Its commits never pass the first chunk of a
message still incomplete, so a reader that restarts reads it whole again. A chunked
message still incomplete `expiry` seconds after its first chunk arrived (its writer
died mid-way and never resent it) is dropped and counted (`expired`); commits then
move past it.

Range reads return the stored chunks as they are, unless asked to put them together
(`RangeAssembler`: ``read_range(..., assemble_chunks=True)``, the Spark source's
``assembleChunks``): a chunked message is then returned whole, at its last chunk's
offset as a reader delivers it, by the range that holds its last chunk. That range
reads back before its start for the chunks it lacks, and leaves out the chunks of a
message that ends past its end (the next range returns it), so consecutive ranges
return each chunked message exactly once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from weir.chunk_headers import CHUNK_COUNT, CHUNK_ID, CHUNK_UUID
from weir.client.messages import Message, _Part

__all__ = ["CHUNK_COUNT", "CHUNK_ID", "CHUNK_UUID", "ChunkAssembler", "RangeAssembler", "split"]

DEFAULT_CHUNK_EXPIRY = 60.0  # seconds, as Pulsar's expireTimeOfIncompleteChunkedMessage


def split(
    data: bytes, room: int, headers: Mapping[str, str] | None
) -> list[tuple[bytes, dict[str, str]]]:
    """The chunks of ``data``: pieces of at most ``room`` bytes, each with its headers."""
    n = -(-len(data) // room)
    u = uuid.uuid4().hex
    base = dict(headers or {})
    return [
        (
            data[i * room : (i + 1) * room],
            {**base, CHUNK_UUID: u, CHUNK_ID: str(i), CHUNK_COUNT: str(n)},
        )
        for i in range(n)
    ]


@dataclass
class _Pending:
    first_offset: int
    count: int
    since: float
    pieces: dict[int, bytes] = field(default_factory=dict)


class ChunkAssembler:
    """Puts one partition session's chunked messages back together."""

    def __init__(
        self, expiry: float = DEFAULT_CHUNK_EXPIRY, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.expiry = expiry
        self.clock = clock
        self._pending: dict[str, _Pending] = {}
        self.expired = 0

    def commit_limit(self) -> int | None:
        """The first offset of the oldest incomplete chunked message: commits stop there."""
        self._expire()
        if not self._pending:
            return None
        return min(p.first_offset for p in self._pending.values())

    def _expire(self) -> None:
        now = self.clock()
        for u in [u for u, p in self._pending.items() if now - p.since > self.expiry]:
            del self._pending[u]
            self.expired += 1

    def feed(self, parts: list[_Part]) -> list[_Part]:
        """The parts with chunks taken out and each completed message put in whole."""
        if not any(p.headers is not None and _has_chunk(p.headers) for p in parts):
            return parts
        self._expire()
        out: list[_Part] = []
        for p in parts:
            if p.headers is None or not _has_chunk(p.headers):
                out.append(p)
                continue
            run: list[int] = []  # indexes of plain records, kept as one part per run
            for i in range(p.count):
                h = p.headers[i]
                if CHUNK_UUID not in h:
                    if run and run[-1] != i - 1:
                        out.append(_sub(p, run))
                        run = []
                    run.append(i)
                    continue
                if run:
                    out.append(_sub(p, run))
                    run = []
                whole = self._add(p, i, h)
                if whole is not None:
                    out.append(whole)
            if run:
                out.append(_sub(p, run))
        return out

    def _add(self, p: _Part, i: int, h: Mapping[str, str]) -> _Part | None:
        u = h[CHUNK_UUID]
        try:
            cid, count = int(h[CHUNK_ID]), int(h[CHUNK_COUNT])
        except (KeyError, ValueError):
            return _sub(p, [i])  # not ours after all: deliver as it is
        offset = p.first_offset + i
        pend = self._pending.get(u)
        if pend is None:
            pend = self._pending[u] = _Pending(offset, count, self.clock())
        pend.pieces[cid] = p.data[i]
        if len(pend.pieces) < pend.count:
            return None
        del self._pending[u]
        data = b"".join(pend.pieces[j] for j in range(pend.count))
        headers = {k: v for k, v in h.items() if k not in (CHUNK_UUID, CHUNK_ID, CHUNK_COUNT)}
        whole = _sub(p, [i])
        whole.data = [data]
        whole.headers = [headers]
        return whole


def _has_chunk(headers: list[dict[str, str]]) -> bool:
    return any(CHUNK_UUID in h for h in headers)


def _sub(p: _Part, idx: list[int]) -> _Part:
    """The records ``idx`` (consecutive) of ``p`` as a part of their own."""
    a, b = idx[0], idx[-1] + 1
    created = p.created if isinstance(p.created, int) else p.created[a:b]
    return _Part(
        p.first_offset + a,
        b - a,
        list(p.seqs[a:b]),
        created,
        p.written,
        p.producer_id,
        p.keys[a:b] if p.keys is not None else None,
        p.data[a:b],
        p.headers[a:b] if p.headers is not None else None,
    )


def _chunk_of(m: Message) -> tuple[str, int, int] | None:
    """(uuid, id, count) of a chunk; None for a plain message (or bad chunk headers)."""
    h = m.headers
    u = h.get(CHUNK_UUID) if h else None
    if u is None:
        return None
    try:
        return u, int(h[CHUNK_ID]), int(h[CHUNK_COUNT])
    except (KeyError, ValueError):
        return None


class RangeAssembler:
    """Puts the chunked messages of one partition's offset range back together (see the
    module docstring): `orphans` names the messages whose first chunks lie before the
    range, `add_earlier` takes those chunks from a read back, `feed` returns the range's
    messages with each completed chunked message whole."""

    def __init__(self) -> None:
        self._pending: dict[str, dict[int, bytes]] = {}
        self._known: set[str] = set()  # uuids seen (pending, completed, or given up)

    def orphans(self, msgs: list[Message]) -> dict[str, int]:
        """Messages of ``msgs`` begun before them: uuid -> the lowest chunk id seen."""
        out: dict[str, int] = {}
        for m in msgs:
            c = _chunk_of(m)
            if c is None or c[0] in self._known:
                continue
            u, cid, _ = c
            if u not in out:
                if cid == 0:
                    self._known.add(u)  # begins here
                else:
                    out[u] = cid
        return out

    def add_earlier(self, msgs: list[Message], wanted: dict[str, int]) -> None:
        """Chunks of ``wanted`` messages read back from before the range."""
        for m in msgs:
            c = _chunk_of(m)
            if c is not None and c[0] in wanted and c[1] < wanted[c[0]]:
                self._pending.setdefault(c[0], {})[c[1]] = m.data

    def give_up(self, uuids: set[str]) -> None:
        """Messages whose first chunks are not there (retention removed them): their
        remaining chunks are left out."""
        self._known |= uuids

    def feed(self, msgs: list[Message]) -> list[Message]:
        out: list[Message] = []
        for m in msgs:
            c = _chunk_of(m)
            if c is None:
                out.append(m)
                continue
            u, cid, count = c
            self._known.add(u)
            pieces = self._pending.setdefault(u, {})
            pieces[cid] = m.data
            if len(pieces) < count:
                continue
            del self._pending[u]
            if any(j not in pieces for j in range(count)):
                continue  # bad ids: not a message of ours, and never whole
            data = b"".join(pieces[j] for j in range(count))
            headers = {k: v for k, v in m.headers.items() if k not in _CHUNK_HEADERS}
            out.append(m._replace(data=data, headers=headers))
        return out


_CHUNK_HEADERS = (CHUNK_UUID, CHUNK_ID, CHUNK_COUNT)
