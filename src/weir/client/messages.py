"""What a reader hands out: messages and batches decoded from stored chunks."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from weir.storage.batch import decode_payload, iter_batches
from weir.storage.codecs import Codec, decompress

_UTC = dt.UTC


def _ms_to_dt(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, _UTC)


@dataclass(slots=True, eq=False)
class Message:
    """One message as stored: where it is (topic, partition, offset) and what it carries."""

    topic: str
    partition: int
    offset: int
    seq_no: int
    created_at_ms: int
    written_at_ms: int
    producer_id: str
    key: bytes
    data: bytes
    headers: dict[str, str]
    _session: Any = field(default=None, repr=False)

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


@dataclass(slots=True, eq=False)
class Batch:
    """Consecutive messages of one partition, as a reader receives them."""

    topic: str
    partition: int
    messages: list[Message]
    nbytes: int
    _session: Any = field(default=None, repr=False)

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


def decode_chunks(
    topic: str, partition: int, chunks: Sequence[bytes], from_offset: int, session: Any = None
) -> list[Message]:
    """Messages at or after ``from_offset`` in concatenated stored batches (CRCs checked)."""
    out: list[Message] = []
    for chunk in chunks:
        for pos, h in iter_batches(chunk):
            if h.next_offset <= from_offset:
                continue
            cols = decode_payload(chunk, pos, h).columns()
            data = cols.data
            if h.data_codec != Codec.RAW:
                # written through the YDB front: each message's data is compressed on its own
                data = [_decompress_unknown(h.data_codec, d) for d in data]
            base = h.base_offset
            skip = max(0, from_offset - base)
            written = h.written_at
            pid = h.producer_id
            for i in range(skip, h.record_count):
                out.append(
                    Message(
                        topic,
                        partition,
                        base + i,
                        cols.seq_nos[i],
                        cols.created_at[i],
                        written,
                        pid,
                        cols.keys[i],
                        data[i],
                        cols.headers[i],
                        session,
                    )
                )
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
