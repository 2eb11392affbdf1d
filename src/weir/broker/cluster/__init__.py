"""The broker cluster: partitions owned by one broker at a time through ZooKeeper.

`claims` (the records: partitions, assignments, claims with generations),
`placement` (where partitions should live), `ownership` (one broker's side:
membership, claims, placement when leader, session loss), `log_host` (partitions
served from replicated logs opened under their claims), `partitions` (a replicated
broker's partition actors over those logs; who to ask for a partition served
elsewhere), `topic_catalog` (the cluster's topics in ZooKeeper).
"""

from weir.broker.cluster.claims import Assignment, ClusterRecords, Owner, partition_key
from weir.broker.cluster.log_host import ReplicatedLogHost
from weir.broker.cluster.ownership import Ownership, OwnershipConfig, PartitionHost
from weir.broker.cluster.placement import place

__all__ = [
    "Assignment",
    "ClusterRecords",
    "Owner",
    "Ownership",
    "OwnershipConfig",
    "PartitionHost",
    "ReplicatedLogHost",
    "partition_key",
    "place",
]
