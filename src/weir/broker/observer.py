"""What the broker tells an observer (metrics, logs): events with topic and partition.

The default observer ignores everything; `weir.metrics` provides a Prometheus one.
Methods are called in the event loop (commit events in the committer thread) and
must be cheap.
"""

from __future__ import annotations


class BrokerObserver:
    """No-op base: override what you need."""

    def on_write(self, topic: str, partition: int, records: int, nbytes: int, skipped: int) -> None:
        """A commit of this partition stored ``records`` (``skipped`` were duplicates)."""

    def on_read(self, topic: str, partition: int, nbytes: int) -> None:
        """Stored bytes were sent to a reader (any front)."""

    def on_refused(self, topic: str, partition: int, reason: str) -> None:
        """A write was refused by backpressure (reason: 'overloaded', 'overflow', 'storage_full')."""

    def on_commit(self, jobs: int, nbytes: int, seconds: float) -> None:
        """The group committer made one durable transaction (called in its thread)."""

    def on_consumer_commit(self, topic: str, partition: int, consumer: str, offset: int) -> None:
        """A consumer's committed offset moved."""

    def on_compaction(self, topic: str, partition: int, scanned: int, kept: int) -> None:
        """A compaction run published a partition's view: it read ``scanned`` messages
        (old view and log), the view holds ``kept``."""

    def on_non_persistent(
        self, topic: str, partition: int, delivered: int, dropped: int, nbytes: int
    ) -> None:
        """A non-persistent partition took a write: ``delivered`` messages reached consumer
        queues, ``dropped`` did not (a consumer's queue was full)."""


NULL_OBSERVER = BrokerObserver()
