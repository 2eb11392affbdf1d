"""The ledger client: create, write, close, open and recover ledgers on bookies."""

from weir.replication.ledger.client import LedgerClient
from weir.replication.ledger.handle import LedgerHandle, ReadHandle
from weir.replication.ledger.metadata import LedgerMetadata, LedgerState

__all__ = ["LedgerClient", "LedgerHandle", "LedgerMetadata", "LedgerState", "ReadHandle"]
