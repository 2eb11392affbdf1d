"""The read cache: verified big blobs, shared by every partition of a store.

A big blob read from LMDB must be CRC-checked and copied out of the memory map
(its buffer lives only as long as the read transaction). Without a cache, ten
consumers replaying one partition pay that ten times. Seed 000 gives the PQ
tablets of a node one shared blob cache; this is weir's: the first read of a big
blob copies it, checks every batch (header and payload CRC, offsets) and indexes
where each batch starts, and later reads slice it by bisection, zero-copy, with
no check left to do. Head blobs are not cached: the partition keeps them in
memory already. A big blob made from bytes in memory (the head packed or sealed,
new batches: all checked as they came in) is put in as its write commits
(`PartitionReads._cache_written`, headers indexed, payload CRCs not computed
again), so readers of what was just written never fetch it back from LMDB.

Bounded in bytes (blob bytes plus their batch index), least recently used out
first; a blob larger than the whole cache is read the uncached way. A one-off scan
(a compaction run reads a whole partition) reads with ``fill_cache=False``: it takes
an entry the cache has (`ReadCache.peek`: not counted, not refreshed) and adds none,
so it never evicts what the consumers of the tail read again and again. A blob that
fails its check is never cached (the partition serves its undamaged batches the
checked way and refuses the damaged ones).

Keys cannot alias. A key is (owner, first offset, count): ``owner`` is unique to
one `PartitionLog` object, so a partition dropped and created again under the
same log id never sees the old entries; within one log a big blob is never
rewritten (compaction only makes new ones, after the offsets it covers, or seals
a head blob in place with the same bytes) and offsets are never reused, so
(first, count) names one immutable sequence of bytes. Retention and topic drop
discard their entries as they commit; in any case a partition only looks up
blobs still in its own blob list.
"""

from __future__ import annotations

import itertools
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from dataclasses import dataclass

CacheKey = tuple[int, int, int]  # (owner, first offset, count)

DEFAULT_READ_CACHE_BYTES = 256 << 20
_ENTRY_OVERHEAD = 200  # bytes of Python objects per entry, counted against the bound


class CachedBlob:
    """A verified blob and where its batches start (both with the blob's end appended)."""

    __slots__ = ("data", "offsets", "starts")

    def __init__(self, data: bytes, offsets: array[int], starts: array[int]) -> None:
        self.data = data
        self.offsets = offsets  # base offset of each batch, then the blob's end offset
        self.starts = starts  # byte position of each batch, then len(data)

    @property
    def nbytes(self) -> int:
        """Memory this entry holds, as counted against the cache's bound."""
        return len(self.data) + 8 * (len(self.offsets) + len(self.starts)) + _ENTRY_OVERHEAD

    def slice(
        self, start: int, stop: int, budget: int, have_some: bool
    ) -> tuple[int, int, int, int]:
        """Byte range [a, z) of whole batches covering [start, stop) within ``budget`` bytes
        (at least one batch unless ``have_some``), the first's base offset and the offset
        after the last; (0, 0, start, start) when nothing is taken. Same contract as the
        partition's scan of an uncached blob, answered by bisection."""
        offsets, starts = self.offsets, self.starts
        n = len(offsets) - 1  # batches
        first = max(0, bisect_right(offsets, start, 0, n) - 1)
        if first >= n or offsets[first] >= stop:
            return 0, 0, start, start
        a = starts[first]
        # last batch: below stop, and ending within the budget
        last = min(bisect_left(offsets, stop, 0, n), bisect_right(starts, a + budget, 0, n + 1) - 1)
        last -= 1  # from "batches before" to an index
        if last < first:
            if have_some:
                return 0, 0, start, start
            last = first
        return a, starts[last + 1], offsets[first], offsets[last + 1]


@dataclass(slots=True)
class ReadCacheStats:
    """Counters since start (hits and misses are big-blob lookups by reads)."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    bytes: int = 0
    blobs: int = 0
    capacity: int = 0


class ReadCache:
    """LRU of verified big blobs, bounded in bytes; thread-safe. Capacity 0 caches nothing."""

    def __init__(self, capacity_bytes: int = DEFAULT_READ_CACHE_BYTES) -> None:
        if capacity_bytes < 0:
            raise ValueError("read cache capacity must not be negative")
        self.capacity = capacity_bytes
        self._entries: OrderedDict[CacheKey, CachedBlob] = OrderedDict()
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._evictions = 0
        self._lock = threading.Lock()
        self._owners = itertools.count(1)

    def new_owner(self) -> int:
        """A key space of its own for one partition log (never handed out twice)."""
        return next(self._owners)

    def admits(self, nbytes: int) -> bool:
        """Whether a blob of ``nbytes`` would be kept (worth verifying whole to cache it)."""
        return nbytes + _ENTRY_OVERHEAD <= self.capacity

    def get(self, key: CacheKey) -> CachedBlob | None:
        with self._lock:
            blob = self._entries.get(key)
            if blob is None:
                self._misses += 1
                return None
            self._entries.move_to_end(key)
            self._hits += 1
            return blob

    def peek(self, key: CacheKey) -> CachedBlob | None:
        """The entry if present, without counting a hit or a miss or refreshing it."""
        with self._lock:
            return self._entries.get(key)

    def put(self, key: CacheKey, blob: CachedBlob) -> None:
        size = blob.nbytes
        if size > self.capacity:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            while self._entries and self._bytes + size > self.capacity:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.nbytes
                self._evictions += 1
            self._entries[key] = blob
            self._bytes += size

    def discard(self, key: CacheKey) -> None:
        """Forget one blob (retention removed it)."""
        with self._lock:
            blob = self._entries.pop(key, None)
            if blob is not None:
                self._bytes -= blob.nbytes

    def drop_owner(self, owner: int) -> None:
        """Forget every blob of one partition log (its topic was dropped)."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == owner]:
                self._bytes -= self._entries.pop(key).nbytes

    def __contains__(self, key: CacheKey) -> bool:
        with self._lock:
            return key in self._entries

    @property
    def stats(self) -> ReadCacheStats:
        with self._lock:
            return ReadCacheStats(
                self._hits,
                self._misses,
                self._evictions,
                self._bytes,
                len(self._entries),
                self.capacity,
            )
