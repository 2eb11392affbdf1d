"""Dedup and stamping of incoming batches: what survives, at which offsets.

The same rules as the embedded log's write path (`weir.storage.partition`):
records whose seq_no is at or below their producer's max are dropped and
reported skipped (a partly duplicate batch is re-encoded without them); the
rest get consecutive offsets and the write time in their headers.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from weir.storage.batch import decode_payload, parse_header, stamp_header
from weir.storage.batch_encoding import reencode_from
from weir.storage.incoming import IncomingBatch
from weir.storage.partition import BatchResult
from weir.storage.producers import ProducerState


@dataclass(slots=True)
class Stamped:
    chunks: list[bytes | memoryview] = field(default_factory=list)  # header, body, ...
    results: list[BatchResult] = field(default_factory=list)
    producers: dict[str, ProducerState] = field(default_factory=dict)  # changed ones
    end_offset: int = 0
    nbytes: int = 0


def stamp_batches(
    batches: Sequence[IncomingBatch],
    producers: Mapping[str, ProducerState],
    offset: int,
    now_ms: int,
    *,
    deduplicate: bool = True,
) -> Stamped:
    out = Stamped(end_offset=offset)
    changed = out.producers
    for b in batches:
        buf, h = b.buf, b.header
        skip = 0
        pid = h.producer_id
        st = None
        if pid:
            st = changed.get(pid) or producers.get(pid)
            if st is not None and deduplicate and h.first_seq <= st.max_seq_no:
                if h.last_seq <= st.max_seq_no:
                    out.results.append(BatchResult(offset, 0, h.record_count))
                    continue
                seqs = decode_payload(buf, 0, h).seq_list()
                skip = bisect.bisect_right(seqs, st.max_seq_no)
                buf = reencode_from(buf, h, skip)
                h = parse_header(buf)
        head = stamp_header(buf, h, offset, now_ms)
        out.chunks.append(head)
        out.chunks.append(memoryview(buf)[h.payload_start : h.length])
        out.nbytes += h.length
        out.results.append(BatchResult(offset, h.record_count, skip))
        if pid:
            top = h.last_seq if st is None else max(h.last_seq, st.max_seq_no)
            changed[pid] = ProducerState(top, offset + h.record_count - 1, now_ms)
        offset += h.record_count
    out.end_offset = offset
    return out
