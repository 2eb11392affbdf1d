"""The head of a partition: its newest small blobs, kept in memory as a few segments.

Every write that does not compact adds exactly one small blob, a *piece*, to
the KV, and the KV never rewrites a piece: the next compaction either seals it
where it lies (a large piece) or copies it once into a big blob. So a byte is
committed at most twice, whatever the size of the writes. (Seed 000 merges head
blobs level by level in the KV; in LMDB every such merge rewrites the bytes once
more: 100-byte writes were committed 5.4 times.)

Many small writes mean many pieces, so in memory consecutive pieces are
coalesced into *segments*: a run of ``fanout`` segments of one level becomes
one segment of the next level. Readers, compaction and the blob list see a few
segments however many writes there were; coalescing copies memory, never the
KV. A piece that compaction will seal in place (at least the seal size, or
stored in parts) stays a segment of its own. The segments are a pure function
of the pieces in order (`push` one by one), so recovery, which replays the
pieces from the KV, rebuilds exactly the segments the writes built.
"""

from __future__ import annotations

import dataclasses
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

from weir.storage.blob import BlobInfo

SEALABLE = 254  # level of a segment that is one large piece: never coalesced

# The base offset and the size in bytes of each batch of a blob, in order: recorded as the
# batches are placed (a piece read back at start: from the check that reads it), so that a
# read bisects to its batch and a big blob packed from the head is indexed for the read
# cache without parsing its batches again. None where unknown: the headers are walked.
BatchSpans = tuple["array[int]", "array[int]"]


@dataclasses.dataclass(slots=True)
class HeadSegment:
    """The bytes of ``pieces`` consecutive KV head blobs (its offsets are in its BlobInfo)."""

    data: bytes
    pieces: int = 1
    batches: BatchSpans | None = None
    # byte position of each batch (from ``batches``, on the first read that needs it)
    starts: array[int] | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )

    def batch_at(self, offset: int) -> tuple[int, int] | None:
        """Byte position and base offset of the batch holding ``offset``, or None when the
        batches' places are not known or it is the first batch.

        A reader tailing the partition reads from inside the segment its last read ended
        in; once segments coalesce that is thousands of batches in, and walking their
        headers from the start took tens of milliseconds of the event loop."""
        spans = self.batches
        if spans is None:
            return None
        i = bisect_right(spans[0], offset) - 1
        if i <= 0:
            return None
        starts = self.starts
        if starts is None:
            starts = self.starts = array("q", accumulate(spans[1], initial=0))
        return starts[i], spans[0][i]


def join_spans(parts: Sequence[BatchSpans | None]) -> BatchSpans | None:
    """The spans of consecutive blobs as one (None if any of them is not known)."""
    offsets: array[int] = array("q")
    sizes: array[int] = array("q")
    for part in parts:
        if part is None:
            return None
        offsets.extend(part[0])
        sizes.extend(part[1])
    return offsets, sizes


Entry = tuple[BlobInfo, HeadSegment]


def merge(entries: Sequence[Entry], level: int) -> Entry:
    """One segment holding ``entries`` (consecutive) in order."""
    first, _ = entries[0]
    last, _ = entries[-1]
    info = BlobInfo(
        first.first_offset,
        last.end_offset - first.first_offset,
        sum(i.size for i, _ in entries),
        1,
        first.min_written,
        last.max_written,
        level,
    )
    data = b"".join(seg.data for _, seg in entries)
    spans = join_spans([seg.batches for _, seg in entries])
    return info, HeadSegment(data, sum(seg.pieces for _, seg in entries), spans)


def piece_level(info: BlobInfo, seal_size: int) -> int:
    """In-memory level of a new piece: SEALABLE when compaction will seal it in place."""
    return SEALABLE if info.size >= seal_size or info.parts > 1 else 0


def push(
    head: list[Entry],
    info: BlobInfo,
    data: bytes,
    seal_size: int,
    fanout: int,
    batches: BatchSpans | None = None,
) -> int:
    """Append one KV piece (``info`` as stored; ``batches``: its spans, when known) to the
    head segments, coalescing at the tail.

    Returns how many of the segments that were there before are unchanged (a prefix).
    """
    keep = len(head)
    level = piece_level(info, seal_size)
    head.append((dataclasses.replace(info, level=level), HeadSegment(data, 1, batches)))
    while len(head) >= fanout:
        tail = head[-fanout:]
        level = tail[-1][0].level
        if level >= SEALABLE - 1 or any(t[0].level != level for t in tail):
            break
        head[-fanout:] = [merge(tail, level + 1)]
        keep = min(keep, len(head) - 1)
    return keep
