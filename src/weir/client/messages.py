"""What a reader hands out: messages and batches decoded from stored chunks."""

from __future__ import annotations

import datetime as dt
import gc
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from types import MappingProxyType
from typing import Any, NamedTuple

from weir.storage.batch import decode_payload, iter_batches
from weir.storage.codecs import Codec, decompress

_UTC = dt.UTC


def _ms_to_dt(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, _UTC)


class Message(NamedTuple):
    """One message as stored: where it is (topic, partition, offset) and what it carries.

    A tuple, so that a batch of them is built in C without a Python call per message.
    """

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
    session: Any = None

    @property
    def created_at(self) -> dt.datetime:
        return _ms_to_dt(self.created_at_ms)

    @property
    def written_at(self) -> dt.datetime:
        return _ms_to_dt(self.written_at_ms)

    @property
    def commit_offset(self) -> int:
        """The offset a commit of this message stores (the next one to read)."""
        return self.offset + 1

    def __repr__(self) -> str:
        return (
            f"Message(topic={self.topic!r}, partition={self.partition}, offset={self.offset}, "
            f"seq_no={self.seq_no}, key={self.key!r}, data={self.data[:64]!r}, headers={dict(self.headers)!r})"
        )


@dataclass(slots=True, eq=False)
class Batch:
    """Consecutive messages of one partition, as a reader receives them."""

    topic: str
    partition: int
    messages: list[Message]
    nbytes: int
    session: Any = field(default=None, repr=False)

    @property
    def start_offset(self) -> int:
        return self.messages[0].offset

    @property
    def end_offset(self) -> int:
        """Offset after the last message: what a commit of the batch stores."""
        return self.messages[-1].offset + 1

    @property
    def commit_offset(self) -> int:
        return self.end_offset

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)


EMPTY_HEADERS: Mapping[str, str] = MappingProxyType({})
_new = tuple.__new__


def decode_chunks(
    topic: str, partition: int, chunks: Sequence[bytes], from_offset: int, session: Any = None
) -> list[Message]:
    """Messages at or after ``from_offset`` in concatenated stored batches (CRCs checked).

    Built column by column with map/zip, so no Python code runs per message. The
    cyclic garbage collector is paused meanwhile: the tuples made here form no cycles,
    and letting it rescan a growing list of them halves the decoding rate.
    """
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return _decode_chunks(topic, partition, chunks, from_offset, session)
    finally:
        if paused:
            gc.enable()


def _decode_chunks(
    topic: str, partition: int, chunks: Sequence[bytes], from_offset: int, session: Any
) -> list[Message]:
    out: list[Message] = []
    for chunk in chunks:
        for pos, h in iter_batches(chunk):
            if h.next_offset <= from_offset:
                continue
            p = decode_payload(chunk, pos, h)
            n = h.record_count
            skip = max(0, from_offset - h.base_offset)
            data: Any = p.data_list()
            if h.data_codec != Codec.RAW:
                # written through the YDB front: each message's data is compressed on its own
                data = [_decompress_unknown(h.data_codec, d) for d in data]
            if p.seq_deltas is None:
                seqs: Any = range(h.first_seq + skip, h.first_seq + n)
            else:
                seqs = map(h.first_seq.__add__, p.seq_deltas[skip:])
            if p.created_deltas is None:
                created: Any = repeat(h.created_base)
            else:
                created = map(h.created_base.__add__, p.created_deltas[skip:])
            keys: Any = p.key_list()[skip:] if p.key_lens is not None else repeat(b"")
            headers: Any = (
                p.header_list()[skip:] if p.header_lens is not None else repeat(EMPTY_HEADERS)
            )
            rows = zip(
                repeat(topic),
                repeat(partition),
                range(h.base_offset + skip, h.base_offset + n),
                seqs,
                created,
                repeat(h.written_at),
                repeat(h.producer_id),
                keys,
                data[skip:] if skip else data,
                headers,
                repeat(session),
            )
            out.extend(map(_new, repeat(Message), rows))
    return out


def _decompress_unknown(codec: int, data: bytes) -> bytes:
    """Decompress one message whose uncompressed size the batch does not record."""
    if codec == Codec.GZIP:
        import zlib

        return zlib.decompress(data, 16 + zlib.MAX_WBITS)
    if codec == Codec.ZSTD:
        import zstandard

        return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(data))
    return decompress(codec, data, len(data))
