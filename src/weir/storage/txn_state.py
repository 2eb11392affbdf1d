"""The transaction state of one partition: what a read-committed reader may see.

Kafka's model on weir's log. A transaction's batches go into the log as they are
written, like any write: read-uncommitted readers see them at once. When the
transaction ends the broker appends one *marker* (a control batch, `FLAG_CONTROL`,
one offset) saying commit or abort, in the same KV transaction as the markers of its
other partitions, its consumer offsets and the coordinator's record, so every
partition's outcome becomes durable at once. Per partition this module keeps:

* the **open transactions**: the offset ranges of their batches and their producers'
  dedup states (scoped to the transaction: an aborted transaction's seq_nos may be
  written again; a committed one's are merged into the partition's producer table).
  The **last stable offset** (LSO) is the first offset of the oldest open transaction,
  else EndOffset: a read-committed reader stops there.
* the **markers** (offset, transaction, outcome) and the **aborted ranges**: the batches
  of aborted transactions, which read-committed readers skip (Kafka's aborted-transaction
  index). Markers are never sent to weir's readers; the Kafka front asks for them.

Everything here is persisted in the same change as the batches it describes
(``keys.TXN_OPEN``, ``keys.TXN_MARKERS``) and rebuilt by `load`. Retention drops
markers below the new StartOffset and never passes the LSO (`PartitionLog`); a
compaction of the log must stop at the LSO too.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from weir.errors import CorruptDataError
from weir.storage import keys
from weir.storage.batch import FLAG_CONTROL
from weir.storage.batch_encoding import encode_batch, with_flags
from weir.storage.kv import Op, ReadView, delete_range, put
from weir.storage.producers import ProducerState

Chunk = bytes | memoryview

_COUNT = struct.Struct("<I")
_MARKER = struct.Struct("<BBQQI")  # version, committed, txn_id, first_offset, n ranges
_RANGE = struct.Struct("<QQ")
_MARKER_DATA = struct.Struct("<4sBQ")  # b"WTXN", committed, txn_id
_MARKER_MAGIC = b"WTXN"
_PEEK_FLAGS = struct.Struct("<H").unpack_from
_PEEK_LEN = struct.Struct("<I").unpack_from
_PEEK_BASE = struct.Struct("<Q").unpack_from


@dataclass(slots=True)
class OpenTxn:
    """An open transaction's part in one partition."""

    txn_id: int
    first_offset: int
    ranges: list[tuple[int, int]] = field(default_factory=list)  # [first, end) runs
    producers: dict[str, ProducerState] = field(default_factory=dict)

    def add(self, first: int, end: int) -> None:
        if self.ranges and self.ranges[-1][1] == first:
            self.ranges[-1] = (self.ranges[-1][0], end)
        else:
            self.ranges.append((first, end))


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """The end of a transaction in one partition (Kafka: a control batch, and for an
    abort an entry of the aborted-transaction index)."""

    offset: int  # where the marker batch is
    txn_id: int
    committed: bool
    first_offset: int  # the transaction's first batch in this partition
    ranges: tuple[tuple[int, int], ...] = ()  # aborted: the batches read-committed skips

    def pack(self) -> bytes:
        head = _MARKER.pack(1, self.committed, self.txn_id, self.first_offset, len(self.ranges))
        return head + b"".join(_RANGE.pack(a, b) for a, b in self.ranges)

    @classmethod
    def unpack(cls, offset: int, buf: bytes | memoryview) -> TxnMarker:
        try:
            version, committed, txn_id, first, n = _MARKER.unpack_from(buf)
            if version != 1 or len(buf) != _MARKER.size + n * _RANGE.size:
                raise ValueError(f"version {version}, {len(buf)} bytes for {n} ranges")
            ranges = tuple(
                _RANGE.unpack_from(buf, _MARKER.size + i * _RANGE.size) for i in range(n)
            )
        except (struct.error, ValueError) as exc:
            raise CorruptDataError(f"bad transaction marker record: {exc}", offset=offset) from None
        return cls(offset, txn_id, bool(committed), first, ranges)


@dataclass(slots=True)
class TxnChange:
    """What one prepared change does to the transaction state (applied with it)."""

    batches: list[tuple[int, int, int]] = field(default_factory=list)  # (txn, first, end)
    producers: dict[tuple[int, str], ProducerState] = field(default_factory=dict)
    marker: TxnMarker | None = None
    prune_below: int | None = None  # retention: forget markers below this offset


def marker_batch(txn_id: int, committed: bool, now_ms: int) -> bytes:
    """The control batch that ends ``txn_id`` in a partition (one record, one offset)."""
    data = _MARKER_DATA.pack(_MARKER_MAGIC, committed, txn_id)
    return with_flags(encode_batch([data], created_at=now_ms), FLAG_CONTROL)


def parse_marker_record(data: bytes) -> tuple[int, bool]:
    """(txn_id, committed) of a marker batch's record."""
    magic, committed, txn_id = _MARKER_DATA.unpack(data)
    if magic != _MARKER_MAGIC:
        raise CorruptDataError("not a transaction marker record")
    return int(txn_id), bool(committed)


class PartitionTxns:
    """The open transactions, markers and aborted ranges of one partition."""

    def __init__(self, log_id: int) -> None:
        self.log_id = log_id
        self.open: dict[int, OpenTxn] = {}
        self._markers: list[int] = []  # offsets of marker batches, sorted
        self._aborted: list[TxnMarker] = []  # sorted by marker offset
        self._ab_first: list[int] = []  # aborted batch ranges [first, end), sorted, disjoint
        self._ab_end: list[int] = []
        self._oldest: int | None = None  # first offset of the oldest open transaction
        self.active = False  # anything at all: readers take the fast path while False

    # ------------------------------------------------------------------ queries

    def stable_offset(self, end_offset: int) -> int:
        """The last stable offset: read-committed readers stop before it."""
        return end_offset if self._oldest is None else self._oldest

    def producer_state(self, txn_id: int, producer_id: str) -> ProducerState | None:
        t = self.open.get(txn_id)
        return None if t is None else t.producers.get(producer_id)

    @property
    def markers(self) -> Sequence[int]:
        return tuple(self._markers)

    def markers_between(self, lo: int, hi: int) -> list[int]:
        """Offsets of the markers in ``[lo, hi)`` (offsets that hold no message)."""
        m = self._markers
        return m[bisect.bisect_left(m, lo) : bisect.bisect_left(m, hi)]

    def aborted_between(self, lo: int, hi: int) -> list[TxnMarker]:
        """Aborted transactions with batches in ``[lo, hi)`` (what a Kafka Fetch returns)."""
        out = []
        for m in self._aborted:
            if m.offset >= lo and m.first_offset < hi:
                out.append(m)
        return out

    def hides(self, lo: int, hi: int) -> bool:
        """Whether ``[lo, hi)`` holds something readers are not sent as stored: a marker,
        or a batch of an aborted transaction (a reader that bypasses the broker, like
        Spark on offloaded segments, must read such a range through it)."""
        m = self._markers
        if bisect.bisect_left(m, lo) < bisect.bisect_left(m, hi):
            return True
        k = bisect.bisect_right(self._ab_first, hi - 1)  # ranges starting below hi
        return any(self._ab_end[i] > lo for i in range(k))

    def is_aborted(self, offset: int) -> bool:
        k = bisect.bisect_right(self._ab_first, offset) - 1
        return k >= 0 and offset < self._ab_end[k]

    # ------------------------------------------------------------------ changes

    def batch_ops(self, change: TxnChange) -> list[Op]:
        """KV ops recording the new batches and producer states of ``change``."""
        log = self.log_id
        ops = [
            put(keys.TXN_OPEN, keys.txn_batch_key(log, txn, first), _COUNT.pack(end - first))
            for txn, first, end in change.batches
        ]
        ops.extend(
            put(keys.TXN_OPEN, keys.txn_producer_key(log, txn, pid), st.pack())
            for (txn, pid), st in change.producers.items()
        )
        return ops

    def end_ops(self, marker: TxnMarker) -> list[Op]:
        """KV ops ending a transaction here: its open records go, its marker is stored."""
        log, txn = self.log_id, marker.txn_id
        return [
            delete_range(keys.TXN_OPEN, keys.txn_prefix(log, txn), keys.txn_prefix(log, txn + 1)),
            put(keys.TXN_MARKERS, keys.marker_key(log, marker.offset), marker.pack()),
        ]

    def prune_ops(self, below: int) -> list[Op]:
        """KV ops forgetting the markers below ``below`` (retention removed them)."""
        if not self._markers or self._markers[0] >= below:
            return []
        log = self.log_id
        return [
            delete_range(keys.TXN_MARKERS, keys.marker_key(log, 0), keys.marker_key(log, below))
        ]

    def apply(self, change: TxnChange) -> None:
        for txn, first, end in change.batches:
            t = self.open.get(txn)
            if t is None:
                t = self.open[txn] = OpenTxn(txn, first)
            t.add(first, end)
        for (txn, pid), st in change.producers.items():
            self.open[txn].producers[pid] = st
        m = change.marker
        if m is not None:
            self.open.pop(m.txn_id, None)
            bisect.insort(self._markers, m.offset)
            if not m.committed:
                bisect.insort(self._aborted, m, key=lambda x: x.offset)
                for a, b in m.ranges:
                    k = bisect.bisect_left(self._ab_first, a)
                    self._ab_first.insert(k, a)
                    self._ab_end.insert(k, b)
        if change.prune_below is not None:
            self._prune(change.prune_below)
        self._refresh()

    def _prune(self, below: int) -> None:
        del self._markers[: bisect.bisect_left(self._markers, below)]
        self._aborted = [m for m in self._aborted if m.offset >= below]
        k = bisect.bisect_right(self._ab_end, below)  # ranges ending at or before `below`
        del self._ab_first[:k]
        del self._ab_end[:k]

    def _refresh(self) -> None:
        self._oldest = min((t.first_offset for t in self.open.values()), default=None)
        self.active = bool(self.open or self._markers or self._ab_first)

    def drop_ops(self) -> list[Op]:
        """KV ops deleting every transaction record of this partition (it is dropped)."""
        log = self.log_id
        nxt = keys.log_prefix(log + 1) if log < (1 << 64) - 1 else b"\xff" * 9
        return [
            delete_range(keys.TXN_OPEN, keys.log_prefix(log), nxt),
            delete_range(keys.TXN_MARKERS, keys.log_prefix(log), nxt),
        ]

    # ------------------------------------------------------------------ recovery

    def load(self, view: ReadView, label: str, start_offset: int, end_offset: int) -> None:
        """Rebuild the state from the KV (the partition's offsets bound what is valid)."""
        log = self.log_id
        prefix = keys.log_prefix(log)
        stop = keys.log_prefix(log + 1) if log < (1 << 64) - 1 else None
        for k, v in view.scan(keys.TXN_OPEN, prefix, stop):
            _, txn, kind, rest = keys.parse_txn_key(k)
            if kind == keys.TXN_BATCH:
                (first,) = struct.unpack(">Q", rest)
                (count,) = _COUNT.unpack(v)
                if not start_offset <= first < first + count <= end_offset:
                    raise CorruptDataError(
                        f"open transaction {txn} holds offsets {first}..{first + count}, outside "
                        f"the partition's {start_offset}..{end_offset}",
                        partition=label,
                        offset=first,
                    )
                t = self.open.get(txn)
                if t is None:
                    t = self.open[txn] = OpenTxn(txn, first)
                t.add(first, first + count)  # keys are in offset order within a transaction
            elif kind == keys.TXN_PRODUCER:
                t = self.open.get(txn)
                if t is None:  # a producer key sorts after its batches: a state without batches
                    raise CorruptDataError(
                        f"open transaction {txn} has producer state but no batches",
                        partition=label,
                    )
                t.producers[rest.decode()] = ProducerState.unpack(v)
        for k, v in view.scan(keys.TXN_MARKERS, prefix, stop):
            _, offset = keys.parse_marker_key(k)
            m = TxnMarker.unpack(offset, v)
            self.apply(TxnChange(marker=m))
        self._refresh()

    # ------------------------------------------------------------------ reads

    def touches(self, lo: int, hi: int, committed: bool, control: bool) -> bool:
        """Whether a read of ``[lo, hi)`` has anything to leave out."""
        if not control:
            i = bisect.bisect_left(self._markers, lo)
            if i < len(self._markers) and self._markers[i] < hi:
                return True
        if committed and self._ab_first:
            k = bisect.bisect_right(self._ab_end, lo)
            if k < len(self._ab_first) and self._ab_first[k] < hi:
                return True
        return False

    def filter(
        self, chunks: list[Chunk], committed: bool, control: bool
    ) -> tuple[list[Chunk], int | None]:
        """``chunks`` (whole stored batches) without the markers (unless ``control``) and,
        for a read-committed reader, without aborted batches; also the base offset of the
        first batch kept (None: none kept)."""
        out: list[Chunk] = []
        first: int | None = None
        for chunk in chunks:
            mv = memoryview(chunk)
            n = len(mv)
            pos = 0
            keep = -1
            while pos < n:
                length = _PEEK_LEN(mv, pos + 8)[0]
                base = _PEEK_BASE(mv, pos + 16)[0]
                drop = (not control and _PEEK_FLAGS(mv, pos + 6)[0] & FLAG_CONTROL) or (
                    committed and self.is_aborted(base)
                )
                if drop:
                    if keep >= 0:
                        out.append(mv[keep:pos])
                        keep = -1
                else:
                    if keep < 0:
                        keep = pos
                    if first is None:
                        first = base
                pos += length
            if keep == 0:
                out.append(chunk)
            elif keep > 0:
                out.append(mv[keep:])
        return out, first
