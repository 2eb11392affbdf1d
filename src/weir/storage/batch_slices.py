"""Part of a stored batch as a batch of its own, built column by column.

A durable subscription hands out parts of stored batches (a Shared consumer gets a few
hundred messages of a batch that may hold tens of thousands). Sending the whole batch
for each part costs the server, the wire and the consumer (its CRC and its columns)
once per part; `trim_chunks` sends, of each stored batch, only the records from the
first to the last one delivered. `slice_batch` builds that batch from the stored one
without a Python object per record: the length columns are array slices, the blobs
are byte ranges, the payload is left uncompressed (the records' own data codec, if
any, is kept), and the CRCs are new.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from typing import Any

from weir.storage.batch import (
    FLAG_CREATED,
    FLAG_CREATED64,
    FLAG_HEADERS,
    FLAG_KEYS,
    FLAG_SEQ64,
    FLAG_SEQ_SPARSE,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    OFF_HEADER_CRC,
    VERSION,
    BatchHeader,
    crc32c,
    decode_payload,
    header_crc_of,
    iter_batches,
)
from weir.storage.codecs import Codec

TRIM_BELOW = 0.5  # trim a batch when the part sent is less than this share of its records


def slice_batch(buf: Any, pos: int, h: BatchHeader, lo: int, hi: int) -> bytes:
    """Records ``[lo, hi)`` (indexes) of the batch at ``pos`` of ``buf``, as one batch
    whose base offset is the stored one plus ``lo``."""
    p = decode_payload(buf, pos, h)
    raw = memoryview(p.raw)
    cols: list[Any] = []
    flags = h.flags & (FLAG_SEQ_SPARSE | FLAG_SEQ64 | FLAG_CREATED | FLAG_CREATED64)
    first_seq, last_seq = h.first_seq + lo, h.first_seq + hi - 1
    if p.seq_deltas is not None:
        base = p.seq_deltas[lo]
        first_seq, last_seq = h.first_seq + base, h.first_seq + p.seq_deltas[hi - 1]
        cols.append(array(p.seq_deltas.typecode, [d - base for d in p.seq_deltas[lo:hi]]))
    if p.created_deltas is not None:
        cols.append(p.created_deltas[lo:hi])  # deltas from the same created_base
    blobs = []
    if p.key_lens is not None and any(p.key_lens[lo:hi]):
        flags |= FLAG_KEYS
        k0 = p.keys_start + sum(p.key_lens[:lo])
        cols.append(p.key_lens[lo:hi])
        blobs.append(raw[k0 : k0 + sum(p.key_lens[lo:hi])])
    d0 = p.data_start + sum(p.data_lens[:lo])
    cols.append(p.data_lens[lo:hi])
    blobs.append(raw[d0 : d0 + sum(p.data_lens[lo:hi])])
    if p.header_lens is not None and any(p.header_lens[lo:hi]):
        flags |= FLAG_HEADERS
        h0 = p.headers_start + sum(p.header_lens[:lo])
        cols.append(p.header_lens[lo:hi])
        blobs.append(raw[h0 : h0 + sum(p.header_lens[lo:hi])])
    payload = b"".join([c.tobytes() for c in cols] + blobs)
    pid = h.producer_id.encode()
    head = bytearray(
        HEADER.pack(
            MAGIC,
            VERSION,
            int(Codec.RAW),
            flags,
            HEADER_SIZE + len(pid) + len(payload),
            0,
            h.base_offset + lo,
            h.written_at,
            crc32c(payload),
            hi - lo,
            first_seq,
            last_seq,
            h.created_base,
            h.data_codec,
            len(pid),
            len(payload),
        )
    )
    head += pid
    struct.pack_into("<I", head, OFF_HEADER_CRC, header_crc_of(head, 0, len(head)))
    return bytes(head) + payload


def trim_chunks(chunks: Sequence[Any], offsets: Sequence[int]) -> list[Any]:
    """``chunks`` (stored batches, concatenated) with each batch that holds a few of the
    sorted ``offsets`` cut down to the records from the first to the last of them;
    batches mostly delivered, and bytes holding none of them, are kept or dropped whole."""
    lo_off, hi_off = min(offsets), max(offsets) + 1
    out: list[Any] = []
    for chunk in chunks:
        mv = memoryview(chunk)
        keep_from = -1  # start of a run of batches kept as they are
        for pos, h in iter_batches(mv, verify=False):
            a = max(lo_off, h.base_offset)
            z = min(hi_off, h.next_offset)
            if z <= a:  # none of the offsets: leave it out
                if keep_from >= 0:
                    out.append(mv[keep_from:pos])
                    keep_from = -1
                continue
            if (z - a) >= TRIM_BELOW * h.record_count:
                if keep_from < 0:
                    keep_from = pos
                continue
            if keep_from >= 0:
                out.append(mv[keep_from:pos])
                keep_from = -1
            out.append(slice_batch(mv, pos, h, a - h.base_offset, z - h.base_offset))
        if keep_from >= 0:
            out.append(mv[keep_from:])
    return out
