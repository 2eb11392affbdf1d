"""The read side of a partition log (a mixin of `PartitionLog`): whole stored batches
from memory (the head) or the shared read cache (big blobs), checked before they are
served; what transactions hide from a reader (`weir.storage.txn_state`); time lookups."""

from __future__ import annotations

import bisect
import dataclasses

from weir.errors import CorruptDataError
from weir.storage.batch import parse_header, stamp_header
from weir.storage.batch_encoding import reencode_from
from weir.storage.blob import BlobInfo
from weir.storage.blob_reads import (
    fetch_blob,
    index_blob,
    index_spans,
    index_written,
    slice_blob,
    time_in_blob,
)
from weir.storage.change import ReadResult
from weir.storage.head import BatchSpans, HeadSegment
from weir.storage.kv import ReadView
from weir.storage.read_cache import CachedBlob
from weir.storage.tiered.partition_tier import is_remote
from weir.storage.tiered.tiered_log import TieredLog
from weir.storage.txn_state import PartitionTxns


class PartitionReads(TieredLog):
    """Reads of a `PartitionLog` (its state is declared here and in `TieredLog`, set up
    there); an offloaded blob is read from the tier."""

    txns: PartitionTxns
    _head: dict[int, HeadSegment]

    def read(
        self,
        from_offset: int,
        max_bytes: int = 1 << 20,
        to_offset: int | None = None,
        *,
        committed: bool = False,
        control: bool = False,
        fill_cache: bool = True,
        scan: tuple[int, CachedBlob] | None = None,
    ) -> ReadResult:
        """Whole batches from the one holding ``from_offset`` on, up to about ``max_bytes``
        (at least one batch) and never past ``to_offset`` or EndOffset.

        Transaction markers are left out (``control``: kept, for the Kafka front); a
        ``committed`` (read-committed) reader also stops at the last stable offset and
        gets no batch of an aborted transaction. What is left out still counts in
        ``next_offset``, so a read can return no chunks and move on.

        ``fill_cache=False`` (a one-off scan: compaction) uses what the read cache holds
        but neither adds to it nor counts or refreshes its entries, so a scan of a whole
        partition does not evict what consumers of the tail read again; the same for the
        tier's cache of offloaded blobs (``scan``: one the caller loaded uncached).
        """
        txns = self.txns
        if not txns.active:
            return self._read(from_offset, max_bytes, to_offset, fill_cache, scan)
        if committed:
            lso = txns.stable_offset(self.end_offset)
            to_offset = lso if to_offset is None else min(to_offset, lso)
        stop = self.end_offset if to_offset is None else min(to_offset, self.end_offset)
        while True:
            res = self._read(from_offset, max_bytes, to_offset, fill_cache, scan)
            if not res.chunks or not txns.touches(
                res.first_offset, res.next_offset, committed, control
            ):
                return res
            chunks, first = txns.filter(res.chunks, committed, control)
            if first is not None:
                res.chunks = chunks
                res.first_offset = first
                return res
            if res.next_offset >= stop:
                res.chunks = []
                res.first_offset = res.next_offset
                return res
            from_offset = res.next_offset

    def _read(
        self,
        from_offset: int,
        max_bytes: int = 1 << 20,
        to_offset: int | None = None,
        fill_cache: bool = True,
        scan: tuple[int, CachedBlob] | None = None,
    ) -> ReadResult:
        """`read` without regard to transactions.

        Head blobs are served from memory. A big blob is checked whole (CRCs, offsets)
        on its first read and then served from the shared read cache; one the cache
        does not take is checked as it is read. Damage raises CorruptDataError naming
        the partition and offset instead of serving wrong bytes.
        """
        start = max(from_offset, self._read_start)
        stop = self.end_offset if to_offset is None else min(to_offset, self.end_offset)
        result = ReadResult([], start, start, self.start_offset, self.end_offset)
        if start >= stop:
            return result
        i = bisect.bisect_right(self._firsts, start) - 1
        if i < 0:
            i = 0
        total = 0
        first: int | None = None
        with self.kv.snapshot() as view:
            while i < len(self._blobs):
                b = self._blobs[i]
                if b.first_offset >= stop or (total >= max_bytes and result.chunks):
                    break
                budget = max_bytes - total
                seg = self._head.get(b.first_offset) if b.is_head else None
                if is_remote(b):
                    cached = self._remote_blob(b, i, not result.chunks, fill_cache, scan)
                    if cached is None:
                        break  # not fetched yet: the next read (or read-ahead) brings it
                else:
                    cached = None if b.is_head else self._cached(view, b, fill_cache)
                if seg is not None:
                    data: bytes | memoryview = memoryview(seg.data)
                    skip = seg.batch_at(start)
                    a, z, base, nxt = slice_blob(
                        data, b, start, stop, budget, bool(result.chunks), False, self.label, skip
                    )
                elif cached is not None:
                    data = memoryview(cached.data)
                    a, z, base, nxt = cached.slice(start, stop, budget, bool(result.chunks))
                else:  # checked as it is read; copied out of the map before the view closes
                    data = fetch_blob(view, self.log_id, b, self.label)
                    a, z, base, nxt = slice_blob(
                        data, b, start, stop, budget, bool(result.chunks), True, self.label
                    )
                if z > a:
                    chunk = data[a:z]
                    result.chunks.append(bytes(chunk) if seg is None and cached is None else chunk)
                    total += z - a
                    if first is None:
                        first = base
                    result.next_offset = nxt
                    start = nxt
                if start < min(b.end_offset, stop):
                    break  # the budget ran out inside this blob
                i += 1
        if first is None:
            # offsets below EndOffset that no blob holds: never answer "nothing" for them
            if self.damage is not None:
                raise self.damage
            raise CorruptDataError(
                "no stored batch holds this offset", partition=self.label, offset=start
            )
        if self.payloads.by_offset:
            result.refs = self.payloads.within(first, result.next_offset)
        if first < self._read_start:
            first = self._cut_first(result)
        result.first_offset = first
        return result

    def _cut_first(self, result: ReadResult) -> int:
        """The first batch returned straddles the start offset (records were deleted up to
        an offset inside it, see `prepare_trim`): serve it without the deleted records, so
        no reader ever sees them. Re-encoded on each such read: a cold path."""
        chunk = result.chunks[0]
        h = parse_header(chunk)
        skip = self._read_start - h.base_offset
        body = reencode_from(memoryview(chunk)[: h.length], h, skip)
        bh = parse_header(body)
        batch = stamp_header(body, bh, self._read_start, h.written_at) + body[bh.payload_start :]
        rest = memoryview(chunk)[h.length :]
        result.chunks[:1] = [batch, rest] if len(rest) else [batch]
        refs = result.refs.pop(h.base_offset, ())
        moved = tuple(dataclasses.replace(r, index=r.index - skip) for r in refs if r.index >= skip)
        if moved:  # the batch's large payloads, renumbered as the records they belong to
            result.refs[self._read_start] = moved
        return self._read_start

    def _cache_key(self, b: BlobInfo) -> tuple[int, int, int]:
        return (self._cache_owner, b.first_offset, b.count)

    def _cached(self, view: ReadView, b: BlobInfo, fill: bool = True) -> CachedBlob | None:
        """Big blob ``b`` from the read cache, checked whole and added on a miss; None when
        the cache does not take it or it is damaged (never cached: the checked read path
        then serves its undamaged batches and refuses the damaged ones). Without ``fill``:
        the entry if the cache has it (not counted, not refreshed), else None."""
        key = self._cache_key(b)
        if not fill:
            return self._cache.peek(key)
        blob = self._cache.get(key)
        if blob is None and self._cache.admits(b.size):
            data = bytes(fetch_blob(view, self.log_id, b, self.label))
            try:
                offsets, starts = index_blob(data, b, self.label)
            except CorruptDataError:
                return None
            blob = CachedBlob(data, offsets, starts)
            self._cache.put(key, blob)
        return blob

    def _cache_written(self, b: BlobInfo, data: bytes, spans: BatchSpans | None = None) -> None:
        """A big blob just made from bytes in memory (the head, or batches checked as they
        came in) goes into the read cache as it commits: a consumer tailing the partition
        reads it from there instead of fetching it back from the KV and checking every
        batch's CRC again (Pulsar's broker keeps recent entries cached the same way).
        Indexed from ``spans`` (where its batches were placed) when they are known."""
        if not self._cache.admits(len(data)):
            return
        index = None if spans is None else index_spans(spans, b, len(data))
        if index is None:
            index = index_written(data, b)
        if index is not None:
            self._cache.put(self._cache_key(b), CachedBlob(data, *index))

    def offset_for_time(self, written_at_ms: int) -> int:
        """The first offset written at or after ``written_at_ms`` (EndOffset if none)."""
        i = 0
        for i, b in enumerate(self._blobs):  # noqa: B007 - blob count is small; linear is fine
            if b.max_written >= written_at_ms and b.end_offset > self._read_start:
                break
        else:
            return self.end_offset
        b = self._blobs[i]
        seg = self._head.get(b.first_offset) if b.is_head else None
        if seg is not None:
            return time_in_blob(seg.data, written_at_ms, b, self._read_start)
        if is_remote(b):
            rec = self.remote[b.first_offset]
            data = self.tier.fetch(self._cache_owner, rec, self.label).data
            return time_in_blob(data, written_at_ms, b, self._read_start)
        with self.kv.snapshot() as view:
            return time_in_blob(
                fetch_blob(view, self.log_id, b, self.label), written_at_ms, b, self._read_start
            )
