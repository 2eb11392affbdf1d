"""The tier manager: copy sealed blobs to the object store, read them back through a
bounded cache, delete what retention let go of, and sweep orphans.

Kafka splits tiering into data (RemoteStorageManager: `remote_storage`) and
metadata (RemoteLogMetadataManager: `remote_metadata`), driven by copy and
expiration tasks; so does weir. This module holds the tasks' storage side:

- **copy** (`copy_blob`): COPY_STARTED is committed first, then the blob is read
  locally (every batch checked), written as Parquet, and verified (the store's
  ETag equals the MD5 of what was sent, or the object is read back and its
  CRC32C compared). The caller then commits COPY_FINISHED through the partition
  (`PartitionLog.prepare_copy_finished`), freeing the local bytes in the same
  transaction or after the deletion lag. A crash at any point leaves the local
  blob, or a verified object and its record: never neither.
- **expire** (`expire`): records in DELETE_STARTED (retention, topic drop) and
  copies abandoned by a crash (COPY_STARTED not in flight) have their object
  deleted, then their record removed.
- **sweep** (`sweep`): objects under ``segments/`` that no record names are
  orphans (a record is always committed before its object is written, so such an
  object can only be left over) and are deleted.
- **reads** (`TierReads`): one GET per offloaded blob, whole-object CRC32C checked
  against the record, then the Parquet file's ``weir_batch`` column decoded and
  every batch's CRC checked (`index_blob`), into an LRU bounded in bytes. A
  damaged or truncated object is fetched once more, then refused with
  CorruptDataError; it is never served. Read-ahead brings the next offloaded blob
  of a sequential reader into the cache in the background.

A store that cannot be reached makes copies fail with TierUnavailableError (the
blob simply stays local; the broker retries with backoff) and reads of offloaded
offsets fail with the same retryable error.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow.parquet as pq

from weir.errors import CorruptDataError, ObjectMissingError, TierUnavailableError
from weir.storage.blob import BIG, BlobInfo
from weir.storage.blob_reads import index_blob
from weir.storage.committer import GroupCommitter
from weir.storage.kv import KV
from weir.storage.read_cache import CachedBlob, ReadCache
from weir.storage.tiered.partition_tier import is_remote
from weir.storage.tiered.payloads import (
    PAYLOADS_PREFIX,
    PayloadRef,
    check_payload,
    fill_chunks,
    referenced_keys,
)
from weir.storage.tiered.remote_metadata import (
    RemoteSegment,
    SegmentState,
    load_records,
    record_op,
    started,
)
from weir.storage.tiered.remote_storage import RemoteStorage, md5_etag
from weir.storage.tiered.segment_format import (
    BlobRows,
    checksum,
    decode_packed_chunk,
    decode_segment,
    encode_packed,
    encode_segment,
    packed_footer,
)

log = logging.getLogger("weir.tier")

SEGMENTS_PREFIX = "segments/"
DEFAULT_TIER_CACHE_BYTES = 128 << 20
FOOTERS_KEPT = 256  # parsed footers of packed objects (a few KB each)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class OffloadPolicy:
    """When a partition's sealed blobs go to the tier (Pulsar's offload threshold and
    deletion lag; Kafka's local retention): blobs beyond ``threshold_bytes`` of local
    data, or whose newest message is older than ``threshold_ms``; their local bytes are
    freed ``deletion_lag_ms`` after the copy. Neither threshold set: no offload."""

    threshold_bytes: int | None = None
    threshold_ms: int | None = None
    deletion_lag_ms: int = 0
    # pack consecutive blobs into objects of up to this many bytes (0: one blob per
    # object); a smaller last object waits for more blobs unless ``flush`` (an offload
    # asked for now) or its oldest blob was last written ``object_wait_ms`` ago
    object_bytes: int = 0
    object_wait_ms: int = 600_000
    flush: bool = False

    @property
    def enabled(self) -> bool:
        return self.threshold_bytes is not None or self.threshold_ms is not None


@dataclass(slots=True)
class TierStats:
    """Counters since start (exported as metrics)."""

    bytes_offloaded: int = 0  # object bytes written and verified
    blob_bytes_offloaded: int = 0  # stored-batch bytes they hold
    objects_offloaded: int = 0
    objects_deleted: int = 0
    orphans_removed: int = 0
    store_errors: int = 0
    corrupt_objects: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    fetches: int = 0
    fetch_bytes: int = 0
    fetch_seconds: float = 0.0
    payload_objects_written: int = 0
    payload_bytes_written: int = 0
    payload_fetches: int = 0
    payloads_collected: int = 0
    last_error: str = ""
    fetch_latencies: list[float] = field(default_factory=list)  # drained by the metrics


class TierManager:
    """The tier of one store: its object store, its cache, its tasks' storage side."""

    def __init__(
        self,
        storage: RemoteStorage,
        kv: KV,
        committer: GroupCommitter,
        *,
        cache_bytes: int = DEFAULT_TIER_CACHE_BYTES,
        workers: int = 4,
        names: Callable[[int], tuple[str, int]] | None = None,
        payload_grace_ms: int = 600_000,
    ) -> None:
        self.storage = storage
        self.kv = kv
        self.committer = committer
        self.cache = ReadCache(cache_bytes)
        self.stats = TierStats()
        self.payload_grace_ms = payload_grace_ms
        self._names = names or (lambda log_id: (str(log_id >> 32), log_id & 0xFFFF_FFFF))
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="weir-tier")
        self._lock = threading.Lock()
        self._fetching: dict[tuple[int, int, int], Future[None]] = {}
        self._footers: OrderedDict[str, pq.FileMetaData] = OrderedDict()
        # COPY_STARTED records older than this are copies a crash abandoned; this
        # process abandons its own failed copies itself (DELETE_STARTED)
        self.started_ms = _now_ms()

    def set_names(self, names: Callable[[int], tuple[str, int]]) -> None:
        """How to name a partition's rows (topic, partition) in its segments' Parquet."""
        self._names = names

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _error(self, exc: BaseException) -> None:
        with self._lock:
            self.stats.store_errors += 1
            self.stats.last_error = str(exc)

    # ------------------------------------------------------------------ reads (TierReads)

    @staticmethod
    def _key(owner: int, rec: RemoteSegment) -> tuple[int, int, int]:
        return (owner, rec.first_offset, rec.count)

    def cached(self, owner: int, rec: RemoteSegment) -> CachedBlob | None:
        return self.cache.peek(self._key(owner, rec))

    def fetch(self, owner: int, rec: RemoteSegment, label: str) -> CachedBlob:
        key = self._key(owner, rec)
        blob = self.cache.get(key)
        if blob is not None:
            with self._lock:
                self.stats.cache_hits += 1
            return blob
        with self._lock:
            self.stats.cache_misses += 1
            pending = self._fetching.get(key)
        if pending is not None:  # a read-ahead of it is in flight: wait for that one
            pending.result()
            blob = self.cache.get(key)
            if blob is not None:
                return blob
        blob = self._load(rec, label)
        self.cache.put(key, blob)
        return blob

    def prefetch(self, owner: int, rec: RemoteSegment, label: str) -> Future[None]:
        key = self._key(owner, rec)
        with self._lock:
            fut = self._fetching.get(key)
            if fut is not None:
                return fut
            if self.cache.peek(key) is not None:
                done: Future[None] = Future()
                done.set_result(None)
                return done
            fut = self._pool.submit(self._prefetch, key, rec, label)
            self._fetching[key] = fut
        return fut

    def _prefetch(self, key: tuple[int, int, int], rec: RemoteSegment, label: str) -> None:
        try:
            if self.cache.peek(key) is None:
                self.cache.put(key, self._load(rec, label))
        finally:
            with self._lock:
                self._fetching.pop(key, None)

    def load(self, rec: RemoteSegment, label: str) -> CachedBlob:
        return self._load(rec, label)

    def discard(self, owner: int, rec: RemoteSegment) -> None:
        self.cache.discard(self._key(owner, rec))

    def _get(self, rec: RemoteSegment, label: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes of ``rec``'s object (a missing object is damage; an unreachable store is
        retryable), timed for the metrics."""
        t0 = time.perf_counter()
        try:
            data = self.storage.get(rec.object_key, start, end)
        except ObjectMissingError:
            self._error(ObjectMissingError(rec.object_key))
            raise CorruptDataError(
                f"offloaded object {rec.object_key} is missing from the store",
                partition=label,
                offset=rec.first_offset,
            ) from None
        except TierUnavailableError as exc:
            self._error(exc)
            raise
        dt = time.perf_counter() - t0
        with self._lock:
            s = self.stats
            s.fetches += 1
            s.fetch_bytes += len(data)
            s.fetch_seconds += dt
            if len(s.fetch_latencies) < 10_000:
                s.fetch_latencies.append(dt)
        return data

    def _get_checked(
        self, rec: RemoteSegment, label: str, start: int, end: int, crc: int, what: str
    ) -> bytes:
        """Bytes ``[start, end)`` of a packed object, checked against their CRC32C: fetched
        once more when damaged, then refused (never served)."""
        for attempt in (1, 2):
            data = self._get(rec, label, start, end)
            if len(data) == end - start and checksum(data) == crc:
                return data
            with self._lock:
                self.stats.corrupt_objects += 1
            log.warning(
                "offloaded object fails its checksum",
                extra={"object": rec.object_key, "part": what, "attempt": attempt},
            )
        raise CorruptDataError(
            f"offloaded object {rec.object_key}: its {what} fails its checksum "
            f"({len(data)} bytes, expected {end - start}); not served",
            partition=label,
            offset=rec.first_offset,
        )

    def _footer(self, rec: RemoteSegment, label: str) -> pq.FileMetaData:
        """The footer of a packed object: fetched once (one ranged request), then kept."""
        with self._lock:
            md = self._footers.get(rec.object_key)
            if md is not None:
                self._footers.move_to_end(rec.object_key)
                return md
        raw = self._get_checked(
            rec, label, rec.footer_start, rec.object_size, rec.footer_crc, "footer"
        )
        md = packed_footer(raw, label, rec.first_offset)
        with self._lock:
            self._footers[rec.object_key] = md
            while len(self._footers) > FOOTERS_KEPT:
                self._footers.popitem(last=False)
        return md

    def _load_packed(self, rec: RemoteSegment, label: str) -> bytes:
        """One blob of a packed object: its column chunk in one ranged request (and the
        footer once per object), each checked by CRC32C, then decoded."""
        md = self._footer(rec, label)
        chunk = self._get_checked(
            rec, label, rec.chunk_start, rec.chunk_end, rec.chunk_crc, "column chunk"
        )
        return decode_packed_chunk(
            md,
            rec.object_size,
            chunk,
            rec.row_group,
            rec.chunk_start,
            rec.first_offset,
            rec.count,
            label,
        )

    def _load(self, rec: RemoteSegment, label: str) -> CachedBlob:
        """Fetch and check one offloaded blob: one GET, whole-object CRC (or, packed, the
        blob's column chunk and its CRC), then every batch."""
        if rec.packed:
            return self._index(rec, self._load_packed(rec, label), label)
        for attempt in (1, 2):
            data = self._get(rec, label)
            if len(data) == rec.object_size and checksum(data) == rec.object_crc:
                break
            with self._lock:
                self.stats.corrupt_objects += 1
            log.warning(
                "offloaded object fails its checksum",
                extra={"object": rec.object_key, "size": len(data), "attempt": attempt},
            )
        else:
            raise CorruptDataError(
                f"offloaded object {rec.object_key} fails its checksum ({len(data)} bytes, "
                f"expected {rec.object_size}); not served",
                partition=label,
                offset=rec.first_offset,
            )
        return self._index(rec, decode_segment(data, rec.first_offset, rec.count, label), label)

    @staticmethod
    def _index(rec: RemoteSegment, blob: bytes, label: str) -> CachedBlob:
        info = BlobInfo(
            rec.first_offset, rec.count, rec.blob_size, 0, rec.min_written, rec.max_written, BIG
        )
        if len(blob) != rec.blob_size:
            raise CorruptDataError(
                f"offloaded segment holds {len(blob)} bytes of batches, record says "
                f"{rec.blob_size}",
                partition=label,
                offset=rec.first_offset,
            )
        offsets, starts = index_blob(blob, info, label)
        return CachedBlob(blob, offsets, starts)

    # ------------------------------------------------------------------ copy

    def candidates(
        self, plog: object, policy: OffloadPolicy, now_ms: int, below: int | None = None
    ) -> list[BlobInfo]:
        """Sealed local blobs of a partition the policy sends to the tier, oldest first,
        all ending at or below ``below`` (the last stable offset; EndOffset if None)."""
        from weir.storage.partition import PartitionLog

        assert isinstance(plog, PartitionLog)
        if not policy.enabled or plog.damage is not None:
            return []
        limit = plog.end_offset if below is None else below
        local = plog.local_bytes
        out: list[BlobInfo] = []
        for b in plog.blobs:
            if b.is_head or b.end_offset > limit:
                break
            if is_remote(b) or b.first_offset in plog.remote:
                continue
            over = policy.threshold_bytes is not None and local > policy.threshold_bytes
            old = policy.threshold_ms is not None and b.max_written < now_ms - policy.threshold_ms
            if not (over or old):
                break
            out.append(b)
            local -= b.size
        return out

    def groups(
        self, plog: object, policy: OffloadPolicy, now_ms: int, below: int | None = None
    ) -> list[list[BlobInfo]]:
        """The candidates cut into the objects they will be copied as: runs of consecutive
        blobs of up to ``policy.object_bytes`` (one blob each when it is 0). A last object
        under the target waits for more blobs (local data then stays above the threshold
        by less than one object) unless the policy flushes or it has waited long enough."""
        cands = self.candidates(plog, policy, now_ms, below)
        if policy.object_bytes <= 0:
            return [[b] for b in cands]
        out: list[list[BlobInfo]] = []
        size = 0
        for b in cands:
            last = out[-1] if out else None
            if (
                last is None
                or last[-1].end_offset != b.first_offset
                or size + b.size > policy.object_bytes
            ):
                out.append([b])
                size = b.size
            else:
                last.append(b)
                size += b.size
        if (
            out
            and not policy.flush
            and size < policy.object_bytes
            and out[-1][0].max_written >= now_ms - policy.object_wait_ms
        ):
            out.pop()
        return out

    def lagging(self, plog: object, policy: OffloadPolicy, now_ms: int) -> list[int]:
        """First offsets of offloaded blobs still held locally whose deletion lag passed."""
        from weir.storage.partition import PartitionLog

        assert isinstance(plog, PartitionLog)
        out = []
        for b in plog.blobs:
            rec = plog.remote.get(b.first_offset)
            if (
                rec is not None
                and not is_remote(b)
                and rec.updated_ms + policy.deletion_lag_ms <= now_ms
            ):
                out.append(b.first_offset)
        return out

    def object_key(self, log_id: int, b: BlobInfo) -> str:
        return (
            f"{SEGMENTS_PREFIX}{log_id:016x}/{b.first_offset:020d}-{b.end_offset:020d}-"
            f"{uuid.uuid4().hex[:12]}.parquet"
        )

    def copy_blob(self, plog: object, b: BlobInfo, now_ms: int | None = None) -> RemoteSegment:
        """Copy one local sealed blob: COPY_STARTED committed, object written and verified.
        Returns the COPY_FINISHED record for the caller to commit through the partition.
        Blocking (run it in a worker thread). On failure the COPY_STARTED record stays, for
        `expire` to clean up."""
        from weir.storage.partition import PartitionLog

        assert isinstance(plog, PartitionLog)
        now = _now_ms() if now_ms is None else now_ms
        key = self.object_key(plog.log_id, b)
        rec = started(
            plog.log_id, b.first_offset, b.count, key, b.size, b.min_written, b.max_written, now
        )
        self.committer.commit([record_op(rec)])
        try:
            data = plog.read_blob(b)
            topic, partition = self._names(plog.log_id)
            rows = self._rows(plog, b, data)
            obj = encode_segment(
                data, topic, partition, plog.log_id, b.first_offset, b.count, rows=rows
            )
            crc = checksum(obj)
            try:
                info = self.storage.put(key, obj)
                self._verify(key, obj, crc, info.etag)
            except TierUnavailableError as exc:
                self._error(exc)
                raise
            with self._lock:
                s = self.stats
                s.bytes_offloaded += len(obj)
                s.blob_bytes_offloaded += b.size
                s.objects_offloaded += 1
            return rec.moved(SegmentState.COPY_FINISHED, now, object_size=len(obj), object_crc=crc)
        except BaseException:
            try:
                self.abandon(rec)
            except Exception:  # storage closing: the next start finds it COPY_STARTED
                log.warning("could not abandon a failed copy", extra={"object": key})
            raise

    def _rows(self, plog: Any, b: BlobInfo, data: bytes) -> bytes | None:
        """The blob's batches with their large payloads filled in (the rows Spark reads
        hold the payloads themselves, not their references); None when it has none."""
        refs = plog.payloads.within(b.first_offset, b.end_offset)
        if not refs:
            return None
        label, first = plog.label, b.first_offset
        chunks = fill_chunks([data], refs, lambda r: self.payload(r, label, first))
        return b"".join(bytes(c) for c in chunks)

    def copy_blobs(
        self, plog: object, blobs: list[BlobInfo], packed: bool, now_ms: int | None = None
    ) -> list[RemoteSegment]:
        """Copy consecutive local sealed blobs as one object (``packed``; else ``blobs`` is
        one blob, copied as before): every blob's COPY_STARTED committed in one
        transaction, the object written and verified. Returns the COPY_FINISHED records
        for the caller to commit through the partition. On failure every record is
        abandoned (DELETE_STARTED, or left COPY_STARTED for the next start)."""
        from weir.storage.partition import PartitionLog

        assert isinstance(plog, PartitionLog)
        if not packed:
            assert len(blobs) == 1
            return [self.copy_blob(plog, blobs[0], now_ms)]
        now = _now_ms() if now_ms is None else now_ms
        first, end = blobs[0].first_offset, blobs[-1].end_offset
        key = (
            f"{SEGMENTS_PREFIX}{plog.log_id:016x}/{first:020d}-{end:020d}-"
            f"{uuid.uuid4().hex[:12]}.parquet"
        )
        recs = [
            replace(
                started(
                    plog.log_id,
                    b.first_offset,
                    b.count,
                    key,
                    b.size,
                    b.min_written,
                    b.max_written,
                    now,
                ),
                row_group=i,
                object_first=first,
                object_end=end,
            )
            for i, b in enumerate(blobs)
        ]
        self.committer.commit([record_op(r) for r in recs])
        try:
            topic, partition = self._names(plog.log_id)

            def parts() -> Iterator[BlobRows]:  # one blob in memory at a time
                for b in blobs:
                    data = plog.read_blob(b)
                    yield BlobRows(data, b.first_offset, b.count, self._rows(plog, b, data))

            spans = [(b.first_offset, b.count) for b in blobs]
            obj = encode_packed(parts(), topic, partition, plog.log_id, spans)
            crc = checksum(obj.data)
            try:
                info = self.storage.put(key, obj.data)
                self._verify(key, obj.data, crc, info.etag)
            except TierUnavailableError as exc:
                self._error(exc)
                raise
            with self._lock:
                s = self.stats
                s.bytes_offloaded += len(obj.data)
                s.blob_bytes_offloaded += sum(b.size for b in blobs)
                s.objects_offloaded += 1
            return [
                r.moved(
                    SegmentState.COPY_FINISHED,
                    now,
                    object_size=len(obj.data),
                    object_crc=crc,
                    chunk_start=p.chunk_start,
                    chunk_end=p.chunk_end,
                    chunk_crc=p.chunk_crc,
                    footer_start=obj.footer_start,
                    footer_crc=obj.footer_crc,
                )
                for r, p in zip(recs, obj.places, strict=True)
            ]
        except BaseException:
            try:
                self.committer.commit(
                    [record_op(r.moved(SegmentState.DELETE_STARTED, _now_ms())) for r in recs]
                )
            except Exception:  # storage closing: the next start finds them COPY_STARTED
                log.warning("could not abandon a failed copy", extra={"object": key})
            raise

    def _verify(self, key: str, obj: bytes, crc: int, etag: str) -> None:
        """The object holds exactly ``obj``: its ETag is our MD5, or it reads back the same."""
        if etag and etag == md5_etag(obj):
            return
        back = self.storage.get(key)
        if len(back) != len(obj) or checksum(back) != crc:
            raise TierUnavailableError(
                f"object {key} reads back as {len(back)} bytes with another checksum: the copy "
                "is not trusted and will be made again"
            )

    def abandon(self, rec: RemoteSegment) -> None:
        """Let go of a copy that failed or whose blob is gone (retention won the race):
        DELETE_STARTED, then `expire` deletes the object."""
        self.committer.commit([record_op(rec.moved(SegmentState.DELETE_STARTED, _now_ms()))])

    def offload_sync(self, plog: object, policy: OffloadPolicy, now_ms: int | None = None) -> int:
        """Run one copy pass over a partition synchronously (tools and tests; the broker
        runs the same steps through its partition actor). Returns blobs copied."""
        from weir.storage.partition import PartitionLog

        assert isinstance(plog, PartitionLog)
        now = _now_ms() if now_ms is None else now_ms
        n = 0
        for group in self.groups(plog, policy, now):
            recs = self.copy_blobs(plog, group, policy.object_bytes > 0, now)
            for i, rec in enumerate(recs):
                change = plog.prepare_copy_finished(rec, policy.deletion_lag_ms == 0, now)
                if change is None:
                    self.abandon(rec)
                    continue
                try:
                    plog.commit_change(change)
                except BaseException:
                    for r in recs[i:]:
                        self.abandon(r)
                    raise
                n += 1
        for first in self.lagging(plog, policy, now):
            change = plog.prepare_free_local(first)
            if change is not None:
                plog.commit_change(change)
        return n

    # ------------------------------------------------------------------ expire and sweep

    def expire(self) -> int:
        """Delete the objects of records in DELETE_STARTED (and of copies a crash
        abandoned), then the records; returns objects deleted. Blocking.

        A packed object is shared by the records of its blobs: it is deleted only when
        every one of them has let go of it; until then a let-go record is just removed
        (the object keeps its bytes for the others, and Parquet readers skip them)."""
        with self.kv.snapshot() as view:
            recs = load_records(view)
        now = _now_ms()
        by_object: dict[str, list[RemoteSegment]] = {}
        for rec in recs:
            if rec.state == SegmentState.COPY_STARTED and rec.updated_ms < self.started_ms:
                rec = rec.moved(SegmentState.DELETE_STARTED, now)
                self.committer.commit([record_op(rec)])
            by_object.setdefault(rec.object_key, []).append(rec)
        done = 0
        for key, group in by_object.items():
            gone = [r for r in group if r.state == SegmentState.DELETE_STARTED]
            if not gone:
                continue
            if len(gone) == len(group):
                try:
                    self.storage.delete(key)
                except TierUnavailableError as exc:
                    self._error(exc)
                    raise
                done += 1
            self.committer.commit(
                [record_op(r.moved(SegmentState.DELETE_FINISHED, _now_ms())) for r in gone]
            )
            if len(gone) == len(group):
                with self._lock:
                    self._footers.pop(key, None)
        with self._lock:
            self.stats.objects_deleted += done
        return done

    def sweep(self) -> int:
        """Delete segment objects no record names (orphans); returns how many. Blocking."""
        try:
            listed = list(self.storage.list(SEGMENTS_PREFIX))
        except TierUnavailableError as exc:
            self._error(exc)
            raise
        # listed first, records read after: a record is committed before its object is
        # written, so every object of a live copy already has its record here
        with self.kv.snapshot() as view:
            known = {r.object_key for r in load_records(view)}
        removed = 0
        for o in listed:
            if o.key not in known:
                self.storage.delete(o.key)
                removed += 1
                log.info("removed orphan object", extra={"object": o.key})
        with self._lock:
            self.stats.orphans_removed += removed
        return removed

    # ------------------------------------------------------------------ large payloads

    def put_payload(self, log_id: int, data: bytes) -> PayloadRef:
        """Store one large payload as an object of its own, verified (blocking). The
        reference's index is filled in by the caller."""
        key = f"{PAYLOADS_PREFIX}{log_id:016x}/{uuid.uuid4().hex}"
        crc = checksum(data)
        try:
            info = self.storage.put(key, data)
            self._verify(key, data, crc, info.etag)
        except TierUnavailableError as exc:
            self._error(exc)
            raise
        with self._lock:
            self.stats.payload_objects_written += 1
            self.stats.payload_bytes_written += len(data)
        return PayloadRef(-1, key, len(data), crc)

    def payload(self, ref: PayloadRef, label: str, offset: int) -> bytes:
        try:
            data = self.storage.get(ref.key)
        except ObjectMissingError:
            raise CorruptDataError(
                f"payload object {ref.key} is missing from the store",
                partition=label,
                offset=offset,
            ) from None
        except TierUnavailableError as exc:
            self._error(exc)
            raise
        with self._lock:
            self.stats.payload_fetches += 1
        return check_payload(ref, data, label, offset)

    def collect_payloads(self, now_ms: int | None = None) -> int:
        """Delete payload objects no reference names, older than the grace period (a write
        in flight has its object before its reference). Blocking; returns how many."""
        now = _now_ms() if now_ms is None else now_ms
        try:
            listed = list(self.storage.list(PAYLOADS_PREFIX))
        except TierUnavailableError as exc:
            self._error(exc)
            raise
        with self.kv.snapshot() as view:
            known = referenced_keys(view)
        removed = 0
        for o in listed:
            if o.key not in known and o.modified_ms < now - self.payload_grace_ms:
                self.storage.delete(o.key)
                removed += 1
        with self._lock:
            self.stats.payloads_collected += removed
        return removed

    def records(self) -> list[RemoteSegment]:
        with self.kv.snapshot() as view:
            return load_records(view)
