"""Compaction: the latest value of each key of a partition, as a view of its own.

A compacted view covers a partition's offsets below its *position*: for each key it
holds the message that was the key's latest below the position, at its own offset
(offsets are kept, never renumbered: a compacted read skips offsets). A message with
a key and empty data is a *tombstone*: it removes its key, and stays in the view for
``delete_retention_ms`` after it was written, so that a reader behind sees the delete,
then goes. Keyless messages are left out (Pulsar >= 3.2, PIP-318), or kept, every one
of them, with ``retain_keyless``. A chunked message (`weir.chunk_headers`) counts as
one message whose chunks are all kept; one still incomplete at the position is kept
when it is its key's last, so a reader can finish it from the live tail.

A run (`compact_partition`) reads the old view (from a KV snapshot) and the log from
the old position up to the new one, in two passes (which offsets survive; then those
records copied into new blobs: a stored batch whose records all survive is copied as
it is, the others re-encoded as one batch per run of consecutive survivors). The log
is read through the partition's own read path (`LogRead`: `PartitionLog.read`, or the
broker actor's ``read_async``), never from its blobs directly: a blob may be offloaded
to the tier (`weir.storage.tiered`) and a large payload stored as a reference, and
the view keeps the payloads themselves. The log's offsets the run reads must not go to
retention while it runs (the broker holds them back); a view never goes to the tier. It never holds
anything the writers need: blobs of the new view go through the `GroupCommitter` as
jobs of their own, under a new *generation* that no reader looks at yet, and one last
small job stores the view's meta record that names the generation. That is the
publish: a restart finds the old view or the new, never a half-written one, and
`load_view` returns the ops that delete the blobs of any other generation.

A *trim* (Kafka's DeleteRecords) deletes every record below an offset, the view's too:
the partition's *trim floor* is stored with the trim (`trim_floor_op`, in the trim's own
commit) and a view read never returns a record below it (`CompactedView.read` cuts a
batch the floor falls inside, as the log's read does). Retention is not a trim: the view
outlives it (Pulsar's compacted ledger does too). A run asks for the floor after its
first pass (``floor``) and leaves out what is below it; a trim later in the run is
still applied by every read, and the next run drops those records for good.

Key layout (tables `compacted`, `compaction`)::

    compacted   (log_id u64, generation u32, first_offset u64, end_offset u64) -> batches
    compaction  (log_id u64) -> CompactionMeta (JSON)
    compaction  (log_id u64, b"t") -> trim floor u64
"""

from __future__ import annotations

import bisect
import json
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from weir.chunk_headers import CHUNK_COUNT, CHUNK_ID, CHUNK_UUID
from weir.errors import BatchFormatError, ClosedError, CorruptDataError
from weir.storage.batch import Payload, decode_payload, iter_batches, parse_header, stamp_header
from weir.storage.batch_encoding import encode_batch, reencode_from
from weir.storage.change import ReadResult
from weir.storage.codecs import Codec
from weir.storage.committer import GroupCommitter
from weir.storage.kv import KV, Op, ReadView, delete_range, put

if TYPE_CHECKING:
    from weir.storage.partition import PartitionLog

COMPACTED = "compacted"
COMPACTION = "compaction"
COMPACTION_TABLES = (COMPACTED, COMPACTION)

_VIEW_KEY = struct.Struct(">QIQQ")
_VIEW_PREFIX = struct.Struct(">QI")
_LOG = struct.Struct(">Q")
_RECODE_MIN = 8  # survivors of a batch re-encoded with its codec from this many on (else RAW)


def view_key(log_id: int, generation: int, first: int, end: int) -> bytes:
    return _VIEW_KEY.pack(log_id, generation, first, end)


def _gen_prefix(log_id: int, generation: int) -> bytes:
    return _VIEW_PREFIX.pack(log_id, generation)


def _gen_range(log_id: int, generation: int) -> tuple[bytes, bytes]:
    """Keys of one generation of a log's view: ``[start, stop)``."""
    start = _gen_prefix(log_id, generation)
    if generation < 0xFFFF_FFFF:
        return start, _gen_prefix(log_id, generation + 1)
    return start, _LOG.pack(log_id + 1)


def _trim_key(log_id: int) -> bytes:
    return _LOG.pack(log_id) + b"t"  # within the log's range of the table: drop_ops covers it


def trim_floor_op(log_id: int, floor: int) -> Op:
    """The op storing a partition's trim floor (committed with the trim itself)."""
    return put(COMPACTION, _trim_key(log_id), _LOG.pack(floor))


def load_trim_floor(view: ReadView, log_id: int) -> int:
    """The partition's trim floor (0: never trimmed)."""
    raw = view.get(COMPACTION, _trim_key(log_id))
    if raw is None:
        return 0
    if len(raw) != _LOG.size:
        raise CorruptDataError(f"bad trim floor record of log {log_id}: {len(raw)} bytes")
    return int(_LOG.unpack(raw)[0])


def cut_below(chunk: bytes | memoryview, floor: int) -> list[bytes | memoryview]:
    """``chunk`` (whole batches of consecutive offsets) without its records below
    ``floor``: the batch the floor falls inside is re-encoded from it (a cold path: only
    the first read after a trim inside a batch pays it)."""
    data = memoryview(chunk)
    out: list[bytes | memoryview] = []
    for pos, h in iter_batches(data):
        if h.next_offset <= floor:
            continue
        if h.base_offset >= floor:
            out.append(data[pos:])
            break
        body = reencode_from(data[pos : pos + h.length], h, floor - h.base_offset)
        bh = parse_header(body)
        out.append(stamp_header(body, bh, floor, h.written_at) + body[bh.payload_start :])
    return out


def _log_range(log_id: int) -> tuple[bytes, bytes | None]:
    return _LOG.pack(log_id), (_LOG.pack(log_id + 1) if log_id < (1 << 64) - 1 else None)


@dataclass(frozen=True)
class CompactionSettings:
    """How a run treats tombstones and keyless messages, and how it lays out blobs."""

    delete_retention_ms: int | None = 24 * 3600 * 1000  # None: tombstones stay for ever
    retain_keyless: bool = False
    blob_bytes: int = 1 << 20  # a view blob holds batches up to about this size
    commit_bytes: int = 8 << 20  # blobs handed to the committer per job
    read_bytes: int = 4 << 20  # asked of the log per read


@dataclass(frozen=True)
class CompactionMeta:
    """The published state of a partition's view (the `compaction` record)."""

    generation: int
    position: int  # the view holds the latest of each key among offsets below this
    keys: int  # keys with a value in the view
    tombstones: int  # deletes still kept (younger than the delete retention)
    keyless: int  # keyless messages kept (retain_keyless)
    messages_before: int  # messages this run read: the old view's and the log's
    bytes_before: int  # their stored bytes
    messages_after: int  # messages in the view
    bytes_after: int  # its stored bytes
    finished_ms: int
    duration_ms: int
    floor: int = 0  # the trim floor the run left out what was below (absent: 0)

    def pack(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def unpack(cls, raw: bytes | memoryview) -> CompactionMeta:
        try:
            return cls(**json.loads(bytes(raw)))
        except (ValueError, TypeError) as exc:
            raise CorruptDataError(f"bad compaction record: {exc}") from None


@dataclass(frozen=True, slots=True)
class ViewBlob:
    first: int  # base offset of its first batch
    end: int  # next offset after its last batch


@dataclass
class CompactedView:
    """A published view of one partition: its meta and the index of its blobs."""

    log_id: int
    meta: CompactionMeta
    blobs: list[ViewBlob] = field(default_factory=list)
    label: str = ""

    def __post_init__(self) -> None:
        self._ends = [b.end for b in self.blobs]

    @property
    def position(self) -> int:
        return self.meta.position

    @property
    def generation(self) -> int:
        return self.meta.generation

    def read(
        self, view: ReadView, from_offset: int, max_bytes: int, floor: int = 0
    ) -> tuple[list[bytes | memoryview], int, int]:
        """Whole batches of the view from the one holding ``from_offset`` on (at least
        one, then up to about ``max_bytes``): (chunks, first offset, next offset). The
        next offset is the view's position once its last batch is returned; no chunks
        when nothing of the view is at or past ``from_offset``. Nothing below the trim
        ``floor`` is returned: the batch it falls inside is cut there."""
        from_offset = max(from_offset, floor)
        chunks, first, nxt = self._read(view, from_offset, max_bytes)
        if chunks and first < floor:
            chunks[:1] = cut_below(chunks[0], floor)
            first = floor
        return chunks, first, nxt

    def _read(
        self, view: ReadView, from_offset: int, max_bytes: int
    ) -> tuple[list[bytes | memoryview], int, int]:
        i = bisect.bisect_right(self._ends, from_offset)
        chunks: list[bytes | memoryview] = []
        total = 0
        first = nxt = from_offset
        full = False  # the budget ran out inside a blob
        while i < len(self.blobs) and not full and total < max_bytes:
            b = self.blobs[i]
            raw = view.get(COMPACTED, view_key(self.log_id, self.generation, b.first, b.end))
            if raw is None:
                raise CorruptDataError(
                    f"compacted blob {b.first}..{b.end} of generation {self.generation} is missing",
                    partition=self.label,
                    offset=b.first,
                )
            data = bytes(raw)
            a = z = -1
            try:
                for pos, h in iter_batches(data):
                    if h.next_offset <= from_offset:
                        continue
                    end = pos + h.length
                    if (chunks or a >= 0) and total + end - (a if a >= 0 else pos) > max_bytes:
                        full = True
                        break
                    if a < 0:
                        a = pos
                        if not chunks:
                            first = h.base_offset
                    z = end
                    nxt = h.next_offset
            except BatchFormatError as exc:
                raise CorruptDataError(
                    f"damaged compacted batch: {exc}", partition=self.label, offset=b.first
                ) from None
            if a >= 0:
                chunks.append(memoryview(data)[a:z])
                total += z - a
            if not full:
                i += 1
        if i >= len(self.blobs):
            nxt = self.position
        return chunks, first, nxt

    def drop_ops(self) -> list[Op]:
        """Ops deleting this view's blobs (and nothing else)."""
        return [delete_range(COMPACTED, *_gen_range(self.log_id, self.generation))]


def load_view(
    view: ReadView, log_id: int, label: str = ""
) -> tuple[CompactedView | None, list[Op]]:
    """The published view of ``log_id`` (None: never compacted) and the ops that delete
    blobs of any other generation (left by a run that a crash or a restart cut short,
    or by the old view of a run whose clean-up did not happen)."""
    start, stop = _log_range(log_id)
    raw = view.get(COMPACTION, start)
    meta = CompactionMeta.unpack(raw) if raw is not None else None
    blobs: list[ViewBlob] = []
    stray: set[int] = set()
    for k, _ in view.scan(COMPACTED, start, stop, values=False):
        _, gen, first, end = _VIEW_KEY.unpack(k)
        if meta is not None and gen == meta.generation:
            blobs.append(ViewBlob(first, end))
        else:
            stray.add(gen)
    ops = [delete_range(COMPACTED, *_gen_range(log_id, g)) for g in sorted(stray)]
    if meta is None:
        return None, ops
    return CompactedView(log_id, meta, blobs, label), ops


def drop_ops(log_id: int) -> list[Op]:
    """Ops deleting every view and record of ``log_id`` (its topic is dropped)."""
    start, stop = _log_range(log_id)
    return [
        delete_range(COMPACTED, start, stop or b"\xff" * 9),
        delete_range(COMPACTION, start, stop or b"\xff" * 9),
    ]


# ---------------------------------------------------------------------- a run


@dataclass
class Progress:
    """What a run has done so far (read by the status call while it runs)."""

    phase: str = "scanning"  # scanning, writing, publishing
    messages_scanned: int = 0
    blobs_written: int = 0


Hook = Callable[[str], None]  # called at each step ("scanned", "blob-batch", "published")

Source = Iterator[tuple[memoryview, int, int]]  # (stored batch, first offset, end offset)


LogRead = Callable[[int, int, int], ReadResult]
"""``(from_offset, max_bytes, to_offset)`` -> whole stored batches of the log with their
large payloads in place: the partition's one read path (see the module doc)."""


def partition_reader(log: PartitionLog) -> LogRead:
    """`LogRead` of a partition log read in the calling thread (tests, tools; the broker
    reads through its partition actor instead, on the event loop)."""

    def read(from_offset: int, max_bytes: int, to_offset: int) -> ReadResult:
        return log.fill_payloads(log.read(from_offset, max_bytes, to_offset, fill_cache=False))

    return read


def _log_batches(read: LogRead, lo: int, hi: int, read_bytes: int, label: str) -> Source:
    """The stored batches of the log holding offsets in ``[lo, hi)``, in order, each
    with the part of ``[lo, hi)`` it holds. Stops early where nothing is stored any
    more (retention removed the rest)."""
    pos = lo
    while pos < hi:
        res = read(pos, read_bytes, hi)
        if not res.chunks:
            if res.next_offset > pos:  # only transaction markers or aborted messages
                pos = res.next_offset
                continue
            return
        for chunk in res.chunks:
            data = memoryview(chunk)
            try:
                for at, h in iter_batches(data):
                    a, z = max(pos, h.base_offset), min(hi, h.next_offset)
                    if z > a:
                        yield data[at : at + h.length], a, z
            except BatchFormatError as exc:
                raise CorruptDataError(
                    f"damaged stored batch: {exc}", partition=label, offset=pos
                ) from None
        if res.next_offset <= pos:
            raise CorruptDataError(
                "a read of the log made no progress", partition=label, offset=pos
            )
        pos = res.next_offset


def _view_batches(view: ReadView, old: CompactedView) -> Source:
    for b in old.blobs:
        raw = view.get(COMPACTED, view_key(old.log_id, old.generation, b.first, b.end))
        if raw is None:
            raise CorruptDataError(
                f"compacted blob {b.first}..{b.end} is missing", partition=old.label, offset=b.first
            )
        data = memoryview(bytes(raw))
        try:
            for pos, h in iter_batches(data):
                yield data[pos : pos + h.length], h.base_offset, h.next_offset
        except BatchFormatError as exc:
            raise CorruptDataError(
                f"damaged compacted batch: {exc}", partition=old.label, offset=b.first
            ) from None


def _headers_of(p: Payload) -> list[dict[str, str]] | None:
    return p.header_list() if p.header_lens is not None else None


class _Fold:
    """Pass one: which offsets survive (the latest of each key; see the module doc)."""

    def __init__(self, settings: CompactionSettings, now_ms: int) -> None:
        self.settings = settings
        self.now_ms = now_ms
        # key -> (offsets of its latest message, is a tombstone, written at)
        self.latest: dict[bytes, tuple[tuple[int, ...], bool, int]] = {}
        self.keyless: list[int] = []
        # chunked messages not yet complete: uuid -> (key, offsets, count)
        self.chunks: dict[str, tuple[bytes, list[int], int]] = {}
        self.messages = 0
        self.nbytes = 0

    def feed(self, batch: memoryview, lo: int, hi: int) -> None:
        h = parse_header(batch)
        p = decode_payload(batch, 0, h)
        base = h.base_offset
        ks = p.key_list()
        lens = p.data_lens
        hdrs = _headers_of(p)
        written = h.written_at
        self.messages += hi - lo
        self.nbytes += len(batch)
        latest = self.latest
        for i in range(lo - base, hi - base):
            k = ks[i]
            if hdrs is not None and CHUNK_UUID in hdrs[i]:
                self._chunk(k, base + i, hdrs[i], written)
            elif not k:
                if self.settings.retain_keyless:
                    self.keyless.append(base + i)
            else:
                latest[k] = ((base + i,), lens[i] == 0, written)

    def _chunk(self, key: bytes, offset: int, h: dict[str, str], written: int) -> None:
        u = h[CHUNK_UUID]
        try:
            count = int(h[CHUNK_COUNT])
            int(h[CHUNK_ID])
        except (KeyError, ValueError):
            if key:
                self.latest[key] = ((offset,), False, written)
            return
        k0, offs, _ = self.chunks.get(u, (key, [], count))
        offs.append(offset)
        if len(offs) >= count:
            self.chunks.pop(u, None)
            if k0:
                self.latest[k0] = (tuple(offs), False, written)
            elif self.settings.retain_keyless:
                self.keyless.extend(offs)
        else:
            self.chunks[u] = (k0, offs, count)

    def survivors(self, floor: int = 0) -> tuple[list[int], int, int, int]:
        """Sorted surviving offsets; the keys with a value, the tombstones and the keyless
        messages kept. Nothing below the trim ``floor`` survives: a key whose latest
        message a trim deleted is gone, as a chunked message whose first chunk it deleted."""
        keyless = [o for o in self.keyless if o >= floor]
        out: list[int] = list(keyless)
        keep_dead = self.settings.delete_retention_ms
        horizon = None if keep_dead is None else self.now_ms - keep_dead
        values = tombstones = 0
        for offs, dead, written in self.latest.values():
            if offs[0] < floor:
                continue
            if dead:
                if horizon is not None and written < horizon:
                    continue
                tombstones += 1
            else:
                values += 1
            out.extend(offs)
        # an incomplete chunked message that is its key's last may finish in the tail
        for k, parts, _ in self.chunks.values():
            last = self.latest.get(k)
            if parts[0] < floor:
                continue
            if not k:
                if self.settings.retain_keyless:
                    out.extend(parts)
                    keyless.extend(parts)
            elif last is None or last[0][-1] < parts[0]:
                out.extend(parts)
        out.sort()
        return out, values, tombstones, len(keyless)


class _Builder:
    """Pass two: the surviving records copied into the new view's blobs."""

    def __init__(self, survivors: list[int], blob_bytes: int) -> None:
        self.survivors = survivors
        self.blob_bytes = blob_bytes
        self.pieces: list[bytes | memoryview] = []
        self.size = 0
        self.first = -1
        self.end = -1
        self.messages = 0
        self.nbytes = 0

    def feed(self, batch: memoryview, lo: int, hi: int) -> Iterator[tuple[int, int, bytes]]:
        s = self.survivors
        a = bisect.bisect_left(s, lo)
        z = bisect.bisect_left(s, hi)
        if a == z:
            return
        h = parse_header(batch)
        if z - a == h.record_count:  # the whole stored batch survives: kept as it is
            yield from self._add(batch, h.base_offset, h.next_offset)
            return
        p = decode_payload(batch, 0, h)
        base = h.base_offset
        idx = [o - base for o in s[a:z]]
        cols = p.columns()
        has_keys = p.key_lens is not None
        has_headers = p.header_lens is not None
        run: list[int] = []
        for i in [*idx, -2]:
            if run and i != run[-1] + 1:
                buf = encode_batch(
                    [cols.data[j] for j in run],
                    producer_id=h.producer_id,
                    seq_nos=[cols.seq_nos[j] for j in run],
                    created_at=[cols.created_at[j] for j in run],
                    keys=[cols.keys[j] for j in run] if has_keys else None,
                    headers=[cols.headers[j] for j in run] if has_headers else None,
                    codec=Codec(h.codec) if len(run) >= _RECODE_MIN else Codec.RAW,
                    data_codec=h.data_codec,
                )
                nh = parse_header(buf)
                stamped = stamp_header(buf, nh, base + run[0], h.written_at)
                out = stamped + buf[nh.payload_start :]
                yield from self._add(memoryview(out), base + run[0], base + run[-1] + 1)
                run = []
            run.append(i)

    def _add(self, batch: memoryview, first: int, end: int) -> Iterator[tuple[int, int, bytes]]:
        if self.pieces and self.size + len(batch) > self.blob_bytes:
            yield self.flush()
        if not self.pieces:
            self.first = first
        self.pieces.append(batch)
        self.size += len(batch)
        self.end = end
        self.messages += end - first
        self.nbytes += len(batch)

    def flush(self) -> tuple[int, int, bytes]:
        blob = (self.first, self.end, b"".join(self.pieces))
        self.pieces = []
        self.size = 0
        return blob


def compact_partition(
    kv: KV,
    committer: GroupCommitter,
    log_id: int,
    old: CompactedView | None,
    position: int,
    settings: CompactionSettings,
    *,
    read: LogRead,
    label: str = "",
    now_ms: int | None = None,
    progress: Progress | None = None,
    hook: Hook | None = None,
    cancelled: Callable[[], bool] = lambda: False,
    floor: Callable[[], int] = lambda: 0,
) -> CompactedView:
    """Write and publish a new view of ``log_id`` up to ``position`` (runs in a worker
    thread: it blocks only on its own commits and ``read``). Returns the published view;
    the caller makes it live and then deletes ``old``'s blobs (``old.drop_ops()``).
    ``read`` reads the log (twice over ``[old.position, position)``).

    ``floor`` is the partition's trim floor now (asked when the run starts and after
    its first pass): records below it are left out of the new view. A trim at any time
    during the run is safe: the log's reads start at its new start offset, and readers
    of the view never see below the floor (`CompactedView.read`).

    ``cancelled`` is asked between jobs: a run cancelled before it publishes raises
    ClosedError and leaves its blobs to `load_view`'s clean-up (or `drop_ops`).
    """
    t0 = time.monotonic()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    prog = progress or Progress()
    prog.phase = "scanning"
    gen = (old.generation + 1) if old is not None else 1
    lo = old.position if old is not None else 0
    if position < lo:
        raise ValueError(f"compaction position {position} is below the view's {lo}")

    def check() -> None:
        if cancelled():
            raise ClosedError(f"compaction of {label or log_id} cancelled")

    # blobs a run of this generation left (a crash mid-run) go first, in the first job
    pending: list[Op] = [delete_range(COMPACTED, *_gen_range(log_id, gen))]
    pending_bytes = 0
    floor0 = floor()
    with kv.snapshot() as view:

        def sources() -> Source:
            if old is not None:
                for batch, a, z in _view_batches(view, old):
                    if z > floor0:
                        yield batch, max(a, floor0), z
            yield from _log_batches(read, max(lo, floor0), position, settings.read_bytes, label)

        fold = _Fold(settings, now)
        for batch, a, z in sources():
            fold.feed(batch, a, z)
            prog.messages_scanned += z - a
        if hook is not None:
            hook("scanned")
        floor1 = floor()
        survivors, values, tombstones, keyless = fold.survivors(floor1)
        check()
        prog.phase = "writing"
        builder = _Builder(survivors, settings.blob_bytes)
        index: list[ViewBlob] = []

        def emit(blob: tuple[int, int, bytes]) -> None:
            nonlocal pending, pending_bytes
            first, end, data = blob
            pending.append(put(COMPACTED, view_key(log_id, gen, first, end), data))
            pending_bytes += len(data)
            index.append(ViewBlob(first, end))
            if pending_bytes >= settings.commit_bytes:
                committer.commit(pending, pending_bytes)
                prog.blobs_written = len(index)
                pending, pending_bytes = [], 0
                if hook is not None:
                    hook("blob-batch")
                check()

        for batch, a, z in sources():
            for blob in builder.feed(batch, a, z):
                emit(blob)
        if builder.pieces:
            emit(builder.flush())
    if pending:
        committer.commit(pending, pending_bytes)
        prog.blobs_written = len(index)
        if hook is not None:
            hook("blob-batch")
    check()
    prog.phase = "publishing"
    meta = CompactionMeta(
        generation=gen,
        position=position,
        keys=values,
        tombstones=tombstones,
        keyless=keyless,
        messages_before=fold.messages,
        bytes_before=fold.nbytes,
        messages_after=builder.messages,
        bytes_after=builder.nbytes,
        finished_ms=int(time.time() * 1000),
        duration_ms=int((time.monotonic() - t0) * 1000),
        floor=floor1,
    )
    # the publish: one small job naming the new generation (its blobs are all durable)
    committer.commit([put(COMPACTION, _LOG.pack(log_id), meta.pack())])
    if hook is not None:
        hook("published")
    return CompactedView(log_id, meta, index, label)
