"""Compaction as the broker runs it: jobs per topic, their status, compacted reads and the
automatic trigger (the pure part is `weir.storage.compaction`)."""

from weir.broker.compaction.job import (
    CompactionJob,
    CompactionStatus,
    PartitionCompactionStatus,
)

__all__ = ["CompactionJob", "CompactionStatus", "PartitionCompactionStatus"]
