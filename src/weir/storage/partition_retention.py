"""Retention and trims of a partition log: which blobs go from the front (by age, by
size, or below a DeleteRecords offset), with the producers, payload references and
offloaded segments that go with them. A mixin of `PartitionLog`, which supplies the
write-side pieces declared here."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from weir.errors import CorruptDataError
from weir.storage import keys
from weir.storage.blob import BlobInfo
from weir.storage.change import PreparedChange
from weir.storage.kv import Op, delete
from weir.storage.partition_reads import PartitionReads
from weir.storage.producers import ProducerState
from weir.storage.txn_state import PartitionTxns, TxnChange

if TYPE_CHECKING:
    from weir.storage.partition import PartitionConfig


class PartitionRetention(PartitionReads):
    """`prepare_retention` / `prepare_trim` (and their synchronous forms)."""

    config: PartitionConfig
    size_bytes: int
    producers: dict[str, ProducerState]
    txns: PartitionTxns

    @property
    def stable_offset(self) -> int:
        raise NotImplementedError

    def _delete_blob_ops(self, b: BlobInfo) -> list[Op]:
        raise NotImplementedError

    def _meta_op(self, start: int, end: int) -> Op:
        raise NotImplementedError

    def _commit(self, change: PreparedChange) -> None:
        raise NotImplementedError

    def prepare_retention(
        self, now_ms: int | None = None, protect_from: int | None = None
    ) -> PreparedChange | None:
        """Drop whole blobs from the front that are past retention (age or size), never
        at or past ``protect_from`` (the lowest committed offset of important consumers).

        Also forgets the state of producers whose messages are all gone and whose last
        write is older than ``producer_ttl_ms``. Returns None when nothing is due.
        Offsets being removed are hidden from readers at once; abort() shows them again.
        """
        cfg = self.config
        if self.damage is not None or (cfg.retention_ms is None and cfg.retention_bytes is None):
            return None
        if self.txns.open:  # an open transaction's batches stay until it ends
            lso = self.stable_offset
            protect_from = lso if protect_from is None else min(protect_from, lso)
        now = int(time.time() * 1000) if now_ms is None else now_ms
        n = 0
        remaining = self.size_bytes
        for b in self._blobs:
            if protect_from is not None and b.end_offset > protect_from:
                break
            expired = cfg.retention_ms is not None and b.max_written < now - cfg.retention_ms
            oversize = cfg.retention_bytes is not None and remaining - b.size >= cfg.retention_bytes
            if not (expired or oversize):
                break
            n += 1
            remaining -= b.size
        new_start = self._blobs[n - 1].end_offset if n else self.start_offset
        stale = self._stale_producers(new_start, now)
        if n == 0 and not stale:
            return None
        self._begin()
        dropped = self._blobs[:n]
        change = PreparedChange(
            ops=[],
            nbytes=0,
            drop_front=n,
            start_offset=new_start,
            end_offset=self.end_offset,
            last_written=self._last_written,
        )
        for b in dropped:
            change.ops.extend(self._delete_blob_ops(b))
            self._let_go_remote(change, b.first_offset, now)
        self._drop_refs_of(change, dropped)
        for pid in stale:
            change.drop_producers.append(pid)
            change.ops.append(delete(keys.PRODUCERS, keys.producer_key(self.log_id, pid)))
        change.ops.append(self._meta_op(new_start, self.end_offset))
        prune = self.txns.prune_ops(new_start)
        if prune:
            change.ops.extend(prune)
            change.txn = TxnChange(prune_below=new_start)
        self._read_start = new_start
        return change

    def _drop_refs_of(self, change: PreparedChange, dropped: Sequence[BlobInfo]) -> None:
        """Delete the payload references of the batches in ``dropped`` (the front blobs;
        from the first blob's first offset: a trim can leave the start inside it)."""
        if not dropped:
            return
        first, end = dropped[0].first_offset, dropped[-1].end_offset
        if self.payloads.within(first, end):
            change.ops.extend(self.payloads.drop_ops(first, end))

    def _stale_producers(self, new_start: int, now: int) -> list[str]:
        """Producers whose messages are all gone (or going) and who have been idle past the
        ttl: their dedup state can go (a resend that late is a new message)."""
        ttl = self.config.producer_ttl_ms
        if ttl is None:
            return []
        return [
            pid
            for pid, st in self.producers.items()
            if st.offset < new_start and st.last_write_ms < now - ttl
        ]

    def prepare_trim(self, before: int, now_ms: int | None = None) -> PreparedChange | None:
        """Move the start offset up to ``before`` (Kafka's DeleteRecords: the log start
        offset, a low watermark): offsets below it are gone for readers at once; blobs
        wholly below it are deleted in the same change, and a blob it falls inside stays
        until retention (or a later trim) passes its end. ``before`` is clamped to
        EndOffset; returns None when the start is already there."""
        if self.damage is not None:
            raise CorruptDataError(
                f"trim refused: {self.damage.message}; the partition needs repair",
                partition=self.label,
                offset=self.damage.offset,
            )
        new_start = min(before, self.end_offset)
        if new_start <= self.start_offset:
            return None
        self._begin()
        n = 0
        while n < len(self._blobs) and self._blobs[n].end_offset <= new_start:
            n += 1
        change = PreparedChange(
            ops=[],
            nbytes=0,
            drop_front=n,
            start_offset=new_start,
            end_offset=self.end_offset,
            last_written=self._last_written,
        )
        now = int(time.time() * 1000) if now_ms is None else now_ms
        for b in self._blobs[:n]:
            change.ops.extend(self._delete_blob_ops(b))
            self._let_go_remote(change, b.first_offset, now)
        self._drop_refs_of(change, self._blobs[:n])
        for pid in self._stale_producers(new_start, now):
            change.drop_producers.append(pid)
            change.ops.append(delete(keys.PRODUCERS, keys.producer_key(self.log_id, pid)))
        prune = self.txns.prune_ops(new_start)  # markers below the start: no reader needs them
        if prune:
            change.ops.extend(prune)
            change.txn = TxnChange(prune_below=new_start)
        change.ops.append(self._meta_op(new_start, self.end_offset))
        self._read_start = new_start
        return change

    def trim(self, before: int, now_ms: int | None = None) -> int:
        """Run one trim synchronously (tests, tools); returns the start offset after it."""
        change = self.prepare_trim(before, now_ms)
        if change is not None:
            self._commit(change)
        return self.start_offset

    def apply_retention(self, now_ms: int | None = None, protect_from: int | None = None) -> int:
        """Run one retention step synchronously; returns how many blobs were dropped."""
        change = self.prepare_retention(now_ms, protect_from)
        if change is None:
            return 0
        self._commit(change)
        return change.drop_front
