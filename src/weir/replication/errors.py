"""Errors of replicated ledgers, in weir's one hierarchy (retryable vs fatal explicit)."""

from __future__ import annotations

from weir.errors import (
    BadRequestError,
    ClosedError,
    FatalError,
    NotFoundError,
    OverloadedError,
    RetryableError,
    UnavailableError,
)


class LedgerFencedError(FatalError):
    """A recoverer fenced the ledger: this writer must stop; nothing it adds is acknowledged."""

    code = "LEDGER_FENCED"


class LedgerClosedError(ClosedError):
    """The ledger is closed: its last entry is final and no add is accepted."""

    code = "LEDGER_CLOSED"


class NoSuchLedgerError(NotFoundError):
    """No metadata (client) or no data (bookie) for this ledger id."""

    code = "NO_SUCH_LEDGER"


class NoSuchEntryError(NotFoundError):
    """The bookie holds the ledger but not this entry."""

    code = "NO_SUCH_ENTRY"


class ReadBeyondLastConfirmedError(BadRequestError):
    """A read past the last add confirmed: the entry may not exist or may still be rewritten."""

    code = "READ_BEYOND_LAC"


class NotEnoughBookiesError(RetryableError):
    """Fewer bookies available or answering than the ensemble or quorum needs."""

    code = "NOT_ENOUGH_BOOKIES"


class BookieUnavailableError(UnavailableError):
    """A bookie could not be reached, or the connection to it broke mid-request."""

    code = "BOOKIE_UNAVAILABLE"


class BookieOverloadedError(OverloadedError):
    """The bookie refused the request: too many requests or bytes in flight."""

    code = "BOOKIE_OVERLOADED"


class BookieReadOnlyError(RetryableError):
    """The bookie is read-only (disk nearly full): it serves reads, refuses adds."""

    code = "BOOKIE_READ_ONLY"


class MetadataConflictError(RetryableError):
    """Someone else changed the ledger's metadata in ZooKeeper first (version mismatch)."""

    code = "METADATA_CONFLICT"


class ManagedLogFencedError(FatalError):
    """Another owner opened the managed log (it fenced this one's ledger or changed the
    metadata first): this owner must stop serving it; nothing it appends is acknowledged."""

    code = "MANAGED_LOG_FENCED"


class StaleClaimError(ManagedLogFencedError):
    """The managed log was opened under a newer ownership claim (a higher claim generation)
    than this opener's: another broker owns the partition now, so this one must not open
    it (opening would fence the newer owner)."""

    code = "STALE_CLAIM"


class ManagedLogFailedError(RetryableError):
    """The managed log lost track of its state (ZooKeeper unreachable while switching
    ledgers): every append in flight failed and the log must be opened again, which
    recovers the last ledger and finds out what was written."""

    code = "MANAGED_LOG_FAILED"


class LeadershipLostError(RetryableError):
    """This auditor no longer leads the election (its ZooKeeper session ended or its lock
    node is gone): it must stop acting; the new leader redoes what was left."""

    code = "LEADERSHIP_LOST"


class AuditorBusyError(RetryableError):
    """An elected auditor is running: it re-replicates on its own, and a one-off pass beside
    it would be two auditors acting at once."""

    code = "AUDITOR_BUSY"
