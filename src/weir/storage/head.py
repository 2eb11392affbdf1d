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
from collections.abc import Sequence

from weir.storage.blob import BlobInfo

SEALABLE = 254  # level of a segment that is one large piece: never coalesced


@dataclasses.dataclass(slots=True)
class HeadSegment:
    """The bytes of ``pieces`` consecutive KV head blobs (its offsets are in its BlobInfo)."""

    data: bytes
    pieces: int = 1


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
    return info, HeadSegment(data, sum(seg.pieces for _, seg in entries))


def piece_level(info: BlobInfo, seal_size: int) -> int:
    """In-memory level of a new piece: SEALABLE when compaction will seal it in place."""
    return SEALABLE if info.size >= seal_size or info.parts > 1 else 0


def push(head: list[Entry], info: BlobInfo, data: bytes, seal_size: int, fanout: int) -> int:
    """Append one KV piece (``info`` as stored) to the head segments, coalescing at the tail.

    Returns how many of the segments that were there before are unchanged (a prefix).
    """
    keep = len(head)
    head.append((dataclasses.replace(info, level=piece_level(info, seal_size)), HeadSegment(data)))
    while len(head) >= fanout:
        tail = head[-fanout:]
        level = tail[-1][0].level
        if level >= SEALABLE - 1 or any(t[0].level != level for t in tail):
            break
        head[-fanout:] = [merge(tail, level + 1)]
        keep = min(keep, len(head) - 1)
    return keep
