"""Blobs: runs of consecutive batches of one partition, stored under one key.

A blob is either part of the *head* (small, recent, kept in memory too, with a
merge level) or *big* (about `max_blob_size`, sealed). A batch larger than the
maximum blob size is stored alone, split into parts under consecutive part
numbers of the same key.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

BIG = 255  # level of a sealed big blob; head blobs have levels 0..254

_INFO = struct.Struct("<QHqqB")


@dataclass(slots=True)
class BlobInfo:
    """Index entry of one blob (persisted in blob_index, kept in memory for every blob)."""

    first_offset: int
    count: int
    size: int  # bytes, all parts together
    parts: int
    min_written: int  # ms since epoch, of its first batch
    max_written: int  # ms since epoch, of its last batch
    level: int

    @property
    def end_offset(self) -> int:
        return self.first_offset + self.count

    @property
    def is_head(self) -> bool:
        return self.level != BIG

    def pack(self) -> bytes:
        return _INFO.pack(self.size, self.parts, self.min_written, self.max_written, self.level)

    @classmethod
    def unpack(cls, first_offset: int, count: int, buf: bytes | memoryview) -> BlobInfo:
        size, parts, min_w, max_w, level = _INFO.unpack(buf)
        return cls(first_offset, count, size, parts, min_w, max_w, level)


def split_parts(data: bytes, max_part: int) -> list[bytes | memoryview]:
    """Cut a blob into parts of at most ``max_part`` bytes (one part when it fits)."""
    if len(data) <= max_part:
        return [data]
    mv = memoryview(data)
    return [mv[i : i + max_part] for i in range(0, len(data), max_part)]
