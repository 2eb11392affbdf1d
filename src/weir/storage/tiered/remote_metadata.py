"""Segment records of the tier: which blob of which partition lives in which object,
and how far its copy or deletion has come (Kafka's RemoteLogMetadataManager).

One record per copy of a blob, in the LMDB table ``remote_segments`` under the
blob's index key (log id, first offset, count) followed by the copy's object key (a
copy has its own id, like Kafka's RemoteLogSegmentId: a copy made again after an
abandoned one never shares a record with it), written through the group
committer like every other change, so a record is exactly as durable as the
partition state it sits beside. Its state moves along one path::

    COPY_STARTED -> COPY_FINISHED -> DELETE_STARTED -> (record removed: DELETE_FINISHED)
          \\___________________________/^

- COPY_STARTED is committed *before* the object is written: an object the store
  holds always has a record (or is an orphan the sweeper may remove).
- COPY_FINISHED is committed only after the object was read back or its ETag
  matched; the blob's local bytes may go in the same transaction or later.
- DELETE_STARTED is committed when retention (or a topic drop, or an abandoned
  copy) lets go of the blob; the object is deleted after that, then the record.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, replace

from weir.errors import InternalError
from weir.storage import keys
from weir.storage.kv import Op, ReadView, delete, put

REMOTE_SEGMENTS = "remote_segments"
_INDEX_KEY = len(keys.index_key(0, 0, 0))


class SegmentState(enum.IntEnum):
    COPY_STARTED = 1
    COPY_FINISHED = 2
    DELETE_STARTED = 3
    DELETE_FINISHED = 4  # never stored: the record is removed


_NEXT: dict[SegmentState | None, frozenset[SegmentState]] = {
    None: frozenset({SegmentState.COPY_STARTED}),
    SegmentState.COPY_STARTED: frozenset({SegmentState.COPY_FINISHED, SegmentState.DELETE_STARTED}),
    SegmentState.COPY_FINISHED: frozenset({SegmentState.DELETE_STARTED}),
    SegmentState.DELETE_STARTED: frozenset({SegmentState.DELETE_FINISHED}),
    SegmentState.DELETE_FINISHED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    """The record of one offloaded blob."""

    log_id: int
    first_offset: int
    count: int
    state: SegmentState
    object_key: str
    blob_size: int  # bytes of the stored batches (the blob as it is locally)
    min_written: int
    max_written: int
    object_size: int = 0  # bytes of the object (known from COPY_FINISHED on)
    object_crc: int = 0  # CRC32C of the whole object
    updated_ms: int = 0
    # An object packing several consecutive blobs (`weir.storage.tiered.packing`): the
    # blob is row group ``row_group`` of it; its ``weir_batch`` column chunk is bytes
    # ``[chunk_start, chunk_end)`` (CRC32C ``chunk_crc``), the Parquet footer bytes
    # ``[footer_start, object_size)`` (CRC32C ``footer_crc``), and the object holds
    # offsets ``[object_first, object_end)``. -1: the object is this one blob alone.
    row_group: int = -1
    chunk_start: int = 0
    chunk_end: int = 0
    chunk_crc: int = 0
    footer_start: int = 0
    footer_crc: int = 0
    object_first: int = -1
    object_end: int = -1

    @property
    def end_offset(self) -> int:
        return self.first_offset + self.count

    @property
    def packed(self) -> bool:
        """Whether the object holds other blobs too (read by ranges, deleted with the last)."""
        return self.row_group >= 0

    @property
    def object_offsets(self) -> tuple[int, int]:
        """The offsets the whole object holds (this blob's alone when it is not packed)."""
        if self.object_first < 0:
            return self.first_offset, self.end_offset
        return self.object_first, self.object_end

    def moved(self, state: SegmentState, now_ms: int, **changes: int) -> RemoteSegment:
        """This record in ``state``; a move the state machine does not allow is a bug."""
        if state not in _NEXT[self.state]:
            raise InternalError(
                f"remote segment {self.object_key}: {self.state.name} -> {state.name} "
                "is not a legal move"
            )
        return replace(self, state=state, updated_ms=now_ms, **changes)  # type: ignore[arg-type]

    def key(self) -> bytes:
        return keys.index_key(self.log_id, self.first_offset, self.count) + self.object_key.encode()

    def pack(self) -> bytes:
        d = asdict(self)
        d["state"] = int(self.state)
        del d["log_id"], d["first_offset"], d["count"]
        if not self.packed:  # records as they were before packing (readable by older code)
            for k in _PACKED_FIELDS:
                del d[k]
        return json.dumps(d, sort_keys=True).encode()

    @classmethod
    def unpack(cls, key: bytes, raw: bytes | memoryview) -> RemoteSegment:
        log_id, first, count = keys.parse_index_key(bytes(key[:_INDEX_KEY]))
        d = json.loads(bytes(raw))
        d["state"] = SegmentState(d["state"])
        return cls(log_id=log_id, first_offset=first, count=count, **d)


_PACKED_FIELDS = (
    "row_group",
    "chunk_start",
    "chunk_end",
    "chunk_crc",
    "footer_start",
    "footer_crc",
    "object_first",
    "object_end",
)


def started(
    log_id: int,
    first: int,
    count: int,
    object_key: str,
    blob_size: int,
    min_written: int,
    max_written: int,
    now_ms: int,
) -> RemoteSegment:
    """A new record, in COPY_STARTED."""
    return RemoteSegment(
        log_id,
        first,
        count,
        SegmentState.COPY_STARTED,
        object_key,
        blob_size,
        min_written,
        max_written,
        updated_ms=now_ms,
    )


def record_op(rec: RemoteSegment) -> Op:
    """The KV op that stores ``rec`` (or removes it once its deletion finished)."""
    if rec.state == SegmentState.DELETE_FINISHED:
        return delete(REMOTE_SEGMENTS, rec.key())
    return put(REMOTE_SEGMENTS, rec.key(), rec.pack())


def load_records(view: ReadView, log_id: int | None = None) -> list[RemoteSegment]:
    """Every record (of one partition when ``log_id`` is given), in key order."""
    if log_id is None:
        start, stop = b"", None
    else:
        start = keys.log_prefix(log_id)
        stop = keys.log_prefix(log_id + 1) if log_id < (1 << 64) - 1 else None
    return [RemoteSegment.unpack(k, v) for k, v in view.scan(REMOTE_SEGMENTS, start, stop)]
