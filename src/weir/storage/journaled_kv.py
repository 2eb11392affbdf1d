"""A KV whose commits are durable after one journal append: LMDB is brought up to date later.

`storage.journal = true` (issue 26, docs/storage.md). `write` appends the ops to the
journal and fdatasyncs it: one sequential durable write per group commit, against
LMDB's two (data pages, then the meta page). The commit is then visible at once through
the overlay of deltas not yet in LMDB (`weir.storage.overlay`), and an applier thread
writes them to LMDB in batches, each a normal durable LMDB commit that also records the
last journal record it holds; segments LMDB holds are then deleted (a checkpoint).

LMDB is only ever changed by durable commits: with ``sync`` off it may be torn by a power
cut (its own documentation), which a journal that starts after the last sync could not
repair. So the journal takes the acknowledgement off LMDB's fsyncs, not the fsyncs off
the disk: LMDB still makes two per apply, but per batch of commits and off the ack path.

A commit of ``direct_bytes`` (1 MiB) or more skips the journal: the deltas before it
are applied, then it is committed to LMDB directly. Large commits gain nothing from the
journal (two fsyncs per MB are cheap) and would write every byte twice.

At open the journal is replayed: records after the one LMDB last recorded are applied
in order, in one durable commit with the new mark, so replay is idempotent at every
stage of a crash; then the segments are deleted.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from itertools import chain
from pathlib import Path

from weir.errors import CommitFailedError, CorruptDataError, StorageFullError, WeirError
from weir.storage.journal import DEFAULT_SEGMENT_BYTES, Journal, replay
from weir.storage.kv import (
    DEFAULT_MAP_SIZE,
    KV,
    UNSAFE_NO_FSYNC_ENV,
    LmdbKV,
    Op,
    RangeEnd,
    ReadView,
    Usage,
    put,
)
from weir.storage.overlay import Delta, MergedCache, OverlayView

log = logging.getLogger("weir.storage.journaled_kv")

JOURNAL_TABLE = "_journal"  # in LMDB: the last journal record it holds
_APPLIED_KEY = b"applied"
_U64 = struct.Struct(">Q")
_OP = struct.Struct(">BBHI")  # kind, table name length, key length, value length
_PUT, _DELETE, _RANGE = 0, 1, 2

DEFAULT_APPLY_INTERVAL_S = 0.01  # how long deltas may wait to be applied (fewer LMDB commits)
DEFAULT_APPLY_BYTES = 16 << 20  # ... unless this much is waiting
DEFAULT_APPLY_COUNT = 16  # ... or this many commits (a read view merges them)
DEFAULT_DIRECT_BYTES = 1 << 20  # a commit this big goes to LMDB directly (0: never)
DEFAULT_MAX_UNAPPLIED_BYTES = 256 << 20  # writers wait for the applier beyond this
_REPLAY_TXN_BYTES = 64 << 20
_RETRY_S = 0.5  # between tries of an apply that failed


def encode_ops(ops: Iterable[Op]) -> bytes:
    """A journal record's payload: the ops, in order."""
    parts: list[bytes | memoryview] = []
    for table, key, value in ops:
        t = table.encode()
        if value is None:
            parts += (_OP.pack(_DELETE, len(t), len(key), 0), t, key)
        elif isinstance(value, RangeEnd):
            parts += (_OP.pack(_RANGE, len(t), len(key), len(value.stop)), t, key, value.stop)
        else:
            v = memoryview(value)
            parts += (_OP.pack(_PUT, len(t), len(key), v.nbytes), t, key, v)
    return b"".join(parts)


def decode_ops(payload: memoryview) -> list[Op]:
    """The ops of a payload; put values are views of it (no copy)."""
    ops = []
    pos = 0
    end = len(payload)
    while pos < end:
        kind, tl, kl, vl = _OP.unpack_from(payload, pos)
        pos += _OP.size
        table = bytes(payload[pos : pos + tl]).decode()
        pos += tl
        key = bytes(payload[pos : pos + kl])
        pos += kl
        value = payload[pos : pos + vl]
        pos += vl
        if pos > end or kind not in (_PUT, _DELETE, _RANGE):
            raise CorruptDataError("journal record holds a malformed op")
        if kind == _PUT:
            ops.append(Op(table, key, value))
        elif kind == _DELETE:
            ops.append(Op(table, key, None))
        else:
            ops.append(Op(table, key, RangeEnd(bytes(value))))
    return ops


def _op_bytes(ops: list[Op]) -> int:
    n = 0
    for _t, key, value in ops:
        n += len(key)
        if value is not None and not isinstance(value, RangeEnd):
            n += memoryview(value).nbytes
    return n


def applied_seq(kv: KV) -> int:
    raw = kv.get(JOURNAL_TABLE, _APPLIED_KEY)
    return _U64.unpack(raw)[0] if raw else 0


def replay_into(kv: KV, directory: Path) -> int:
    """Apply the journal's records past ``kv``'s mark to it, durably, and delete the
    journal; the new mark. ``kv`` must have `JOURNAL_TABLE`. Idempotent."""
    mark = applied_seq(kv)
    if not directory.exists():
        return mark
    batch: list[Op] = []
    size = 0
    count = 0
    for rec in replay(directory, mark):
        batch += decode_ops(rec.payload)
        size += len(rec.payload)
        mark = rec.seq
        count += 1
        if size >= _REPLAY_TXN_BYTES:
            kv.write([*batch, put(JOURNAL_TABLE, _APPLIED_KEY, _U64.pack(mark))])
            batch, size = [], 0
    if batch:
        kv.write([*batch, put(JOURNAL_TABLE, _APPLIED_KEY, _U64.pack(mark))])
    if count:
        log.info("journal %s: replayed %d records up to %d", directory, count, mark)
    Journal(directory, mark + 1, sync=False).delete_all()
    return mark


class JournaledKV(KV):
    """LMDB in ``path`` behind a journal in ``journal_dir`` (see the module docstring)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        journal_dir: str | os.PathLike[str],
        tables: Iterable[str],
        *,
        map_size: int = DEFAULT_MAP_SIZE,
        sync: bool = True,
        apply_interval_s: float = DEFAULT_APPLY_INTERVAL_S,
        apply_bytes: int = DEFAULT_APPLY_BYTES,
        apply_count: int = DEFAULT_APPLY_COUNT,
        direct_bytes: int = DEFAULT_DIRECT_BYTES,
        max_unapplied_bytes: int = DEFAULT_MAX_UNAPPLIED_BYTES,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        start_applier: bool = True,
    ) -> None:
        self.lmdb = LmdbKV(path, (*tables, JOURNAL_TABLE), map_size=map_size, sync=sync)
        self.tables = self.lmdb.tables
        self.journal_dir = Path(journal_dir)
        try:
            mark = replay_into(self.lmdb, self.journal_dir)
            if os.environ.get(UNSAFE_NO_FSYNC_ENV) == "1":
                sync = False
            self.journal = Journal(
                self.journal_dir, mark + 1, sync=sync, segment_bytes=segment_bytes
            )
        except BaseException:
            self.lmdb.close()
            raise
        self._max_key = self.lmdb.max_key_size()
        self._apply_interval = apply_interval_s
        self._apply_bytes = apply_bytes
        self._apply_count = apply_count
        self._max_unapplied = max_unapplied_bytes
        self._journal_lock = threading.Lock()  # the journal: appends, segment deletes
        self._apply_lock = threading.Lock()  # one apply (or direct commit) at a time
        self._direct_bytes = direct_bytes
        self.direct_commits = 0
        self._cond = threading.Condition()  # the overlay, the applier's state
        self._pending: list[tuple[int, Delta]] = []  # journaled, not in LMDB, oldest first
        self._deltas: tuple[Delta, ...] = ()  # the same deltas, for read views
        self._unapplied_bytes = 0
        self._view_cache: tuple[tuple[Delta, ...], MergedCache] = ((), {})
        self._first_pending_at = 0.0
        self._failed: WeirError | None = None  # the applier could not apply: writes refused
        self._closing = False
        self._closed = False
        self.applies = 0
        self._applier: threading.Thread | None = None
        if start_applier:
            self._applier = threading.Thread(
                target=self._run, name="weir-journal-apply", daemon=True
            )
            self._applier.start()

    # --- reads ---------------------------------------------------------------------

    def snapshot(self) -> AbstractContextManager[ReadView]:
        return self._snapshot()

    @contextmanager
    def _snapshot(self) -> Iterator[ReadView]:
        with ExitStack() as stack:
            # the deltas and the LMDB snapshot are taken together: the applier drops a
            # delta (under the lock) only after LMDB holds it
            with self._cond:
                deltas = self._deltas
                if deltas and self._view_cache[0] is not deltas:
                    self._view_cache = (deltas, {})
                cache = self._view_cache[1]
                base = stack.enter_context(self.lmdb.snapshot())
            yield OverlayView(base, deltas, cache) if deltas else base

    # --- writes --------------------------------------------------------------------

    def _check(self, ops: list[Op]) -> None:
        for table, key, _value in ops:
            if table not in self.tables:
                raise CommitFailedError(f"KV commit failed: no table {table!r}")
            if not 0 < len(key) <= self._max_key:
                raise CommitFailedError(
                    f"KV commit failed: key of {len(key)} bytes (1 to {self._max_key})"
                )

    def write(self, ops: Iterable[Op]) -> None:
        """Durable once the journal record is (one fdatasync); readable at once. A commit
        of ``direct_bytes`` or more goes to LMDB directly instead (after the deltas
        before it): its bytes are written once, and its two fsyncs are few per MB."""
        oplist = list(ops)
        self._check(oplist)
        with self._cond:
            while (
                self._unapplied_bytes > self._max_unapplied
                and self._failed is None
                and not self._closing
            ):
                self._cond.wait(1.0)
            if (failed := self._failed) is not None:
                raise type(failed)(str(failed))
        if self._direct_bytes and _op_bytes(oplist) >= self._direct_bytes:
            self._write_direct(oplist)
            return
        payload = encode_ops(oplist)
        delta = Delta(decode_ops(memoryview(payload)))
        with self._journal_lock:
            seq = self.journal.append(payload)
            with self._cond:
                if not self._pending:
                    self._first_pending_at = time.monotonic()
                self._pending.append((seq, delta))
                self._deltas = (*self._deltas, delta)
                self._unapplied_bytes += delta.nbytes
                self._cond.notify_all()

    def _write_direct(self, ops: list[Op]) -> None:
        """One durable LMDB commit of ``ops``, with the overlay empty: every delta is
        applied first (a view stacks deltas over LMDB, so LMDB must never hold a change
        newer than a delta still stacked), and no record can be journaled meanwhile."""
        with self._journal_lock, self._apply_lock:
            try:
                # a record whose append failed may be on disk: superseded first, or a
                # replay would apply it, refused, on top of this newer commit
                self.journal.supersede()
            except OSError as exc:
                raise CommitFailedError(f"journal write failed: {exc}") from None
            if self._pending:
                upto = self._apply_locked(None)
                if upto is None:
                    failed = self._failed
                    raise (
                        CommitFailedError(str(failed))
                        if failed
                        else CommitFailedError("journal apply failed")
                    )
                self.journal.delete_applied(upto)
            self.lmdb.write(ops)
            self.direct_commits += 1

    # --- the applier ---------------------------------------------------------------

    def _due(self) -> bool:
        if not self._pending:
            return False
        if (
            self._closing
            or self._unapplied_bytes >= self._apply_bytes
            or len(self._pending) >= self._apply_count
        ):
            return True
        return time.monotonic() - self._first_pending_at >= self._apply_interval

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due():
                    if self._closing and not self._pending:
                        return
                    wait = None
                    if self._pending:
                        wait = max(
                            0.0,
                            self._apply_interval - (time.monotonic() - self._first_pending_at),
                        )
                    self._cond.wait(wait)
            if not self.apply_pending():
                with self._cond:  # retried: a disk that failed may come back
                    if self._closing:
                        return
                    self._cond.wait(_RETRY_S)

    def apply_pending(self, limit: int | None = None) -> bool:
        """Apply the oldest ``limit`` (all) deltas to LMDB in one durable commit, then drop
        them from the overlay and delete the journal segments LMDB now holds. False when
        it failed: writes are refused (with its error, retryable) until an apply succeeds;
        reads still see every delta, and the journal keeps them."""
        with self._apply_lock:
            upto = self._apply_locked(limit)
        if upto is None:
            return False
        if upto:
            with self._journal_lock:
                self.journal.delete_applied(upto)
        return True

    def _apply_locked(self, limit: int | None) -> int | None:
        """The apply itself (under ``_apply_lock``): the last record applied (0: none
        pending), None when it failed."""
        with self._cond:
            batch = self._pending[:limit] if limit is not None else list(self._pending)
        if not batch:
            return 0
        upto = batch[-1][0]
        ops = chain(
            chain.from_iterable(d.ops() for _, d in batch),
            (put(JOURNAL_TABLE, _APPLIED_KEY, _U64.pack(upto)),),
        )
        try:
            self.lmdb.write(ops)
        except Exception as exc:
            err: WeirError = (
                exc
                if isinstance(exc, StorageFullError)
                else CommitFailedError(f"journal apply to LMDB failed, writes refused: {exc}")
            )
            if self._failed is None:
                log.error("%s (the journal keeps every acknowledged write; retrying)", err)
            with self._cond:
                self._failed = err
                self._cond.notify_all()
            return None
        with self._cond:
            if self._failed is not None:
                log.warning("journal apply to LMDB works again; writes accepted")
                self._failed = None
            del self._pending[: len(batch)]
            self._deltas = self._deltas[len(batch) :]
            self._unapplied_bytes -= sum(d.nbytes for _, d in batch)
            if self._pending:
                self._first_pending_at = time.monotonic()
            self.applies += 1
            self._cond.notify_all()
        return upto

    @property
    def unapplied(self) -> int:
        """Journaled commits not yet in LMDB."""
        return len(self._pending)

    # --- the rest ------------------------------------------------------------------

    def usage(self) -> Usage:
        return self.lmdb.usage()

    def close(self) -> None:
        """Apply what is pending, delete the journal, close LMDB."""
        if self._closed:
            return
        self._closed = True
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._applier is not None:
            self._applier.join()
        elif self._failed is None:
            self.apply_pending()
        with self._journal_lock:
            if self._failed is None and not self._pending:
                self.journal.delete_all()
            else:
                self.journal.close()
        self.lmdb.close()
