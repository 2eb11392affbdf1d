"""One compaction of a topic (a long operation with its own state and future) and the
status the admin calls report."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from weir.errors import WeirError
from weir.storage.compaction import CompactionMeta, Progress


@dataclass(frozen=True, slots=True)
class PartitionCompactionStatus:
    """One partition's compacted view (zeros: never compacted) and the run on it, if any."""

    partition: int
    position: int  # the view holds the latest of each key below this offset
    keys: int
    tombstones: int
    keyless: int
    messages_before: int  # of the last run: messages it read (old view plus log)
    bytes_before: int
    messages_after: int  # messages in the view
    bytes_after: int
    finished_ms: int
    duration_ms: int
    phase: str = ""  # of a run now: "waiting", "scanning", "writing", "publishing"
    messages_scanned: int = 0

    @classmethod
    def of(
        cls, partition: int, meta: CompactionMeta | None, progress: Progress | None
    ) -> PartitionCompactionStatus:
        phase = progress.phase if progress is not None else ""
        scanned = progress.messages_scanned if progress is not None else 0
        if meta is None:
            return cls(partition, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, phase, scanned)
        return cls(
            partition,
            meta.position,
            meta.keys,
            meta.tombstones,
            meta.keyless,
            meta.messages_before,
            meta.bytes_before,
            meta.messages_after,
            meta.bytes_after,
            meta.finished_ms,
            meta.duration_ms,
            phase,
            scanned,
        )


@dataclass(frozen=True, slots=True)
class CompactionStatus:
    """A topic's compaction: whether a run is going on, how the last ended, per partition."""

    topic: str
    running: bool
    started_ms: int  # of the run going on, or of the last one (0: none since start)
    last_error: str  # of the last run ("" when it succeeded)
    partitions: list[PartitionCompactionStatus]

    @property
    def keys(self) -> int:
        return sum(p.keys for p in self.partitions)

    @property
    def bytes_before(self) -> int:
        return sum(p.bytes_before for p in self.partitions)

    @property
    def bytes_after(self) -> int:
        return sum(p.bytes_after for p in self.partitions)


@dataclass(eq=False)
class CompactionJob:
    """A run over a topic's partitions, one after the other, in a worker thread."""

    topic: str
    started_ms: int
    progress: dict[int, Progress] = field(default_factory=dict)
    error: str = ""  # the failure's message
    failure: WeirError | None = None
    cancelled: bool = False
    task: asyncio.Task[None] | None = None
    # (partition, lowest offset) the run reads now: retention keeps them (compaction_hold)
    reading: tuple[int, int] | None = None

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def cancel(self) -> None:
        """Ask the run to stop at its next step; what it had not published is never served."""
        self.cancelled = True

    async def wait(self) -> None:
        if self.task is not None:
            await asyncio.shield(self.task)
