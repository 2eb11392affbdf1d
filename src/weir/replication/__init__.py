"""Replicated ledgers: BookKeeper-style bookies and the ledger client, coordinated by ZooKeeper.

A ledger is an append-only sequence of entries written by one writer to an
ensemble of bookies (E bookies, each entry on WQ of them, acknowledged after
AQ). Ledger metadata lives in ZooKeeper. Depends on `weir.storage` only.
"""
