"""The tier's side of a partition log (a mixin of `PartitionLog`): which blobs are
offloaded, the changes that record a finished copy and free local bytes, the remote
source of the one read path, and large payloads filled back into what is read.

A blob whose local bytes were freed keeps its index entry with ``parts == 0``; its
segment record (COPY_FINISHED) is in ``remote``. See `weir.storage.tiered.manager`.
"""

from __future__ import annotations

import bisect
import dataclasses

from weir.errors import CorruptDataError
from weir.storage import keys
from weir.storage.blob import BlobInfo
from weir.storage.blob_reads import fetch_blob, index_blob
from weir.storage.change import PreparedChange, ReadResult
from weir.storage.kv import KV, Op, delete_range
from weir.storage.read_cache import CachedBlob, ReadCache
from weir.storage.tiered.partition_tier import TierReads, is_remote
from weir.storage.tiered.payloads import PayloadRefs, fill_chunks
from weir.storage.tiered.remote_metadata import RemoteSegment, SegmentState, record_op


class TieredLog:
    """Offloaded blobs and large payloads of one partition log."""

    kv: KV
    log_id: int
    label: str
    tier: TierReads
    remote: dict[int, RemoteSegment]
    payloads: PayloadRefs
    damage: CorruptDataError | None
    start_offset: int
    end_offset: int
    _blobs: list[BlobInfo]
    _firsts: list[int]
    _cache: ReadCache
    _cache_owner: int
    _read_start: int
    _last_written: int

    def _begin(self) -> None:
        raise NotImplementedError

    def _index_op(self, info: BlobInfo) -> Op:
        raise NotImplementedError

    def _let_go_remote(self, change: PreparedChange, first: int, now: int) -> None:
        rec = self.remote.get(first)
        if rec is not None:
            change.ops.append(record_op(rec.moved(SegmentState.DELETE_STARTED, now)))
            change.remote_drop.append(first)

    @property
    def local_bytes(self) -> int:
        """Bytes of blobs held locally (offloaded blobs whose bytes were freed excluded)."""
        return sum(b.size for b in self._blobs if not is_remote(b))

    @property
    def remote_bytes(self) -> int:
        return sum(r.blob_size for r in self.remote.values())

    def blob_at(self, first: int) -> BlobInfo | None:
        """The blob that starts at ``first`` (None when retention removed it)."""
        i = bisect.bisect_left(self._firsts, first)
        if i < len(self._blobs) and self._firsts[i] == first:
            return self._blobs[i]
        return None

    def read_blob(self, b: BlobInfo) -> bytes:
        """A local big blob's bytes, every batch checked (the source of an offload)."""
        with self.kv.snapshot() as view:
            data = bytes(fetch_blob(view, self.log_id, b, self.label))
        index_blob(data, b, self.label)
        return data

    def prepare_copy_finished(
        self, rec: RemoteSegment, free_local: bool, now_ms: int
    ) -> PreparedChange | None:
        """Record a verified copy (COPY_FINISHED) and, with ``free_local``, free the blob's
        local bytes in the same transaction. None when the blob is gone (retention removed
        it while it was being copied: the caller lets go of the object)."""
        b = self.blob_at(rec.first_offset)
        if b is None or b.count != rec.count or b.is_head or self.damage is not None:
            return None
        if rec.first_offset in self.remote:  # another copy finished first: keep that one
            return None
        self._begin()
        change = self._tier_change()
        change.ops.append(record_op(rec))
        change.remote_set.append(rec)
        if free_local and not is_remote(b):
            self._free_ops(change, b)
        return change

    def prepare_free_local(self, first: int) -> PreparedChange | None:
        """Free the local bytes of an offloaded blob (its deletion lag passed)."""
        b = self.blob_at(first)
        if b is None or is_remote(b) or first not in self.remote or self.damage is not None:
            return None
        self._begin()
        change = self._tier_change()
        self._free_ops(change, b)
        return change

    def _tier_change(self) -> PreparedChange:
        return PreparedChange(
            ops=[],
            nbytes=0,
            start_offset=self.start_offset,
            end_offset=self.end_offset,
            last_written=self._last_written,
        )

    def _free_ops(self, change: PreparedChange, b: BlobInfo) -> None:
        log = self.log_id
        change.ops.append(
            delete_range(
                keys.BLOBS,
                keys.blob_key(log, b.first_offset, b.count, 0),
                keys.blob_key(log, b.first_offset, b.count + 1, 0),
            )
        )
        freed = dataclasses.replace(b, parts=0)
        change.ops.append(self._index_op(freed))
        change.replace.append(freed)

    def fill_payloads(self, res: ReadResult) -> ReadResult:
        """``res`` with its large payloads fetched back into their batches (blocking: one
        object request per payload, each checked)."""
        if not res.refs:
            return res
        res.chunks = fill_chunks(
            res.chunks, res.refs, lambda r: self.tier.payload(r, self.label, res.first_offset)
        )
        res.refs = {}
        return res

    def _remote_blob(
        self,
        b: BlobInfo,
        i: int,
        block: bool,
        fill: bool = True,
        scan: tuple[int, CachedBlob] | None = None,
    ) -> CachedBlob | None:
        """An offloaded blob from the tier (blocking only when ``block``), and read-ahead
        of the next offloaded blob for a sequential reader. Without ``fill`` (a one-off
        scan) the tier's cache is neither filled nor read ahead into: ``scan`` is the
        blob the caller loaded for it (first offset, blob), else one is loaded uncached."""
        rec = self.remote[b.first_offset]
        blob = self.tier.cached(self._cache_owner, rec)
        if not fill:
            if blob is None and scan is not None and scan[0] == b.first_offset:
                blob = scan[1]
            if blob is None and block:
                blob = self.tier.load(rec, self.label)
            return blob
        if blob is None:
            if not block:
                self.tier.prefetch(self._cache_owner, rec, self.label)
                return None
            blob = self.tier.fetch(self._cache_owner, rec, self.label)
        if i + 1 < len(self._blobs) and is_remote(self._blobs[i + 1]):
            nxt = self.remote[self._blobs[i + 1].first_offset]
            if self.tier.cached(self._cache_owner, nxt) is None:
                self.tier.prefetch(self._cache_owner, nxt, self.label)
        return blob

    def remote_at(self, offset: int) -> RemoteSegment | None:
        """The record of the offloaded blob holding ``offset`` when its bytes are not in the
        tier's cache (an async reader fetches it first, off the event loop), else None."""
        start = max(offset, self._read_start)
        if start >= self.end_offset or not self.remote:
            return None
        i = max(0, bisect.bisect_right(self._firsts, start) - 1)
        if i >= len(self._blobs) or not is_remote(self._blobs[i]):
            return None
        rec = self.remote[self._blobs[i].first_offset]
        return None if self.tier.cached(self._cache_owner, rec) is not None else rec

    @property
    def cache_owner(self) -> int:
        return self._cache_owner
