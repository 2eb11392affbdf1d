"""What a partition change produces and what a read returns: the values that pass
between a partition log, its committer and its readers (partition.py and the tier)."""

from __future__ import annotations

from dataclasses import dataclass, field

from weir.storage.blob import BlobInfo
from weir.storage.head import BatchSpans, HeadSegment
from weir.storage.kv import Op
from weir.storage.producers import ProducerState
from weir.storage.tiered.payloads import PayloadRef
from weir.storage.tiered.remote_metadata import RemoteSegment
from weir.storage.txn_state import TxnChange


@dataclass(slots=True)
class BatchResult:
    """What happened to one incoming batch: its first ``skipped`` records were duplicates,
    the next ``written`` records are stored from ``offset`` on."""

    offset: int
    written: int
    skipped: int

    def offset_of(self, index: int) -> int | None:
        """Offset of the record at ``index`` in the batch as sent (None if skipped)."""
        if index < self.skipped:
            return None
        return self.offset + index - self.skipped


@dataclass(slots=True)
class ReadResult:
    """Whole stored batches, as contiguous chunks of concatenated batches.

    ``first_offset`` is the base offset of the first batch returned; it can be
    below the offset asked for (a batch is never cut) or above it (retention
    removed the offsets in between: compare with the request to detect a gap).
    """

    chunks: list[bytes | memoryview]
    first_offset: int
    next_offset: int
    start_offset: int
    end_offset: int
    # large payloads of batches in ``chunks``, by batch offset: not filled in yet
    refs: dict[int, tuple[PayloadRef, ...]] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(len(c) for c in self.chunks)


@dataclass(slots=True)
class NewBlob:
    """An entry the change appends to the in-memory blob list (with its bytes if head)."""

    info: BlobInfo
    segment: HeadSegment | None  # None: a big blob
    # a big blob made from bytes in memory (checked when they came in): put into the
    # read cache as it commits, so tailing readers do not fetch and check it again
    data: bytes | None = None
    batches: BatchSpans | None = None  # where the batches of ``data`` lie, when known


@dataclass(slots=True)
class PreparedChange:
    """KV ops of one write or retention step and the state they lead to."""

    ops: list[Op]
    nbytes: int
    results: list[BatchResult] = field(default_factory=list)
    drop_front: int = 0
    drop_tail: int = 0
    add: list[NewBlob] = field(default_factory=list)
    producers: dict[str, ProducerState] = field(default_factory=dict)
    drop_producers: list[str] = field(default_factory=list)
    start_offset: int = 0
    end_offset: int = 0
    last_written: int = 0
    # tier: blob entries changed in place (local bytes freed), segment records set / dropped
    replace: list[BlobInfo] = field(default_factory=list)
    remote_set: list[RemoteSegment] = field(default_factory=list)
    remote_drop: list[int] = field(default_factory=list)
    payload_add: list[tuple[int, tuple[PayloadRef, ...]]] = field(default_factory=list)
    txn: TxnChange | None = None  # what it does to the transaction state, if anything
