"""What the broker's partition actor uses of a partition log, as a Protocol.

Two logs implement it: the embedded `PartitionLog` (LMDB; its changes are KV ops
that the group committer makes durable) and the replicated
`weir.replication.partition_log.ReplicatedPartitionLog` (a managed log on bookies;
its changes are entries it appends itself). Both follow one change protocol:
``prepare_*`` computes a change without touching the state, the change is made
durable (how is the log's business, chosen when the actor is built), then
``apply`` makes it visible or ``abort`` forgets it. One change is in flight at a
time.

The Protocol lists the write path and the queries every broker mode needs. The
embedded log has more (transactions, the object tier, compaction floors, seek by
time, synchronous reads from blobs) that the broker reaches through the concrete
`PartitionLog`; a replicated broker refuses those features (docs/cluster.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

from weir.storage.change import BatchResult
from weir.storage.incoming import IncomingBatch
from weir.storage.partition import PartitionConfig, PartitionLog, PreparedChange
from weir.storage.producers import ProducerState


class LogChange(Protocol):
    """What the actor reads off a prepared change once it is applied."""

    @property
    def results(self) -> list[BatchResult]: ...

    @property
    def nbytes(self) -> int: ...

    @property
    def drop_front(self) -> int: ...


ChangeT = TypeVar("ChangeT", bound=LogChange)


class PartitionLogLike(Protocol[ChangeT]):
    """A partition log as the partition actor drives it (see the module docstring)."""

    label: str
    config: PartitionConfig

    @property
    def start_offset(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

    @property
    def stable_offset(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...

    @property
    def message_count(self) -> int: ...

    @property
    def producers(self) -> Mapping[str, ProducerState]: ...

    def last_seq_no(self, producer_id: str, txn_id: int = 0) -> int | None: ...

    def prepare_write(
        self,
        batches: Sequence[IncomingBatch],
        now_ms: int | None = None,
        txn_ids: Sequence[int] | None = None,
    ) -> ChangeT: ...

    def apply(self, change: ChangeT) -> None: ...

    def abort(self, change: ChangeT) -> None: ...


def _embedded_conforms(log: PartitionLog) -> PartitionLogLike[PreparedChange]:
    return log  # mypy checks here that the embedded log satisfies the Protocol
