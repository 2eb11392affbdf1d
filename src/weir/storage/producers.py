"""Producer state: the dedup table of a partition (SourceId -> MaxSeqNo, offset in the seed)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

_STATE = struct.Struct("<QQq")


@dataclass(frozen=True, slots=True)
class ProducerState:
    """What a partition remembers of a producer: enough to drop resent messages."""

    max_seq_no: int  # highest seq_no stored
    offset: int  # offset of the record carrying max_seq_no
    last_write_ms: int  # when it last wrote (ms since epoch)

    def pack(self) -> bytes:
        return _STATE.pack(self.max_seq_no, self.offset, self.last_write_ms)

    @classmethod
    def unpack(cls, buf: bytes | memoryview) -> ProducerState:
        max_seq, offset, last = _STATE.unpack(buf)
        return cls(max_seq, offset, last)
