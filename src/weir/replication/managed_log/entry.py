"""The bytes of one managed-log entry: a small header, then the caller's payload.

The header maps the entry to the log's offsets (``first_offset``, ``count``: the
entry holds offsets ``[first, first + count)``; count 0 for entries that carry
state rather than messages) and says how many bytes of its ledger come before it,
so the last entry of a recovered ledger gives the ledger's size.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from weir.errors import CorruptDataError
from weir.replication.managed_log.metadata import Position

_HEADER = struct.Struct("<BQIQ")
HEADER_SIZE = _HEADER.size
_VERSION = 1


@dataclass(frozen=True, slots=True)
class LogEntry:
    position: Position
    first_offset: int
    count: int
    ledger_bytes_before: int
    payload: bytes | memoryview
    size: int  # the stored entry, header included

    @property
    def end_offset(self) -> int:
        return self.first_offset + self.count


def encode_entry(first_offset: int, count: int, bytes_before: int, payload: bytes) -> bytes:
    return _HEADER.pack(_VERSION, first_offset, count, bytes_before) + payload


def decode_entry(position: Position, data: bytes) -> LogEntry:
    if len(data) < HEADER_SIZE:
        raise CorruptDataError(f"managed-log entry {position} is {len(data)} bytes: no header")
    version, first, count, before = _HEADER.unpack_from(data)
    if version != _VERSION:
        raise CorruptDataError(f"managed-log entry {position} has header version {version}")
    return LogEntry(position, first, count, before, memoryview(data)[HEADER_SIZE:], len(data))
