"""Transactions: writes to many partitions and consumer offset commits, atomically.

`coordinator.TxnCoordinator` opens, tracks and ends transactions; `commit_group`
commits the end of one across its partitions as one KV transaction;
`producers` keeps the epochs of transactional producers (fencing); `facade` is
the `Broker` mixin the fronts call. The per-partition state (open transactions,
markers, last stable offset) is storage's: `weir.storage.txn_state`. See
docs/transactions.md.

This package imports nothing at import time: the partition actor imports
`commit_group`, and the coordinator imports the actor.
"""
