"""Pulsar messages as weir records, and stored weir batches as Pulsar entries. Pure.

One Send (a message, or a batch of them with a `SingleMessageMetadata` before each
payload) becomes one weir batch, so that a stored batch is a Pulsar *entry*: its
message ids are (ledger, base offset of the batch, partition, index in it), the ids the
producer got back from its SendReceipt (see `weir.protocols.pulsar.message_ids`).

What maps to what (the same for every front, so a message keeps its key, properties
and time whichever way it travels):

====================================  ====================================================
Pulsar                                weir record
====================================  ====================================================
payload                               data
partition_key (base64 when flagged)   key
properties                            headers
event_time, else publish_time         created_at (read back as event_time)
sequence_id, producer_name            seq_no, producer_id (dedup)
publish_time (on delivery)            the time the broker stored the batch
deliver_at_time                       header ``weir-deliver-at`` (ms)
ordering_key                          header ``pulsar.ordering_key`` (base64)
null_value                            header ``pulsar.null_value`` ("true"), empty data
chunk uuid / chunk_id / num_chunks    headers ``weir.chunk.uuid`` / ``.id`` / ``.count``
total_chunk_msg_size                  header ``pulsar.chunk.total_size``
====================================  ====================================================

A chunk that is not the last of its message is stored without producer id (no dedup
state: its sequence id is its message's, shared with the other chunks); the last chunk
carries the producer's sequence id, as Pulsar's broker only counts a chunked message
once its last chunk is stored.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

import lz4.block
import numpy as np
import numpy.typing as npt
import zstandard

from weir.errors import BadRequestError
from weir.protocols.pulsar import pulsar_api_pb2 as pb
from weir.storage.batch import BatchHeader, Payload, decode_payload
from weir.storage.batch_encoding import encode_batch
from weir.storage.codecs import Codec, decompress_message, is_opaque

DELIVER_AT = "weir-deliver-at"  # the broker's delayed-delivery header (ms since the epoch)
ORDERING_KEY = "pulsar.ordering_key"
NULL_VALUE = "pulsar.null_value"
CHUNK_UUID = "weir.chunk.uuid"  # weir's own chunk headers: the native SDK reassembles too
CHUNK_ID = "weir.chunk.id"
CHUNK_COUNT = "weir.chunk.count"
CHUNK_TOTAL = "pulsar.chunk.total_size"
# A batch of one message sent as a batch: delivered as one too, so that its id keeps the
# batch index 0 its producer was given
BATCHED = "pulsar.batched"
# Headers that become metadata fields on delivery, not properties.
RESERVED = frozenset({DELIVER_AT, ORDERING_KEY, NULL_VALUE, CHUNK_TOTAL, BATCHED})
_CHUNK_HEADERS = frozenset({CHUNK_UUID, CHUNK_ID, CHUNK_COUNT, CHUNK_TOTAL})

_U32 = struct.Struct(">I")
_zstd = zstandard.ZstdDecompressor()
MAX_BATCH_MESSAGES = 100_000  # more in one Send is refused (Pulsar batches hold 1000)


@dataclass(slots=True)
class Sent:
    """What one Send carries, as a weir batch ready for the broker."""

    batch: bytes
    count: int  # messages in it
    first_seq: int
    last_seq: int


def _decompress(
    metadata: pb.MessageMetadata, payload: memoryview, limit: int
) -> bytes | memoryview:
    kind = metadata.compression
    if kind == pb.NONE:
        return payload  # a view of the frame: the data is copied once, into the batch
    size = metadata.uncompressed_size
    if size > limit:
        raise BadRequestError(f"compressed payload claims {size} bytes, over the limit {limit}")
    try:
        if kind == pb.LZ4:
            out = lz4.block.decompress(bytes(payload), uncompressed_size=size)
        elif kind == pb.ZLIB:
            d = zlib.decompressobj()
            out = d.decompress(payload, size + 1)
        elif kind == pb.ZSTD:
            out = _zstd.decompress(payload, max_output_size=size + 1)
        else:
            raise BadRequestError(
                f"compression {pb.CompressionType.Name(kind)} is not served by weir: "
                "use LZ4, ZLIB, ZSTD or none"
            )
    except BadRequestError:
        raise
    except Exception as exc:  # lz4 / zlib / zstd errors
        raise BadRequestError(f"payload does not decompress: {exc}") from None
    if len(out) != size:
        raise BadRequestError(f"payload decompressed to {len(out)} bytes, metadata says {size}")
    return bytes(out)


def _key(partition_key: str, b64: bool) -> bytes:
    if not b64:
        return partition_key.encode()
    try:
        return base64.b64decode(partition_key, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequestError("partition_key flagged base64 is not base64") from None


def _headers(
    properties: Sequence[pb.KeyValue],
    ordering_key: bytes | None,
    null_value: bool,
    deliver_at: int | None,
) -> dict[str, str]:
    h = {kv.key: kv.value for kv in properties}
    if ordering_key:
        h[ORDERING_KEY] = base64.b64encode(ordering_key).decode()
    if null_value:
        h[NULL_VALUE] = "true"
    if deliver_at is not None:
        h[DELIVER_AT] = str(deliver_at)
    return h


def send_to_batch(
    metadata: pb.MessageMetadata,
    payload: memoryview,
    producer_id: str,
    *,
    is_chunk: bool = False,
    max_bytes: int = 64 << 20,
) -> Sent:
    """The weir batch for one Send; BadRequestError for what weir cannot store faithfully."""
    if len(metadata.encryption_keys):
        raise BadRequestError("encrypted messages are not served by weir")
    if metadata.HasField("txnid_most_bits") or metadata.HasField("txnid_least_bits"):
        raise BadRequestError("transactions are not served by weir")
    raw = _decompress(metadata, payload, max_bytes)
    deliver_at = metadata.deliver_at_time if metadata.HasField("deliver_at_time") else None
    publish = metadata.publish_time
    if not metadata.HasField("num_messages_in_batch"):
        key = (
            _key(metadata.partition_key, metadata.partition_key_b64_encoded)
            if metadata.HasField("partition_key") and not metadata.null_partition_key
            else b""
        )
        headers = _headers(
            metadata.properties,
            metadata.ordering_key if metadata.HasField("ordering_key") else None,
            metadata.null_value,
            deliver_at,
        )
        seq = metadata.sequence_id
        pid = producer_id
        if is_chunk or metadata.HasField("uuid"):
            headers[CHUNK_UUID] = metadata.uuid
            headers[CHUNK_ID] = str(metadata.chunk_id)
            headers[CHUNK_COUNT] = str(metadata.num_chunks_from_msg)
            headers[CHUNK_TOTAL] = str(metadata.total_chunk_msg_size)
            if metadata.chunk_id != metadata.num_chunks_from_msg - 1:
                pid = ""  # see the module docstring: only the last chunk counts for dedup
        batch = encode_batch(
            [b"" if metadata.null_value else raw],
            producer_id=pid,
            first_seq_no=seq,
            created_at=metadata.event_time or publish,
            keys=[key] if key else None,
            headers=[headers] if headers else None,
        )
        return Sent(batch, 1, seq, seq)
    n = metadata.num_messages_in_batch
    if not 0 < n <= MAX_BATCH_MESSAGES:
        raise BadRequestError(f"a batch of {n} messages: 1 to {MAX_BATCH_MESSAGES} are served")
    data: list[bytes | memoryview] = []
    keys: list[bytes] = []
    headers_list: list[dict[str, str]] = []
    seqs: list[int] = []
    created: list[int] = []
    mv = memoryview(raw)
    pos = 0
    end = len(raw)
    first = metadata.sequence_id
    any_key = any_headers = False
    smm = pb.SingleMessageMetadata()
    for i in range(n):
        if end - pos < 4:
            raise BadRequestError(f"batch ends before message {i} of {n}")
        (size,) = _U32.unpack_from(mv, pos)
        pos += 4
        if size > end - pos:
            raise BadRequestError(f"message {i}'s metadata runs past the batch")
        smm.Clear()
        try:
            smm.ParseFromString(mv[pos : pos + size])  # type: ignore[arg-type]
        except Exception as exc:
            raise BadRequestError(f"message {i}'s metadata is not valid: {exc}") from None
        if not smm.HasField("payload_size"):
            raise BadRequestError(f"message {i}'s metadata has no payload_size")
        pos += size
        psize = smm.payload_size
        if psize < 0 or psize > end - pos:
            raise BadRequestError(f"message {i}'s payload runs past the batch")
        data.append(b"" if smm.null_value else mv[pos : pos + psize])
        pos += psize
        if smm.HasField("partition_key") and not smm.null_partition_key:
            keys.append(_key(smm.partition_key, smm.partition_key_b64_encoded))
            any_key = True
        else:
            keys.append(b"")
        props = smm.properties
        ordering = smm.HasField("ordering_key")
        if props or ordering or smm.null_value or deliver_at is not None:
            h = _headers(props, smm.ordering_key if ordering else None, smm.null_value, deliver_at)
            any_headers = any_headers or bool(h)
        else:  # the common case, without a call and a dict comprehension per message
            h = {}
        headers_list.append(h)
        seqs.append(smm.sequence_id if smm.HasField("sequence_id") else first + i)
        created.append(smm.event_time or publish)
    if pos != end:
        raise BadRequestError(f"batch has {end - pos} bytes after its {n} messages")
    if n == 1:
        headers_list[0][BATCHED] = "1"
        any_headers = True
    batch = encode_batch(
        data,
        producer_id=producer_id,
        seq_nos=seqs,
        created_at=created,
        keys=keys if any_key else None,
        headers=headers_list if any_headers else None,
    )
    return Sent(batch, n, seqs[0], seqs[-1])


# ---------------------------------------------------------------------------- delivery


def _message_fields(
    target: pb.MessageMetadata | pb.SingleMessageMetadata,
    key: bytes,
    headers: Mapping[str, str],
    created_at: int,
) -> None:
    """Key, properties, event time and the reserved headers of one record onto metadata."""
    if key:
        try:
            target.partition_key = key.decode()
        except UnicodeDecodeError:
            target.partition_key = base64.b64encode(key).decode()
            target.partition_key_b64_encoded = True
    if created_at > 0:
        target.event_time = created_at
    for k, v in headers.items():
        if k in RESERVED:
            if k == ORDERING_KEY:
                with contextlib.suppress(binascii.Error, ValueError):
                    target.ordering_key = base64.b64decode(v)
            elif k == NULL_VALUE and v == "true":
                target.null_value = True
            continue
        try:
            target.properties.add(key=k, value=v)
        except (UnicodeEncodeError, ValueError):
            # A header another front stored as raw bytes (a Kafka or YDB producer's):
            # Pulsar properties are strings, so the bytes that are not UTF-8 become
            # U+FFFD, as Kafka-on-Pulsar does (Java's new String(bytes, UTF_8)).
            raw = v.encode("utf-8", "surrogateescape")
            target.properties.add(key=k, value=raw.decode("utf-8", "replace"))


def entry_of(buf: bytes | memoryview, pos: int, h: BatchHeader) -> tuple[bytes, bytes]:
    """(serialized MessageMetadata, payload) delivering the stored batch at ``pos`` as one
    Pulsar entry: a single message when the batch holds one record, else a batch."""
    p = decode_payload(buf, pos, h)
    if h.record_count > 1 and h.data_codec == Codec.RAW:
        small = _small_uniform_entry(p, h)
        if small is not None:
            return small
    # the messages' data as views of the payload: copied once, into the entry
    mv = memoryview(p.raw)
    data: list[bytes | memoryview] = [mv[a:b] for a, b in pairwise(p.data_offsets())]
    codec = h.data_codec
    if codec != Codec.RAW and not is_opaque(codec):
        data = [decompress_message(codec, bytes(d)) for d in data]
    created_at = p.created_list()
    # A batch without a producer id (a Kafka producer's that is not idempotent) has no
    # seq_nos of its own: its offsets stand in, since pulsar-client drops a message whose
    # (producer name, sequence id) it has seen before.
    seq_nos = p.seq_list() if h.producer_id else list(range(h.base_offset, h.next_offset))
    md = pb.MessageMetadata(
        producer_name=h.producer_id,
        sequence_id=seq_nos[0],
        publish_time=max(0, h.written_at),
    )
    plain = p.key_lens is None and p.header_lens is None
    if plain and h.record_count > 1 and min(created_at) > 0:
        return _plain_batch(md, data, created_at, seq_nos)
    keys, all_headers = p.key_list(), p.header_list()
    if h.record_count == 1 and BATCHED not in all_headers[0]:
        headers = all_headers[0]
        _message_fields(md, keys[0], headers, created_at[0])
        if CHUNK_TOTAL in headers and CHUNK_UUID in headers:
            try:
                md.uuid = headers[CHUNK_UUID]
                md.chunk_id = int(headers[CHUNK_ID])
                md.num_chunks_from_msg = int(headers[CHUNK_COUNT])
                md.total_chunk_msg_size = int(headers[CHUNK_TOTAL])
            except (KeyError, ValueError):
                pass
            else:
                del md.properties[:]
                for k, v in headers.items():
                    if k not in RESERVED and k not in _CHUNK_HEADERS:
                        md.properties.add(key=k, value=v)
        payload = b"" if md.null_value else bytes(data[0])
        return md.SerializeToString(), payload
    md.num_messages_in_batch = h.record_count
    md.highest_sequence_id = seq_nos[-1]
    parts: list[bytes | memoryview] = []
    smm = pb.SingleMessageMetadata()
    pack = _U32.pack
    for key, d, headers, created, seq in zip(
        keys, data, all_headers, created_at, seq_nos, strict=True
    ):
        smm.Clear()
        smm.sequence_id = seq
        if key or headers or created > 0:
            _message_fields(smm, key, headers, created)
        if smm.null_value:
            d = b""
        smm.payload_size = len(d)
        s = smm.SerializeToString()
        parts.append(pack(len(s)))
        parts.append(s)
        parts.append(d)
    return md.SerializeToString(), b"".join(parts)


SMALL_MESSAGE = 1024  # below it the per-message Python, not the copy, is the cost


def _small_uniform_entry(p: Payload, h: BatchHeader) -> tuple[bytes, bytes] | None:
    """`entry_of` for a batch of small messages of one size and one event time, without
    keys or properties, seq ids in a row (the usual producer batch): laid out with numpy
    from the stored data column, no object per message; None for any other batch."""
    n = h.record_count
    lens = p.data_lens
    size = lens[0]
    if p.key_lens is not None or p.header_lens is not None or size >= SMALL_MESSAGE:
        return None
    if lens.count(size) != n:
        return None
    created = p.created_list()
    if created[0] <= 0 or created.count(created[0]) != n:
        return None
    first = h.first_seq if h.producer_id else h.base_offset
    if h.producer_id and h.last_seq - h.first_seq != n - 1:
        return None  # sparse seq ids (strictly increasing: a span of n - 1 is a row)
    md = pb.MessageMetadata(
        producer_name=h.producer_id,
        sequence_id=first,
        publish_time=max(0, h.written_at),
        num_messages_in_batch=n,
        highest_sequence_id=first + n - 1,
    )
    raw = np.frombuffer(p.raw, np.uint8, n * size, p.data_start).reshape(n, size)
    return md.SerializeToString(), uniform_layout(raw, size, created[0], first)


def _plain_batch(
    md: pb.MessageMetadata,
    data: Sequence[bytes | memoryview],
    created_at: Sequence[int],
    seq_nos: Sequence[int],
) -> tuple[bytes, bytes]:
    """`entry_of` for the common batch (no keys, no properties, every time set): the same
    three fields for every message, set over the previous message's values rather than
    cleared and filled again (a third of the per-message cost, profiled)."""
    md.num_messages_in_batch = len(data)
    md.highest_sequence_id = seq_nos[-1]
    n = len(data)
    if seq_nos[-1] - seq_nos[0] == n - 1 and created_at.count(created_at[0]) == n:
        sizes = set(map(len, data))
        if len(sizes) == 1:  # the usual producer batch: one size, one time, seq ids in a row
            return md.SerializeToString(), uniform_messages(
                data, sizes.pop(), created_at[0], seq_nos[0]
            )
    parts: list[bytes | memoryview] = []
    add = parts.append
    pack = _U32.pack
    smm = pb.SingleMessageMetadata()
    serialize = smm.SerializeToString
    for d, created, seq in zip(data, created_at, seq_nos, strict=True):
        smm.payload_size = len(d)
        smm.event_time = created
        smm.sequence_id = seq
        s = serialize()
        add(pack(len(s)) + s)
        add(d)
    return md.SerializeToString(), b"".join(parts)


def _varint(v: int) -> bytes:
    out = bytearray()
    while v > 0x7F:
        out.append(0x80 | (v & 0x7F))
        v >>= 7
    out.append(v)
    return bytes(out)


_ONE_BYTE = [bytes([j]) for j in range(128)]  # varint of j < 128
_LOW_BYTE = [bytes([0x80 | j]) for j in range(128)]  # first byte of a longer varint


def uniform_messages(
    data: Sequence[bytes | memoryview], size: int, event_time: int, first_seq: int
) -> bytes:
    """The messages part of a batch entry whose messages all have ``size`` bytes and
    ``event_time``, sequence ids from ``first_seq`` up by one: byte for byte what
    `_plain_batch`'s protobuf loop writes (fields 3, 5, 8 in that order), with no
    Python call per message. The varint of ``seq`` is its low 7 bits (one byte) then the
    varint of ``seq >> 7``, so within each run of 128 ids the metadata differs in one
    byte: one list comprehension per run builds every message's size + metadata."""
    fixed = b"\x18" + _varint(size) + b"\x28" + _varint(event_time) + b"\x40"
    heads: list[bytes] = []
    n = len(data)
    seq = first_seq
    done = 0
    while done < n:
        high = seq >> 7
        low = seq & 0x7F
        take = min(n - done, 128 - low)
        if high:
            tail = _varint(high)
            pre = _U32.pack(len(fixed) + 1 + len(tail)) + fixed
            heads += [pre + b + tail for b in _LOW_BYTE[low : low + take]]
        else:
            pre = _U32.pack(len(fixed) + 1) + fixed
            heads += [pre + b for b in _ONE_BYTE[low : low + take]]
        done += take
        seq += take
    parts: list[bytes | memoryview] = [b""] * (2 * n)
    parts[0::2] = heads
    parts[1::2] = data
    return b"".join(parts)


def uniform_layout(
    data: npt.NDArray[np.uint8], size: int, event_time: int, first_seq: int
) -> bytes:
    """`uniform_messages` for data given as an (n, size) array: each run of 128 ids is
    one block of rows (header, then data) filled by three array assignments."""
    n = len(data)
    fixed = b"\x18" + _varint(size) + b"\x28" + _varint(event_time) + b"\x40"
    runs: list[tuple[int, int, bytes, int, int]] = []  # (first row, rows, header, low, flag)
    total = 0
    seq = first_seq
    done = 0
    while done < n:
        high = seq >> 7
        low = seq & 0x7F
        take = min(n - done, 128 - low)
        tail = _varint(high) if high else b""
        head = _U32.pack(len(fixed) + 1 + len(tail)) + fixed + b"\x00" + tail
        runs.append((done, take, head, low, 0x80 if high else 0))
        total += take * (len(head) + size)
        done += take
        seq += take
    out = np.empty(total, np.uint8)
    at = 0
    low_at = 4 + len(fixed)
    for row, rows, head, low, flag in runs:
        width = len(head) + size
        block = out[at : at + rows * width].reshape(rows, width)
        block[:, : len(head)] = np.frombuffer(head, np.uint8)
        block[:, low_at] = np.arange(low | flag, (low | flag) + rows, dtype=np.uint8)
        block[:, len(head) :] = data[row : row + rows]
        at += rows * width
    return out.tobytes()
