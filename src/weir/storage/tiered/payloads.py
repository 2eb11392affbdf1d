"""Large payloads by reference (MiniToolStream, seed 003): a message whose data is above
a topic's threshold is stored as an object of its own, and the log keeps the message
with empty data plus a reference.

- Write: the broker puts (and verifies) each large payload's object *before* the batch
  that refers to it is queued (`cut_payloads`), so no committed log entry can point at
  an object that is not there. The batch is re-encoded with the large records' data
  emptied; the references go to the ``payload_refs`` table under (log id, batch offset)
  in the same transaction as the batch itself.
- Read: the references, not anything inside a batch, say which records to fill in: a
  client cannot forge one. `fill_payloads` fetches each object, checks its CRC32C, and
  re-encodes the batch with the payload back (same codecs, seq_nos, times, offsets),
  so consumers receive the payload, never the reference.
- Collect: retention and topic drop delete the references with their blobs; the
  sweeper deletes payload objects no reference names once they are older than a grace
  period (an object of a write still in flight has no reference yet).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from weir.errors import CorruptDataError
from weir.storage import keys
from weir.storage.batch import decode_payload, iter_batches, parse_header, stamp_header
from weir.storage.batch_encoding import encode_batch
from weir.storage.codecs import Codec
from weir.storage.incoming import IncomingBatch
from weir.storage.kv import Op, ReadView, delete_range, put

PAYLOAD_REFS = "payload_refs"
PAYLOADS_PREFIX = "payloads/"


@dataclass(frozen=True, slots=True)
class PayloadRef:
    """Record ``index`` of a batch has its data in object ``key`` (``size`` bytes, CRC32C)."""

    index: int
    key: str
    size: int
    crc: int


def pack_refs(refs: Sequence[PayloadRef]) -> bytes:
    return json.dumps([[r.index, r.key, r.size, r.crc] for r in refs]).encode()


def unpack_refs(raw: bytes | memoryview) -> tuple[PayloadRef, ...]:
    return tuple(
        PayloadRef(int(i), str(k), int(n), int(c)) for i, k, n, c in json.loads(bytes(raw))
    )


def large_records(b: IncomingBatch, threshold: int) -> list[int]:
    """Indexes of the records of ``b`` whose data is above ``threshold`` bytes."""
    if len(b.buf) <= threshold:
        return []  # no record can be larger than its batch
    p = decode_payload(b.buf, 0, b.header)
    return [i for i, n in enumerate(p.data_lens) if n > threshold]


def cut_payloads(
    b: IncomingBatch, threshold: int, put_object: Callable[[bytes], PayloadRef]
) -> IncomingBatch:
    """``b`` with every record above ``threshold`` stored through ``put_object`` (which
    writes and verifies one object, blocking) and its data emptied; ``refs`` name them."""
    big = large_records(b, threshold)
    if not big:
        return b
    h = b.header
    p = decode_payload(b.buf, 0, h)
    c = p.columns()
    refs = []
    data = list(c.data)
    for i in big:
        ref = put_object(data[i])
        refs.append(PayloadRef(i, ref.key, ref.size, ref.crc))
        data[i] = b""
    buf = encode_batch(
        data,
        producer_id=h.producer_id,
        seq_nos=c.seq_nos,
        created_at=c.created_at,
        keys=c.keys if p.key_lens is not None else None,
        headers=c.headers if p.header_lens is not None else None,
        codec=Codec(h.codec),
        data_codec=h.data_codec,
    )
    return IncomingBatch(buf, parse_header(buf), tuple(refs))


def fill_batch(
    buf: bytes | memoryview, refs: Sequence[PayloadRef], fetch: Callable[[PayloadRef], bytes]
) -> bytes:
    """The stored batch ``buf`` with its referenced records' data fetched back."""
    h = parse_header(buf)
    p = decode_payload(buf, 0, h)
    c = p.columns()
    data = list(c.data)
    for r in refs:
        data[r.index] = fetch(r)
    out = encode_batch(
        data,
        producer_id=h.producer_id,
        seq_nos=c.seq_nos,
        created_at=c.created_at,
        keys=c.keys if p.key_lens is not None else None,
        headers=c.headers if p.header_lens is not None else None,
        codec=Codec(h.codec),
        data_codec=h.data_codec,
    )
    oh = parse_header(out)
    return stamp_header(out, oh, h.base_offset, h.written_at) + bytes(out[oh.payload_start :])


def fill_chunks(
    chunks: Sequence[bytes | memoryview],
    refs: dict[int, tuple[PayloadRef, ...]],
    fetch: Callable[[PayloadRef], bytes],
) -> list[bytes | memoryview]:
    """Chunks of stored batches with every referenced batch filled (others untouched)."""
    out: list[bytes | memoryview] = []
    for chunk in chunks:
        pieces: list[bytes | memoryview] = []
        start = 0
        mv = memoryview(chunk)
        for pos, h in iter_batches(chunk, verify=False):
            mine = refs.get(h.base_offset)
            if mine is None:
                continue
            if pos > start:
                pieces.append(mv[start:pos])
            pieces.append(fill_batch(mv[pos : pos + h.length], mine, fetch))
            start = pos + h.length
        if not pieces:
            out.append(chunk)
            continue
        if start < len(mv):
            pieces.append(mv[start:])
        out.append(b"".join(pieces))
    return out


def check_payload(ref: PayloadRef, data: bytes, label: str, offset: int) -> bytes:
    from weir.storage.tiered.segment_format import checksum

    if len(data) != ref.size or checksum(data) != ref.crc:
        raise CorruptDataError(
            f"payload object {ref.key} is {len(data)} bytes with another checksum than its "
            f"reference ({ref.size} bytes): not served",
            partition=label,
            offset=offset,
        )
    return data


class PayloadRefs:
    """The references of one partition, by batch offset (kept in memory: few batches have
    them)."""

    def __init__(self, log_id: int) -> None:
        self.log_id = log_id
        self.by_offset: dict[int, tuple[PayloadRef, ...]] = {}
        self._offsets: list[int] = []

    def load(self, view: ReadView) -> None:
        prefix = keys.log_prefix(self.log_id)
        stop = keys.log_prefix(self.log_id + 1) if self.log_id < (1 << 64) - 1 else None
        for k, v in view.scan(PAYLOAD_REFS, prefix, stop):
            self.by_offset[int.from_bytes(k[8:16], "big")] = unpack_refs(v)
        self._offsets = sorted(self.by_offset)

    def put_op(self, offset: int, refs: Sequence[PayloadRef]) -> Op:
        return put(PAYLOAD_REFS, keys.blob_key(self.log_id, offset, 0, 0)[:16], pack_refs(refs))

    def drop_ops(self, first: int, end: int) -> list[Op]:
        log = self.log_id
        return [
            delete_range(
                PAYLOAD_REFS,
                keys.blob_key(log, first, 0, 0)[:16],
                keys.blob_key(log, end, 0, 0)[:16],
            )
        ]

    def add(self, offset: int, refs: tuple[PayloadRef, ...]) -> None:
        self.by_offset[offset] = refs
        bisect.insort(self._offsets, offset)

    def drop_below(self, start: int) -> None:
        n = bisect.bisect_left(self._offsets, start)
        for off in self._offsets[:n]:
            del self.by_offset[off]
        del self._offsets[:n]

    def within(self, first: int, end: int) -> dict[int, tuple[PayloadRef, ...]]:
        """References of the batches starting in ``[first, end)``."""
        a = bisect.bisect_left(self._offsets, first)
        z = bisect.bisect_left(self._offsets, end)
        return {o: self.by_offset[o] for o in self._offsets[a:z]}


def referenced_keys(view: ReadView) -> set[str]:
    """Every payload object some reference names (for the sweeper)."""
    return {r.key for _, v in view.scan(PAYLOAD_REFS, b"") for r in unpack_refs(v)}
