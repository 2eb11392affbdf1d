"""Partition metadata: StartOffset and EndOffset, persisted with every change.

The blob index alone gives the offsets while a partition holds data; the meta
record keeps them when retention has removed every blob, so offsets never
restart from zero.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from weir.errors import CorruptDataError

_META = struct.Struct("<BQQ")
_VERSION = 1


@dataclass(frozen=True, slots=True)
class PartitionMeta:
    start_offset: int
    end_offset: int

    def pack(self) -> bytes:
        return _META.pack(_VERSION, self.start_offset, self.end_offset)

    @classmethod
    def unpack(cls, buf: bytes | memoryview) -> PartitionMeta:
        if len(buf) != _META.size:
            raise CorruptDataError(
                f"partition meta record is {len(buf)} bytes, expected {_META.size}"
            )
        version, start, end = _META.unpack(buf)
        if version != _VERSION or start > end:
            raise CorruptDataError(f"bad partition meta record (version {version}, {start}..{end})")
        return cls(start, end)
