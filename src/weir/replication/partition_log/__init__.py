"""A partition whose log lives in a managed log on bookies, with snapshots of its derived state."""

from weir.replication.partition_log.log import (
    ReplicatedChange,
    ReplicatedPartitionLog,
    ReplicationConfig,
)
from weir.replication.partition_log.state import PartitionState

__all__ = ["PartitionState", "ReplicatedChange", "ReplicatedPartitionLog", "ReplicationConfig"]
