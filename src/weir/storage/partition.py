"""One partition log: the PQ tablet's partition on top of the KV.

State (seed 000): StartOffset / EndOffset, the list of blobs (big sealed ones
followed by the small *head*, whose bytes are also kept in memory), and the
producer table producer_id -> (max seq_no, offset, last write).

A change is made in two steps so that many partitions can share one fsync:
``prepare_*`` computes the KV ops and the state after them without touching the
current state; the caller commits the ops (normally through the
`GroupCommitter`), then calls ``apply`` on success or ``abort`` on failure.
Readers see only applied state, so EndOffset moves only after the commit is
durable. One change may be prepared at a time.

Write path: duplicates (seq_no <= the producer's max) are dropped and reported
as skipped; the surviving batches get offsets and the write time stamped into
their headers; if head + new bytes stay under the low watermark the new batches
form one small head blob, a *piece* (see `weir.storage.head`: pieces are never
rewritten in the KV, only coalesced in memory); otherwise the head is
*compacted*: large pieces are sealed where they lie, the small ones and the new
batches are packed into big blobs of at most `max_blob_size`, and a last part
smaller than the low watermark stays in the head (its pieces untouched, the new
batches as one new piece). So every byte is committed at most twice.
"""

from __future__ import annotations

import bisect
import dataclasses
import operator
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from weir.errors import (
    CorruptDataError,
    PartitionOverflowError,
)
from weir.storage import keys
from weir.storage.batch import decode_payload, parse_header, stamp_header
from weir.storage.batch_encoding import reencode_from
from weir.storage.blob import BIG, BlobInfo, split_parts
from weir.storage.blob_reads import fetch_blob, index_blob
from weir.storage.change import BatchResult as BatchResult
from weir.storage.change import NewBlob
from weir.storage.change import PreparedChange as PreparedChange
from weir.storage.change import ReadResult as ReadResult
from weir.storage.committer import GroupCommitter
from weir.storage.head import SEALABLE, BatchSpans, Entry, HeadSegment, join_spans, push
from weir.storage.incoming import IncomingBatch
from weir.storage.kv import KV, Op, delete, delete_range, put
from weir.storage.meta import PartitionMeta
from weir.storage.partition_retention import PartitionRetention
from weir.storage.producers import ProducerState
from weir.storage.read_cache import ReadCache
from weir.storage.tiered.partition_tier import NO_TIER, TierReads, is_remote
from weir.storage.tiered.payloads import PayloadRefs
from weir.storage.tiered.remote_metadata import (
    RemoteSegment,
    SegmentState,
    load_records,
    record_op,
)
from weir.storage.txn_state import PartitionTxns, TxnChange, TxnMarker, marker_batch


@dataclass(frozen=True, slots=True)
class PartitionConfig:
    """Layout and limits of a partition (sizes in bytes, times in ms)."""

    low_watermark: int = 6 << 20
    max_blob_size: int = 8 << 20
    head_merge_fanout: int = 8
    seal_blob_size: int | None = None  # default 7/8 of max_blob_size // 8 (896 KiB)
    retention_ms: int | None = None
    retention_bytes: int | None = None
    max_bytes: int | None = None
    max_messages: int | None = None
    # A producer's state (its max seq_no, for dedup) outlives its last message by this
    # long after its last write, so a resend after retention is still dropped (Kafka
    # keeps producer state past retention too). None: as long as the partition lives.
    producer_ttl_ms: int | None = 7 * 24 * 3600 * 1000
    # False: a producer's resent seq_nos are stored again (the deduplication policy)
    deduplicate: bool = True

    def __post_init__(self) -> None:
        if self.max_blob_size <= 0 or self.low_watermark <= 0:
            raise ValueError("blob sizes must be positive")
        if self.low_watermark > self.max_blob_size:
            raise ValueError("low_watermark must not exceed max_blob_size")
        if self.head_merge_fanout < 2:
            raise ValueError("head_merge_fanout must be at least 2")
        if self.seal_blob_size is not None and not 0 < self.seal_blob_size <= self.low_watermark:
            raise ValueError("seal_blob_size must be positive and not above low_watermark")

    @property
    def seal_size(self) -> int:
        """Head blobs at least this big are sealed in place by compaction, not rewritten."""
        if self.seal_blob_size is not None:
            return self.seal_blob_size
        # An eighth of the big blob size, less an eighth of that: batches cut at a client's
        # 1 MiB limit come out a little under 1 MiB and must still count as large.
        return min(self.low_watermark, max(1, self.max_blob_size * 7 // 64))


@dataclass(slots=True)
class _Unit:
    """A stamped batch about to be placed in a blob."""

    first: int
    count: int
    size: int
    written: int
    pieces: tuple[bytes | memoryview, ...]


SpaceCheck = Callable[[int], None]


class PartitionLog(PartitionRetention):
    """A partition's blobs, head, offsets and producers; see the module docstring."""

    def __init__(
        self,
        kv: KV,
        committer: GroupCommitter,
        log_id: int,
        config: PartitionConfig | None = None,
        *,
        label: str = "",
        space_check: SpaceCheck | None = None,
        cache: ReadCache | None = None,
        tier: TierReads | None = None,
    ) -> None:
        self.kv = kv
        self.committer = committer
        self.log_id = log_id
        self.config = config or PartitionConfig()
        self.label = label or str(log_id)
        self._space_check = space_check
        self._cache = cache if cache is not None else ReadCache(0)
        self._cache_owner = self._cache.new_owner()
        self.tier = tier if tier is not None else NO_TIER
        # segment records (COPY_FINISHED) of offloaded blobs, by first offset
        self.remote: dict[int, RemoteSegment] = {}
        self.payloads = PayloadRefs(log_id)
        self.start_offset = 0
        self.end_offset = 0
        self.size_bytes = 0
        self.producers: dict[str, ProducerState] = {}
        self.txns = PartitionTxns(log_id)
        self._blobs: list[BlobInfo] = []
        self._firsts: list[int] = []
        self._head: dict[int, HeadSegment] = {}  # head segments by first offset
        self._head_count = 0
        self._last_written = 0
        self._read_start = 0  # >= start_offset while a retention step is in flight
        self._pending: PreparedChange | None = None
        self.damage: CorruptDataError | None = None  # set when opened damaged (strict=False)

    # ------------------------------------------------------------------ recovery

    @classmethod
    def load(
        cls,
        kv: KV,
        committer: GroupCommitter,
        log_id: int,
        config: PartitionConfig | None = None,
        *,
        label: str = "",
        space_check: SpaceCheck | None = None,
        cache: ReadCache | None = None,
        tier: TierReads | None = None,
        verify_all: bool = False,
        strict: bool = True,
    ) -> PartitionLog:
        """Rebuild a partition (offsets, blob list, head bytes, producers) from the KV alone.

        The head is checked batch by batch (CRC and offsets); big blobs are checked
        for presence, and fully with ``verify_all``. Damage raises CorruptDataError
        naming the partition and offset; with ``strict=False`` the partition opens
        *damaged* instead (`damage` holds the error): the damaged range is refused
        on read, writes are refused, and the rest stays readable, so one bad
        partition does not keep a whole server from starting.
        """
        log = cls(
            kv,
            committer,
            log_id,
            config,
            label=label,
            space_check=space_check,
            cache=cache,
            tier=tier,
        )
        try:
            log._load(verify_all)
        except CorruptDataError as err:
            if strict:
                raise
            log.damage = err
        return log

    def _load(self, verify_all: bool) -> None:
        prefix = keys.log_prefix(self.log_id)
        stop = keys.log_prefix(self.log_id + 1) if self.log_id < (1 << 64) - 1 else None
        with self.kv.snapshot() as view:
            raw_meta = view.get(keys.PARTITIONS, prefix)
            meta = PartitionMeta.unpack(raw_meta) if raw_meta is not None else PartitionMeta(0, 0)
            self.start_offset = self._read_start = meta.start_offset
            self.end_offset = meta.end_offset
            blobs: list[BlobInfo] = []
            for k, v in view.scan(keys.BLOB_INDEX, prefix, stop):
                _, first, count = keys.parse_index_key(k)
                blobs.append(BlobInfo.unpack(first, count, v))
            expected = meta.start_offset
            if blobs and blobs[0].first_offset < expected:
                # records were deleted up to an offset inside the first blob (a trim), or
                # inside a head segment of several pieces: the pieces it coalesced stay
                # until retention passes the segment's end, so the index starts below
                expected = blobs[0].first_offset
            for b in blobs:
                if b.first_offset != expected:
                    raise CorruptDataError(
                        f"blob index has a gap or overlap: blob starts at {b.first_offset}, "
                        f"expected {expected}",
                        partition=self.label,
                        offset=expected,
                    )
                expected = b.end_offset
            if expected != meta.end_offset:
                raise CorruptDataError(
                    f"blobs end at {expected} but partition meta says {meta.end_offset}",
                    partition=self.label,
                    offset=expected,
                )
            self._blobs = blobs
            self._firsts = [b.first_offset for b in blobs]
            self.size_bytes = sum(b.size for b in blobs)
            self._last_written = blobs[-1].max_written if blobs else 0
            head_start = len(blobs)
            while head_start > 0 and blobs[head_start - 1].is_head:
                head_start -= 1
            self._head_count = len(blobs) - head_start
            for k, v in view.scan(keys.PRODUCERS, prefix, stop):
                self.producers[k[len(prefix) :].decode()] = ProducerState.unpack(v)
            self.remote = {
                r.first_offset: r
                for r in load_records(view, self.log_id)
                if r.state == SegmentState.COPY_FINISHED
            }
            self.payloads.load(view)
            cfg = self.config
            segments: list[Entry] = []
            for i, b in enumerate(blobs):
                if is_remote(b):
                    if b.first_offset not in self.remote:
                        raise CorruptDataError(
                            "blob is offloaded but has no finished segment record",
                            partition=self.label,
                            offset=b.first_offset,
                        )
                elif i >= head_start or verify_all:
                    data = fetch_blob(view, self.log_id, b, self.label)
                    offsets, starts = index_blob(data, b, self.label)
                    if i >= head_start:  # the checked index gives where its batches lie
                        sizes = array("q", map(operator.sub, starts[1:], starts))
                        spans = (offsets[:-1], sizes)
                        push(segments, b, bytes(data), cfg.seal_size, cfg.head_merge_fanout, spans)
                else:
                    for part in range(b.parts):
                        key = keys.blob_key(self.log_id, b.first_offset, b.count, part)
                        if view.get(keys.BLOBS, key) is None:
                            raise CorruptDataError(
                                f"blob part {part} is missing",
                                partition=self.label,
                                offset=b.first_offset,
                            )
            # The head pieces are sound: replace them by their in-memory segments. (On
            # damage the raw pieces stay in the list and are read from the KV, verified.)
            del blobs[head_start:]
            blobs.extend(info for info, _ in segments)
            self._firsts = [b.first_offset for b in blobs]
            self._head_count = len(segments)
            self._head = {info.first_offset: seg for info, seg in segments}
            self.txns.load(view, self.label, self.start_offset, self.end_offset)

    # ------------------------------------------------------------------ queries

    @property
    def message_count(self) -> int:
        return self.end_offset - self.start_offset

    @property
    def head_bytes(self) -> int:
        return sum(b.size for b in self._blobs[len(self._blobs) - self._head_count :])

    @property
    def blobs(self) -> Sequence[BlobInfo]:
        return tuple(self._blobs)

    def bytes_from(self, offset: int, limit: int) -> int:
        """Bytes stored from ``offset`` on, counted in whole blobs (so up to one blob more);
        counting stops once past ``limit``, so the cost is bounded by it."""
        total = 0
        for b in reversed(self._blobs):
            if b.end_offset <= offset:
                break
            total += b.size
            if total > limit:
                break
        return total

    def offset_keeping(self, max_bytes: int) -> int:
        """The lowest blob boundary from which at most ``max_bytes`` are stored, counted as
        `bytes_from` counts (the end offset when the last blob alone is larger)."""
        total = 0
        start = self.end_offset
        for b in reversed(self._blobs):
            if total + b.size > max_bytes:
                break
            total += b.size
            start = b.first_offset
        return start

    def last_seq_no(self, producer_id: str, txn_id: int = 0) -> int | None:
        """The producer's highest stored seq_no (in transaction ``txn_id``: its own writes
        there count too)."""
        st = self.producers.get(producer_id)
        if txn_id:
            st = _newer(st, self.txns.producer_state(txn_id, producer_id))
        return None if st is None else st.max_seq_no

    @property
    def stable_offset(self) -> int:
        """The last stable offset: read-committed readers stop before it."""
        return self.txns.stable_offset(self.end_offset)

    # ------------------------------------------------------------------ writes

    def prepare_write(
        self,
        batches: Sequence[IncomingBatch],
        now_ms: int | None = None,
        txn_ids: Sequence[int] | None = None,
    ) -> PreparedChange:
        """Dedup, assign offsets, lay out blobs; returns the change to commit (state untouched).

        ``txn_ids`` (one per batch, 0 for none) puts batches in open transactions: their
        dedup state is the transaction's (see `weir.storage.txn_state`)."""
        self._begin()
        try:
            return self._prepare_write(batches, now_ms, txn_ids)
        except BaseException:
            self._pending = None
            raise

    def prepare_marker(
        self, txn_id: int, committed: bool, now_ms: int | None = None
    ) -> PreparedChange | None:
        """End transaction ``txn_id`` here: its marker batch, and on commit its producers'
        states merged into the partition's. None when it wrote nothing here."""
        t = self.txns.open.get(txn_id)
        if t is None:
            return None
        self._begin()
        try:
            now = int(time.time() * 1000) if now_ms is None else now_ms
            buf = marker_batch(txn_id, committed, now)
            change = self._prepare_write([IncomingBatch(buf, parse_header(buf))], now, None, False)
            ranges = () if committed else tuple(t.ranges)
            marker = TxnMarker(change.end_offset - 1, txn_id, committed, t.first_offset, ranges)
            change.txn = TxnChange(marker=marker)
            change.ops.extend(self.txns.end_ops(marker))
            if committed:
                for pid, st in t.producers.items():
                    merged = _newer(self.producers.get(pid), st)
                    assert merged is not None
                    change.producers[pid] = merged
                    key = keys.producer_key(self.log_id, pid)
                    change.ops.append(put(keys.PRODUCERS, key, merged.pack()))
            return change
        except BaseException:
            self._pending = None
            raise

    def _prepare_write(
        self,
        batches: Sequence[IncomingBatch],
        now_ms: int | None,
        txn_ids: Sequence[int] | None,
        limits: bool = True,
    ) -> PreparedChange:
        if self.damage is not None:
            raise CorruptDataError(
                f"writes refused: {self.damage.message}; the partition needs repair",
                partition=self.label,
                offset=self.damage.offset,
            )
        cfg = self.config
        incoming = sum(len(b.buf) for b in batches)
        if not limits:  # a transaction marker: ending a transaction is never refused
            pass
        elif cfg.max_bytes is not None and self.size_bytes + incoming > cfg.max_bytes:
            raise PartitionOverflowError(
                f"partition {self.label} holds {self.size_bytes} bytes, limit {cfg.max_bytes}; "
                "writes resume when retention frees space"
            )
        if cfg.max_messages is not None and limits:
            n = sum(b.header.record_count for b in batches)
            if self.message_count + n > cfg.max_messages:
                raise PartitionOverflowError(
                    f"partition {self.label} holds {self.message_count} messages, limit "
                    f"{cfg.max_messages}; writes resume when retention frees space"
                )
        if self._space_check is not None and limits:
            self._space_check(incoming)
        now = int(time.time() * 1000) if now_ms is None else now_ms
        now = max(now, self._last_written)
        offset = self.end_offset
        change = PreparedChange(ops=[], nbytes=0, start_offset=self.start_offset, last_written=now)
        units: list[_Unit] = []
        producers = change.producers
        txn_change = None if txn_ids is None else TxnChange()
        txn_iter = None if txn_ids is None else iter(txn_ids)
        txn = 0
        for b in batches:
            buf, h = b.buf, b.header
            skip = 0
            pid = h.producer_id
            if txn_iter is not None:
                txn = next(txn_iter)
            if pid:
                st = producers.get(pid) or self.producers.get(pid)
                if txn:
                    assert txn_change is not None
                    scoped = txn_change.producers.get((txn, pid))
                    st = _newer(st, scoped or self.txns.producer_state(txn, pid))
                if st is not None and cfg.deduplicate and h.first_seq <= st.max_seq_no:
                    if h.last_seq <= st.max_seq_no:
                        change.results.append(BatchResult(offset, 0, h.record_count))
                        continue
                    seqs = decode_payload(buf, 0, h).seq_list()
                    skip = bisect.bisect_right(seqs, st.max_seq_no)
                    buf = reencode_from(buf, h, skip)
                    h = parse_header(buf)
            if b.refs:
                refs = tuple(
                    dataclasses.replace(r, index=r.index - skip) for r in b.refs if r.index >= skip
                )
                if refs:
                    change.ops.append(self.payloads.put_op(offset, refs))
                    change.payload_add.append((offset, refs))
            head = stamp_header(buf, h, offset, now)
            body = memoryview(buf)[h.payload_start : h.length]
            units.append(_Unit(offset, h.record_count, h.length, now, (head, body)))
            change.results.append(BatchResult(offset, h.record_count, skip))
            if pid:  # st: this producer's state, looked up above
                top = h.last_seq if st is None else max(h.last_seq, st.max_seq_no)
                state = ProducerState(top, offset + h.record_count - 1, now)
                if txn:
                    assert txn_change is not None
                    txn_change.producers[(txn, pid)] = state
                else:
                    producers[pid] = state
            if txn:
                assert txn_change is not None
                txn_change.batches.append((txn, offset, offset + h.record_count))
            offset += h.record_count
        change.end_offset = offset
        if txn_change is not None:
            change.txn = txn_change
            change.ops.extend(self.txns.batch_ops(txn_change))
        if units:
            self._layout(change, units)
        for pid, st in producers.items():
            change.ops.append(put(keys.PRODUCERS, keys.producer_key(self.log_id, pid), st.pack()))
        change.ops.append(self._meta_op(change.start_offset, change.end_offset))
        return change

    def _layout(self, change: PreparedChange, units: list[_Unit]) -> None:
        cfg = self.config
        head = self._blobs[len(self._blobs) - self._head_count :]
        new_bytes = sum(u.size for u in units)
        if sum(b.size for b in head) + new_bytes < cfg.low_watermark:
            # One new piece in the KV; in memory it joins the head segments.
            info, data, spans = self._make_blob((), units, 0)
            self._put_blob(change, info, data)
            segments = [(b, self._head[b.first_offset]) for b in head]
            keep = push(segments, info, data, cfg.seal_size, cfg.head_merge_fanout, spans)
            change.drop_tail = len(head) - keep
            change.add = [NewBlob(i, seg) for i, seg in segments[keep:]]
            return
        # Compaction. A large piece is sealed where it lies (only its index entry changes),
        # so producers that send large batches pay no second write; the runs of small
        # pieces between large ones, and the new batches, are packed into big blobs.
        deletes: list[Op] = []
        run: list[Entry] = []
        for b in head:
            if b.level == SEALABLE:
                self._pack_run(change, run, deletes)
                seg = self._head[b.first_offset]
                self._seal(change, dataclasses.replace(b, level=BIG), seg.data, seg.batches)
            else:
                run.append((b, self._head[b.first_offset]))
        self._pack_last(change, run, units, deletes)
        change.drop_tail = len(head)  # the whole head leaves memory; what stays comes back
        change.ops[:0] = deletes  # deletes first: they must never undo a put of this change

    def _pack_run(self, change: PreparedChange, run: list[Entry], deletes: list[Op]) -> None:
        """Turn a run of small head segments (under the low watermark together) into one
        big blob (emptying ``run``); a lone piece is sealed where it lies instead."""
        if not run:
            return
        if len(run) == 1 and run[0][1].pieces == 1:
            seg = run[0][1]
            self._seal(change, dataclasses.replace(run[0][0], level=BIG), seg.data, seg.batches)
        else:
            info, data, spans = self._make_blob(run, (), BIG)
            self._put_blob(change, info, data)
            change.add.append(NewBlob(info, None, data, spans))
            deletes.extend(self._delete_range_ops(info.first_offset, info.end_offset))
        run.clear()

    def _pack_last(
        self, change: PreparedChange, run: list[Entry], units: list[_Unit], deletes: list[Op]
    ) -> None:
        """Pack the last run of small head segments and the new batches into big blobs of at
        most max_blob_size; a last part under the low watermark stays in the head."""
        cfg = self.config
        old = sum(b.size for b, _ in run)
        if old + sum(u.size for u in units) < cfg.low_watermark:
            # Large pieces cut the head short: the small ones after them stay as they are.
            segments = list(run)
            info, data, spans = self._make_blob((), units, 0)
            self._put_blob(change, info, data)
            push(segments, info, data, cfg.seal_size, cfg.head_merge_fanout, spans)
            change.add.extend(NewBlob(i, seg) for i, seg in segments)
            return
        # The stored run is under the low watermark, so it fits whole in the first blob.
        chunks: list[tuple[list[Entry], list[_Unit]]] = [(run, [])]
        size = old
        for u in units:
            if size and size + u.size > cfg.max_blob_size:
                chunks.append(([], []))
                size = 0
            chunks[-1][1].append(u)
            size += u.size
        for i, (stored, new) in enumerate(chunks):
            if i > 0 and i == len(chunks) - 1 and size < cfg.low_watermark:
                info, data, spans = self._make_blob((), new, 0)  # the rest: the new head
                self._put_blob(change, info, data)
                rest: list[Entry] = []
                push(rest, info, data, cfg.seal_size, cfg.head_merge_fanout, spans)
                change.add.extend(NewBlob(i, seg) for i, seg in rest)
            elif not new:
                self._pack_run(change, stored, deletes)
            else:
                info, data, spans = self._make_blob(stored, new, BIG)
                self._put_blob(change, info, data)
                change.add.append(NewBlob(info, None, data, spans))
                if stored:
                    end = stored[-1][0].end_offset
                    deletes.extend(self._delete_range_ops(info.first_offset, end))

    def _seal(
        self, change: PreparedChange, info: BlobInfo, data: bytes, spans: BatchSpans | None
    ) -> None:
        change.ops.append(self._index_op(info))
        change.add.append(NewBlob(info, None, data, spans))

    def _put_blob(self, change: PreparedChange, info: BlobInfo, data: bytes) -> None:
        for part, piece in enumerate(split_parts(data, self.config.max_blob_size)):
            key = keys.blob_key(self.log_id, info.first_offset, info.count, part)
            change.ops.append(put(keys.BLOBS, key, piece))
        change.ops.append(self._index_op(info))
        change.nbytes += len(data)

    def _index_op(self, info: BlobInfo) -> Op:
        key = keys.index_key(self.log_id, info.first_offset, info.count)
        return put(keys.BLOB_INDEX, key, info.pack())

    def _make_blob(
        self, stored: Sequence[Entry], units: Sequence[_Unit], level: int
    ) -> tuple[BlobInfo, bytes, BatchSpans | None]:
        """A blob of head segments already stored followed by new batches (either may be
        empty), and where its batches lie (None if a segment does not know its own)."""
        pieces: list[bytes | memoryview] = [seg.data for _, seg in stored]
        pieces.extend(p for u in units for p in u.pieces)
        data = b"".join(pieces)
        info = BlobInfo(
            stored[0][0].first_offset if stored else units[0].first,
            sum(b.count for b, _ in stored) + sum(u.count for u in units),
            len(data),
            max(1, -(-len(data) // self.config.max_blob_size)),
            stored[0][0].min_written if stored else units[0].written,
            units[-1].written if units else stored[-1][0].max_written,
            level,
        )
        new: BatchSpans = (
            array("q", [u.first for u in units]),
            array("q", [u.size for u in units]),
        )
        return info, data, join_spans([*(seg.batches for _, seg in stored), new])

    def _delete_blob_ops(self, b: BlobInfo) -> list[Op]:
        """Delete a blob of the in-memory list: a big blob (all parts) or a head segment
        (all its pieces)."""
        return self._delete_range_ops(b.first_offset, b.end_offset)

    def _delete_range_ops(self, first: int, end: int) -> list[Op]:
        """Delete every blob (all parts) and index entry starting in ``[first, end)``."""
        log = self.log_id
        return [
            delete_range(keys.BLOBS, keys.blob_key(log, first, 0), keys.blob_key(log, end, 0)),
            delete_range(
                keys.BLOB_INDEX, keys.index_key(log, first, 0), keys.index_key(log, end, 0)
            ),
        ]

    def _meta_op(self, start: int, end: int) -> Op:
        return put(keys.PARTITIONS, keys.log_prefix(self.log_id), PartitionMeta(start, end).pack())

    # ------------------------------------------------------------------ commit protocol

    def _begin(self) -> None:
        if self._pending is not None:
            raise RuntimeError(f"partition {self.label}: a change is already in flight")
        self._pending = PreparedChange(ops=[], nbytes=0)

    def apply(self, change: PreparedChange) -> None:
        """Make a committed change visible: EndOffset moves, head and producers update."""
        blobs = self._blobs
        if change.drop_front:
            for b in blobs[: change.drop_front]:
                self._head.pop(b.first_offset, None)
                self._cache.discard(self._cache_key(b))
                self.size_bytes -= b.size
            head_dropped = max(0, change.drop_front - (len(blobs) - self._head_count))
            self._head_count -= head_dropped
            del blobs[: change.drop_front]
            del self._firsts[: change.drop_front]
        if change.drop_tail:
            for b in blobs[-change.drop_tail :]:
                self._head.pop(b.first_offset, None)
                self.size_bytes -= b.size
            del blobs[-change.drop_tail :]
            del self._firsts[-change.drop_tail :]
            self._head_count -= change.drop_tail
        for nb in change.add:
            blobs.append(nb.info)
            self._firsts.append(nb.info.first_offset)
            self.size_bytes += nb.info.size
            if nb.segment is not None:
                self._head[nb.info.first_offset] = nb.segment
                self._head_count += 1
            else:
                # A big blob seals everything before it: the head is what follows it.
                self._head_count = 0
                if nb.data is not None:
                    self._cache_written(nb.info, nb.data, nb.batches)
        for info in change.replace:
            i = bisect.bisect_left(self._firsts, info.first_offset)
            blobs[i] = info
            self._cache.discard(self._cache_key(info))
        for rec in change.remote_set:
            self.remote[rec.first_offset] = rec
        for off, refs in change.payload_add:
            self.payloads.add(off, refs)
        if change.start_offset > self.start_offset:
            # the references of the blobs gone; a trimmed blob keeps its own (a batch
            # straddling the start offset is still served, see `_cut_first`)
            self.payloads.drop_below(
                min(change.start_offset, blobs[0].first_offset) if blobs else change.start_offset
            )
        for first in change.remote_drop:
            gone = self.remote.pop(first, None)
            if gone is not None:
                self.tier.discard(self._cache_owner, gone)
        self.producers.update(change.producers)
        if change.txn is not None:
            self.txns.apply(change.txn)
        for pid in change.drop_producers:
            self.producers.pop(pid, None)
        self.start_offset = self._read_start = change.start_offset
        self.end_offset = change.end_offset
        self._last_written = change.last_written
        self._pending = None

    def abort(self, change: PreparedChange) -> None:
        """Forget a change whose commit failed: the state stays as before it."""
        self._read_start = self.start_offset
        self._pending = None

    def write(
        self,
        batches: Sequence[IncomingBatch],
        now_ms: int | None = None,
        txn_ids: Sequence[int] | None = None,
    ) -> list[BatchResult]:
        """Prepare, commit and apply one write synchronously (tests, tools, benchmarks)."""
        change = self.prepare_write(batches, now_ms, txn_ids)
        self._commit(change)
        return change.results

    def commit_change(self, change: PreparedChange) -> None:
        """Commit a prepared change synchronously and apply it (abort on failure)."""
        self._commit(change)

    def _commit(self, change: PreparedChange) -> None:
        try:
            self.committer.commit(change.ops, change.nbytes)
        except BaseException:
            self.abort(change)
            raise
        self.apply(change)

    def drop_ops(self) -> list[Op]:
        """KV ops deleting this partition entirely (its topic is being dropped); its
        offloaded segments move to DELETE_STARTED, for the tier to delete their objects."""
        ops: list[Op] = []
        now = int(time.time() * 1000)
        for b in self._blobs:
            ops.extend(self._delete_blob_ops(b))
            rec = self.remote.get(b.first_offset)
            if rec is not None:
                ops.append(record_op(rec.moved(SegmentState.DELETE_STARTED, now)))
        ops.extend(
            delete(keys.PRODUCERS, keys.producer_key(self.log_id, p)) for p in self.producers
        )
        ops.extend(self.payloads.drop_ops(0, max(self.end_offset, 1)))
        ops.append(delete(keys.PARTITIONS, keys.log_prefix(self.log_id)))
        ops.extend(self.txns.drop_ops())
        return ops

    def drop_cached(self) -> None:
        """Forget this partition's blobs in the read cache (it was dropped)."""
        self._cache.drop_owner(self._cache_owner)
        for rec in self.remote.values():
            self.tier.discard(self._cache_owner, rec)


def _newer(a: ProducerState | None, b: ProducerState | None) -> ProducerState | None:
    """Of two states of one producer, the one with the higher seq_no."""
    if a is None:
        return b
    if b is None or a.max_seq_no >= b.max_seq_no:
        return a
    return b
