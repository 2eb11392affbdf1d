"""Reading stored blobs: fetch a blob's bytes from the KV, check and index its batches,
and find the byte range of whole batches that covers an offset range.

Pure functions of the bytes and the blob's index entry (no partition state), so the
partition log, and anything else that reads blobs (compaction, tiering), share one
checked read path. Damage is always a CorruptDataError naming partition and offset.
"""

from __future__ import annotations

import operator
from array import array
from itertools import accumulate

from weir.errors import BatchFormatError, CorruptDataError
from weir.storage import keys
from weir.storage.batch import parse_header, verify_body
from weir.storage.blob import BlobInfo
from weir.storage.head import BatchSpans
from weir.storage.kv import ReadView


def index_blob(data: bytes | memoryview, b: BlobInfo, label: str) -> tuple[array[int], array[int]]:
    """Check every batch of blob ``b`` (header and payload CRCs, dense offsets, the
    extent its index entry gives) and return the base offset and byte position of
    each batch, each list ending with the blob's end."""
    offsets: array[int] = array("q")
    starts: array[int] = array("q")
    pos = 0
    expected = b.first_offset
    n = len(data)
    while pos < n:
        try:
            h = parse_header(data, pos)
        except BatchFormatError as exc:
            raise CorruptDataError(
                f"damaged batch: {exc}", partition=label, offset=expected
            ) from None
        if h.base_offset != expected:
            raise CorruptDataError(
                f"batch at byte {pos} of blob has offset {h.base_offset}",
                partition=label,
                offset=expected,
            )
        try:
            verify_body(data, pos, h)
        except BatchFormatError as exc:
            raise CorruptDataError(
                f"damaged batch: {exc}", partition=label, offset=expected
            ) from None
        offsets.append(expected)
        starts.append(pos)
        pos += h.length
        expected = h.next_offset
    if expected != b.end_offset:
        raise CorruptDataError(
            f"blob holds offsets up to {expected} in {n} bytes, index says {b.end_offset}",
            partition=label,
            offset=expected,
        )
    offsets.append(expected)
    starts.append(pos)
    return offsets, starts


def index_written(data: bytes, b: BlobInfo) -> tuple[array[int], array[int]] | None:
    """`index_blob` for a blob made from batches checked as they came in (their payload
    CRCs are not computed again): headers and offsets only; None if they disagree."""
    offsets: array[int] = array("q")
    starts: array[int] = array("q")
    pos = 0
    expected = b.first_offset
    n = len(data)
    try:
        while pos < n:
            h = parse_header(data, pos)
            if h.base_offset != expected:
                return None
            offsets.append(expected)
            starts.append(pos)
            pos += h.length
            expected = h.next_offset
    except BatchFormatError:
        return None
    if expected != b.end_offset or pos != n:
        return None
    offsets.append(expected)
    starts.append(pos)
    return offsets, starts


def index_spans(
    spans: BatchSpans, b: BlobInfo, nbytes: int
) -> tuple[array[int], array[int]] | None:
    """`index_written` from where the batches were placed, without reading a header (a
    big blob packed from the head: 6 MiB of small batches took 0.15 s of the event loop
    to parse); None when the spans do not fill the blob exactly (parse it then)."""
    offsets, sizes = spans
    if not offsets or len(offsets) != len(sizes) or offsets[0] != b.first_offset:
        return None
    if offsets[-1] >= b.end_offset or not all(map(operator.lt, offsets, offsets[1:])):
        return None
    starts: array[int] = array("q", accumulate(sizes, initial=0))
    if starts[-1] != nbytes:
        return None
    ends: array[int] = array("q", offsets)
    ends.append(b.end_offset)
    return ends, starts


def fetch_blob(view: ReadView, log_id: int, b: BlobInfo, label: str) -> memoryview:
    if b.parts == 1:
        v = view.get(keys.BLOBS, keys.blob_key(log_id, b.first_offset, b.count, 0))
        if v is None:
            raise CorruptDataError("blob is missing", partition=label, offset=b.first_offset)
        if len(v) != b.size:
            raise CorruptDataError(
                f"blob is {len(v)} bytes, index says {b.size}",
                partition=label,
                offset=b.first_offset,
            )
        return v
    pieces = []
    for part in range(b.parts):
        v = view.get(keys.BLOBS, keys.blob_key(log_id, b.first_offset, b.count, part))
        if v is None:
            raise CorruptDataError(
                f"blob part {part} is missing", partition=label, offset=b.first_offset
            )
        pieces.append(v)
    data = b"".join(pieces)
    if len(data) != b.size:
        raise CorruptDataError(
            f"blob is {len(data)} bytes, index says {b.size}",
            partition=label,
            offset=b.first_offset,
        )
    return memoryview(data)


def slice_blob(
    data: bytes | memoryview,
    b: BlobInfo,
    start: int,
    stop: int,
    budget: int,
    have_some: bool,
    verify: bool,
    label: str,
    skip_to: tuple[int, int] | None = None,
) -> tuple[int, int, int, int]:
    """Byte range [a, z) of whole batches of blob ``b`` covering [start, stop) within
    ``budget`` bytes; also the base offset of the first and the offset after the last.
    ``skip_to``: the byte position and base offset of a batch at or before ``start`` to
    begin the walk at (every header from there on is still checked)."""
    pos, expected = (0, b.first_offset) if skip_to is None else skip_to
    a = z = -1
    base = nxt = start
    n = len(data)
    while pos < n and expected < stop:
        try:
            h = parse_header(data, pos)
        except BatchFormatError as exc:
            raise CorruptDataError(
                f"damaged batch: {exc}", partition=label, offset=expected
            ) from None
        if h.base_offset != expected:
            raise CorruptDataError(
                f"batch at byte {pos} of blob has offset {h.base_offset}",
                partition=label,
                offset=expected,
            )
        end = pos + h.length
        if h.next_offset > start:
            if a < 0:
                a = pos
                base = h.base_offset
            elif end - a > budget:
                break
            if a == pos and have_some and h.length > budget:
                break
            if verify:
                try:
                    verify_body(data, pos, h)
                except BatchFormatError as exc:
                    raise CorruptDataError(
                        f"damaged batch: {exc}", partition=label, offset=h.base_offset
                    ) from None
            z = end
            nxt = h.next_offset
        pos = end
        expected = h.next_offset
    if a < 0 or z < 0:
        return 0, 0, start, start
    return a, z, base, nxt


def time_in_blob(data: bytes | memoryview, ts: int, b: BlobInfo, read_start: int) -> int:
    """The first offset of blob ``b`` at or past ``read_start`` written at or after ``ts``
    (the blob's end if none)."""
    pos = 0
    while pos < len(data):
        h = parse_header(data, pos)
        if h.written_at >= ts and h.next_offset > read_start:
            return max(h.base_offset, read_start)
        pos += h.length
    return b.end_offset
