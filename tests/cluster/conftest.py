"""Cluster tests reuse the replication fixtures: the module's bookies and ledger clients."""

from tests.replication.conftest import (
    shared_bookie_args,
    shared_bookies,
    shared_client,
    shared_root,
)

__all__ = ["shared_bookie_args", "shared_bookies", "shared_client", "shared_root"]
