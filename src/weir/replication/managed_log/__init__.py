"""A partition's log as a sequence of ledgers recorded in ZooKeeper (Pulsar's ManagedLedger)."""

from weir.replication.managed_log.config import ManagedLogConfig
from weir.replication.managed_log.entry import LogEntry
from weir.replication.managed_log.log import AppendResult, LogState, ManagedLog
from weir.replication.managed_log.metadata import LedgerInfo, Position, SnapshotInfo

__all__ = [
    "AppendResult",
    "LedgerInfo",
    "LogEntry",
    "LogState",
    "ManagedLog",
    "ManagedLogConfig",
    "Position",
    "SnapshotInfo",
]
