"""The state a replicated partition derives from its log, and its snapshots.

`PartitionState` is what the embedded log keeps in LMDB tables beside the data:
the end offset, the producer table (dedup), named positions (consumer offsets,
subscription cursors), the last write time, and the log position it reflects.
`apply_entry` is the one way it changes, both on the owner after each
acknowledged append and on a new owner replaying the log after a snapshot, so
the state after a handover is the state before it by construction.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

from weir.errors import CorruptDataError
from weir.replication.managed_log import LogEntry, Position
from weir.replication.partition_log.records import DATA, decode_state, kind_of
from weir.storage.batch import iter_batches
from weir.storage.producers import ProducerState

_VERSION = 1


@dataclass(slots=True)
class PartitionState:
    end_offset: int = 0
    last_written_ms: int = 0
    producers: dict[str, ProducerState] = field(default_factory=dict)
    positions: dict[str, bytes] = field(default_factory=dict)
    position: Position | None = None  # the last log entry reflected

    def apply_entry(self, entry: LogEntry) -> None:
        """Fold one acknowledged entry of the log into the state."""
        payload = entry.payload
        if kind_of(payload) == DATA:
            body = memoryview(payload)[1:]
            expected = entry.first_offset
            for _, h in iter_batches(body, verify=False):
                if h.base_offset != expected:
                    raise CorruptDataError(
                        f"entry {entry.position} holds a batch at offset {h.base_offset}, "
                        f"expected {expected}",
                        offset=expected,
                    )
                self.note_batch(
                    h.producer_id,
                    h.first_seq,
                    h.last_seq,
                    h.base_offset,
                    h.record_count,
                    h.written_at,
                )
                expected += h.record_count
            if expected != entry.end_offset:
                raise CorruptDataError(
                    f"entry {entry.position} covers offsets up to {entry.end_offset}, its "
                    f"batches up to {expected}",
                    offset=expected,
                )
        else:
            positions, dropped = decode_state(memoryview(payload)[1:])
            self.set_positions(positions, dropped)
        self.end_offset = max(self.end_offset, entry.end_offset)
        self.position = entry.position

    def set_positions(self, positions: dict[str, bytes | None], dropped: list[str]) -> None:
        for key, value in positions.items():
            if value is None:
                self.positions.pop(key, None)
            else:
                self.positions[key] = value
        for pid in dropped:
            self.producers.pop(pid, None)

    def note_batch(
        self, pid: str, first_seq: int, last_seq: int, base: int, count: int, written: int
    ) -> None:
        """A stored batch: its producer's max seq_no and last offset (as the embedded log
        records them), and the last write time."""
        if pid:
            st = self.producers.get(pid)
            top = last_seq if st is None else max(last_seq, st.max_seq_no)
            self.producers[pid] = ProducerState(top, base + count - 1, written)
        self.last_written_ms = max(self.last_written_ms, written)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "v": _VERSION,
                "end_offset": self.end_offset,
                "last_written_ms": self.last_written_ms,
                "position": None if self.position is None else list(self.position),
                "producers": {
                    pid: [st.max_seq_no, st.offset, st.last_write_ms]
                    for pid, st in self.producers.items()
                },
                "positions": {k: base64.b64encode(v).decode() for k, v in self.positions.items()},
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> PartitionState:
        d = json.loads(data)
        if d.get("v") != _VERSION:
            raise CorruptDataError(f"partition snapshot version {d.get('v')!r} is not {_VERSION}")
        pos = d["position"]
        return cls(
            end_offset=d["end_offset"],
            last_written_ms=d["last_written_ms"],
            position=None if pos is None else Position(*pos),
            producers={pid: ProducerState(*v) for pid, v in d["producers"].items()},
            positions={k: base64.b64decode(v) for k, v in d["positions"].items()},
        )

    def copy(self) -> PartitionState:
        return PartitionState(
            self.end_offset,
            self.last_written_ms,
            dict(self.producers),
            dict(self.positions),
            self.position,
        )
