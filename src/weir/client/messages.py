"""What a reader hands out: messages and batches decoded from stored chunks."""

from __future__ import annotations

import datetime as dt
import gc
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

from weir import compiled
from weir.errors import UnsupportedCodecError
from weir.storage.batch import decode_payload, iter_batches
from weir.storage.codecs import Codec, codec_name, is_opaque
from weir.storage.codecs import decompress_message as storage_decompress_message

_UTC = dt.UTC
T = TypeVar("T")


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


EMPTY_HEADERS: Mapping[str, str] = MappingProxyType({})

compiled.load(
    "weir.client._message_rows",
    Path(__file__).with_name("_message_rows.c"),
    "the reader's compiled Message builder",
)
# typed by _message_rows.pyi; imported only once `load` has checked the build
from weir.client._message_rows import rows as _rows  # noqa: E402


@dataclass(slots=True)
class _Part:
    """The records of one stored batch from a given offset on, as columns."""

    first_offset: int
    count: int
    seqs: Any  # range or list[int]
    created: Any  # list[int], or one int for all
    written: int
    producer_id: str
    keys: list[bytes] | None
    data: list[bytes]
    headers: list[dict[str, str]] | None


class Batch:
    """Consecutive messages of one partition, as a reader receives them.

    Decoded by column: `values`, `keys` and `offsets` are plain lists, cheap to
    use for high-volume consumers; `messages` builds (and keeps) a `Message` per
    record on first use, iterating the batch builds each one as the loop takes it.
    """

    __slots__ = ("_messages", "_parts", "nbytes", "partition", "session", "topic")

    def __init__(
        self, topic: str, partition: int, parts: list[_Part], nbytes: int, session: Any = None
    ) -> None:
        self.topic = topic
        self.partition = partition
        self._parts = parts
        self.nbytes = nbytes
        self.session = session
        self._messages: list[Message] | None = None

    @property
    def messages(self) -> list[Message]:
        if self._messages is None:
            self._messages = _paused_gc(
                _messages, self.topic, self.partition, self._parts, self.session
            )
        return self._messages

    @property
    def values(self) -> list[bytes]:
        """The data of every message, in offset order."""
        if len(self._parts) == 1:
            return self._parts[0].data
        return [d for p in self._parts for d in p.data]

    @property
    def keys(self) -> list[bytes]:
        return [k for p in self._parts for k in (p.keys if p.keys is not None else [b""] * p.count)]

    @property
    def offsets(self) -> range:
        return range(self.start_offset, self.end_offset)

    @property
    def start_offset(self) -> int:
        return self._parts[0].first_offset

    @property
    def end_offset(self) -> int:
        """Offset after the last message: what a commit of the batch stores."""
        last = self._parts[-1]
        return last.first_offset + last.count

    @property
    def commit_offset(self) -> int:
        return self.end_offset

    def __iter__(self) -> Iterator[Message]:
        """The messages one at a time, built as the loop asks for them (unless `messages`
        built the list already): a loop that drops each message frees it at once, so no
        batch-sized list of them waits for the garbage collector to walk it (about a
        third of a Message loop's CPU when the list was built first)."""
        if self._messages is not None:
            return iter(self._messages)
        t, part, session = self.topic, self.partition, self.session
        return chain.from_iterable(_part_messages(t, part, p, session) for p in self._parts)

    def __len__(self) -> int:
        return sum(p.count for p in self._parts)

    def __repr__(self) -> str:
        return f"Batch(topic={self.topic!r}, partition={self.partition}, offsets={self.start_offset}..{self.end_offset - 1})"


def decode_parts(chunks: Sequence[bytes | memoryview], from_offset: int) -> list[_Part]:
    """The records at or after ``from_offset`` in concatenated stored batches, by column (CRCs checked)."""
    return _paused_gc(_decode_parts, chunks, from_offset)


def decode_chunks(
    topic: str,
    partition: int,
    chunks: Sequence[bytes | memoryview],
    from_offset: int,
    session: Any = None,
    to_offset: int | None = None,
) -> list[Message]:
    """Messages in ``[from_offset, to_offset)`` of concatenated stored batches (CRCs checked);
    no ``to_offset``: to the end of the chunks."""
    parts = _paused_gc(_decode_parts, chunks, from_offset, to_offset)
    return _paused_gc(_messages, topic, partition, parts, session)


def _paused_gc(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn`` with the cyclic garbage collector paused.

    Decoding makes many small objects that form no cycles; letting the collector
    rescan a growing list of them halves the decoding rate.
    """
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return fn(*args)
    finally:
        if paused:
            gc.enable()


def _decode_parts(
    chunks: Sequence[bytes | memoryview], from_offset: int, to_offset: int | None = None
) -> list[_Part]:
    parts: list[_Part] = []
    for chunk in chunks:
        for pos, h in iter_batches(chunk):
            if h.next_offset <= from_offset:
                continue
            if to_offset is not None and h.base_offset >= to_offset:
                return parts
            p = decode_payload(chunk, pos, h)
            n = h.record_count
            if to_offset is not None and h.next_offset > to_offset:
                n = to_offset - h.base_offset  # the records past the range are left out
            skip = max(0, from_offset - h.base_offset)
            if n <= skip:
                continue
            trim = skip > 0 or n < h.record_count
            data = p.data_list()
            if trim:
                data = data[skip:n]
            if h.data_codec != Codec.RAW:
                # written through the YDB front: each message's data is compressed on its own
                data = [decompress_message(h.data_codec, d) for d in data]
            if p.seq_deltas is None:
                seqs: Any = range(h.first_seq + skip, h.first_seq + n)
            else:
                seqs = list(map(h.first_seq.__add__, p.seq_deltas[skip:n]))
            if p.created_deltas is None:
                created: Any = h.created_base
            else:
                created = list(map(h.created_base.__add__, p.created_deltas[skip:n]))
            keys = p.key_list() if p.key_lens is not None else None
            headers = p.header_list() if p.header_lens is not None else None
            if trim:
                keys = keys[skip:n] if keys is not None else None
                headers = headers[skip:n] if headers is not None else None
            parts.append(
                _Part(
                    h.base_offset + skip,
                    n - skip,
                    seqs,
                    created,
                    h.written_at,
                    h.producer_id,
                    keys,
                    data,
                    headers,
                )
            )
    return parts


def _messages(topic: str, partition: int, parts: list[_Part], session: Any) -> list[Message]:
    """Message tuples built column by column with map/zip: no Python code runs per record."""
    out: list[Message] = []
    for p in parts:
        out.extend(_part_messages(topic, partition, p, session))
    return out


def _part_messages(topic: str, partition: int, p: _Part, session: Any) -> Iterator[Message]:
    """The part's messages, built in C as they are asked for (`_message_rows.c`)."""
    seqs = p.seqs.start if isinstance(p.seqs, range) else p.seqs
    return _rows(
        Message,
        topic,
        partition,
        p.first_offset,
        p.count,
        seqs,
        p.created,
        p.written,
        p.producer_id,
        p.keys,
        p.data,
        p.headers,
        session,
        b"",
        EMPTY_HEADERS,
    )


def decompress_message(codec: int, data: bytes) -> bytes:
    """Decompress the data of one message written through the YDB front (its batch's
    ``data_codec`` says how each message was compressed; the size is not recorded)."""
    if is_opaque(codec):
        raise UnsupportedCodecError(
            f"messages written with codec {codec} ({codec_name(codec)}) by a ydb SDK writer are "
            "stored as written and weir cannot decode them: read them with the ydb SDK and its "
            "decoder for that codec"
        )
    return storage_decompress_message(codec, data)
