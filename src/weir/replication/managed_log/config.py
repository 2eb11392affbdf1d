"""Settings of a managed log: the quorums of its ledgers, when to roll over, the cache."""

from __future__ import annotations

from dataclasses import dataclass

from weir.errors import BadRequestError


@dataclass(frozen=True, slots=True)
class ManagedLogConfig:
    """Ledgers are E / WQ / AQ (docs/replication.md). A ledger is closed and the next one
    opened once it holds ``max_entries_per_ledger`` entries or ``max_ledger_bytes``
    bytes, or is ``max_ledger_age_s`` old at an append (Pulsar: 50,000 entries, 2 GiB,
    4 hours): retention frees whole ledgers, so smaller ledgers free space sooner."""

    ensemble_size: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    max_entries_per_ledger: int = 50_000
    max_ledger_bytes: int = 256 << 20
    max_ledger_age_s: float = 4 * 3600.0
    cache_bytes: int = 32 << 20
    snapshot_chunk_bytes: int = 1 << 20
    open_attempts: int = 20

    def __post_init__(self) -> None:
        e, wq, aq = self.ensemble_size, self.write_quorum, self.ack_quorum
        if not (e >= wq >= aq >= 1):
            raise BadRequestError(f"quorums must be E >= WQ >= AQ >= 1, got E={e} WQ={wq} AQ={aq}")
        if self.max_entries_per_ledger < 1 or self.max_ledger_bytes < 1:
            raise BadRequestError("ledger rollover limits must be positive")
        if self.max_ledger_age_s <= 0:
            raise BadRequestError("max_ledger_age_s must be positive")
