"""The "KV tablet": a small transactional key-value interface and its LMDB implementation.

Everything weir stores goes through `KV.write`: one atomic batch of puts and
deletes that is durable (fsync'd) when it returns. Reads see committed data
only. Named tables keep key spaces apart (LMDB sub-databases). The interface is
small on purpose so that another backend (an object-store tier) can sit beside
it later.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol, cast

import lmdb

from weir.errors import (
    CommitFailedError,
    DataDirLockedError,
    StorageFullError,
    UnavailableError,
    WeirError,
)

log = logging.getLogger("weir.storage.kv")

Buffer = bytes | bytearray | memoryview


class RangeEnd(NamedTuple):
    """The value of a range delete: keys from the op's key up to ``stop`` (excluded) go."""

    stop: bytes


class Op(NamedTuple):
    """A put (value is bytes), a delete (value is None) or a range delete (value is a
    `RangeEnd`) in a table. Ops apply in order."""

    table: str
    key: bytes
    value: Buffer | RangeEnd | None


def put(table: str, key: bytes, value: Buffer) -> Op:
    return Op(table, key, value)


def delete(table: str, key: bytes) -> Op:
    return Op(table, key, None)


def delete_range(table: str, start: bytes, stop: bytes) -> Op:
    """Delete every key in ``[start, stop)``: many small keys in one op (compaction
    removes every head piece it packed, retention every part of a blob)."""
    return Op(table, start, RangeEnd(stop))


class ReadView(Protocol):
    """A consistent snapshot; buffers it returns are valid only while it is open."""

    def get(self, table: str, key: bytes) -> memoryview | None: ...

    def scan(
        self, table: str, start: bytes, stop: bytes | None = None, *, values: bool = True
    ) -> Iterator[tuple[bytes, memoryview]]: ...


@dataclass(frozen=True, slots=True)
class Usage:
    used_bytes: int  # high-water mark of the data file
    capacity_bytes: int  # the configured map size
    disk_free_bytes: int  # free space of the file system holding the data


class KV(ABC):
    """Transactional KV: get, ordered range scan, one atomic durable batch of puts and deletes."""

    @abstractmethod
    def snapshot(self) -> AbstractContextManager[ReadView]:
        """A read-only snapshot (zero-copy buffers), used as a context manager."""

    @abstractmethod
    def write(self, ops: Iterable[Op]) -> None:
        """Apply ops atomically and durably. Raises StorageFullError or CommitFailedError."""

    @abstractmethod
    def usage(self) -> Usage: ...

    @abstractmethod
    def close(self) -> None: ...

    def get(self, table: str, key: bytes) -> bytes | None:
        with self.snapshot() as view:
            v = view.get(table, key)
            return None if v is None else bytes(v)

    def scan(
        self, table: str, start: bytes = b"", stop: bytes | None = None
    ) -> list[tuple[bytes, bytes]]:
        with self.snapshot() as view:
            return [(k, bytes(v)) for k, v in view.scan(table, start, stop)]


class _LmdbView:
    __slots__ = ("_dbs", "_txn")

    def __init__(self, txn: lmdb.Transaction, dbs: dict[str, lmdb._Database]) -> None:
        self._txn = txn
        self._dbs = dbs

    def get(self, table: str, key: bytes) -> memoryview | None:
        return cast("memoryview | None", self._txn.get(key, db=self._dbs[table]))

    def scan(
        self, table: str, start: bytes, stop: bytes | None = None, *, values: bool = True
    ) -> Iterator[tuple[bytes, memoryview]]:
        cur = self._txn.cursor(db=self._dbs[table])
        if not cur.set_range(start):
            return
        empty = memoryview(b"")
        while True:
            k = bytes(cur.key())
            if stop is not None and k >= stop:
                return
            yield k, (cast(memoryview, cur.value()) if values else empty)
            if not cur.next():
                return


DEFAULT_MAP_SIZE = 1 << 40  # 1 TiB of address space; the file grows as data arrives

# Test-only: WEIR_UNSAFE_NO_FSYNC=1 turns every fsync off, so that the reliability
# suite can show its power-cut fault catching a storage layer that skips them
# (tests/reliability/test_power_loss.py). Never set it anywhere else: every
# acknowledged write since the last checkpoint of the OS is lost at a power cut.
UNSAFE_NO_FSYNC_ENV = "WEIR_UNSAFE_NO_FSYNC"
CLOSE_WAIT_S = 5.0  # how long close() waits for the readers and writers inside LMDB


def _delete_range(cur: lmdb.Cursor, start: bytes, stop: bytes) -> None:
    if not cur.set_range(start):
        return
    while bytes(cur.key()) < stop:  # an exhausted cursor's key is b"": delete() says False
        if not cur.delete():
            return


class LmdbKV(KV):
    """LMDB environment in ``path`` with one sub-database per table.

    ``sync=True`` makes every write durable before it returns (fsync of data and
    meta page); LMDB's copy-on-write B+tree means a kill -9 at any moment leaves
    the last committed state intact. A lock file keeps a second weir process
    from opening the same directory.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        tables: Iterable[str],
        *,
        map_size: int = DEFAULT_MAP_SIZE,
        sync: bool = True,
        min_disk_free: int = 0,
    ) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.path / "weir.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise DataDirLockedError(
                f"data directory {self.path} is in use by another weir process"
            ) from None
        os.ftruncate(self._lock_fd, 0)
        os.write(self._lock_fd, f"{os.getpid()}\n".encode())
        self.tables = tuple(tables)
        self.min_disk_free = min_disk_free
        if os.environ.get(UNSAFE_NO_FSYNC_ENV) == "1":
            log.warning(
                "%s=1: fsync is OFF, writes are not durable (test-only)", UNSAFE_NO_FSYNC_ENV
            )
            sync = False
        self._map_size = map_size
        self._sync = sync
        # Every use of the environment (a snapshot, a write) is counted, so that it is
        # closed only with nobody inside: their buffers point into its map. After LMDB
        # turned fatal (`_leave`), new users are refused at once and the last one out
        # opens it again; nobody waits for it.
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)  # close() waits on it
        self._users = 0
        self._fatal = False  # LMDB refuses every transaction until opened again
        self._failed_txn = 0  # the newest commit that failed and left it fatal
        self._diverged: str | None = None  # why it may not be used again before a restart
        self._closed = False
        try:
            self._open_env()
        except BaseException:
            self._release_lock()
            raise

    def _open_env(self) -> None:
        self._env = lmdb.open(
            str(self.path),
            map_size=self._map_size,
            max_dbs=max(16, len(self.tables) + 4),
            subdir=True,
            sync=self._sync,
            metasync=self._sync,
            meminit=False,
            max_readers=512,
            lock=True,
        )
        self._dbs = {name: self._env.open_db(name.encode()) for name in self.tables}

    def _release_lock(self) -> None:
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        finally:
            os.close(self._lock_fd)

    def snapshot(self) -> AbstractContextManager[ReadView]:
        return _Snapshot(self)

    def _enter(self, refused: type[WeirError]) -> None:
        with self._lock:
            if self._fatal or self._diverged is not None or self._closed:
                raise refused(self._refusal())
            self._users += 1

    def _refusal(self) -> str:
        if self._diverged is not None:
            return self._diverged
        if self._closed:
            return f"LMDB in {self.path} is closed"
        return (
            f"LMDB in {self.path} had a fatal error after a failed commit; "
            "it is opened again as soon as its current readers are done"
        )

    def _leave(self, failed_txn: int = 0) -> None:
        """One use ends; ``failed_txn`` is the commit that failed in it (-1: before its
        transaction began), which may have left LMDB fatal."""
        with self._lock:
            if failed_txn and not self._closed and (self._fatal or self._panicked()):
                self._fatal = True
                self._failed_txn = max(self._failed_txn, failed_txn)
            self._users -= 1
            if self._users:
                return
            if self._fatal and not self._closed:
                self._reopen_locked()
            if self._closed:
                self._drained.notify_all()

    def write(self, ops: Iterable[Op]) -> None:
        self._enter(CommitFailedError)
        failed_txn = -1
        try:
            dbs = self._dbs
            with self._env.begin(write=True) as txn:
                failed_txn = txn.id()
                for table, key, value in ops:
                    if value is None:
                        txn.delete(key, db=dbs[table])
                    elif isinstance(value, RangeEnd):
                        _delete_range(txn.cursor(db=dbs[table]), key, value.stop)
                    else:
                        txn.put(key, value, db=dbs[table])
            failed_txn = 0
        except lmdb.MapFullError:
            raise StorageFullError(
                f"LMDB map of {self._map_size} bytes is full; raise storage.map_size "
                "or let retention free space"
            ) from None
        except lmdb.Error as exc:
            if getattr(exc, "errno", None) == errno.ENOSPC or "No space left" in str(exc):
                raise StorageFullError(f"disk full: {exc}") from None
            raise CommitFailedError(f"KV commit failed: {exc}") from None
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise StorageFullError(f"disk full: {exc}") from None
            raise CommitFailedError(f"KV commit failed: {exc}") from None
        finally:
            self._leave(failed_txn)

    def _panicked(self) -> bool:
        try:
            self._env.begin().abort()
        except lmdb.PanicError:
            return True
        except lmdb.Error:
            return False
        return False

    def _reopen_locked(self) -> None:
        """LMDB turned fatal in a failed commit (its meta page could not be written: say
        a disk that failed between a commit's two durable writes) and would refuse every
        transaction, reads included, for as long as it stays open; nobody is inside it
        now. So it is opened again, and must then hold the last commit that succeeded:
        LMDB writes the failed meta page back with an older transaction id so that it
        is not picked (into the page cache; what reaches the disk is the disk's
        business). If the failed commit shows anyway, what LMDB holds is not what its
        callers were told, and it refuses everything until the process restarts (which
        loads what it holds)."""
        self._fatal = False
        failed, self._failed_txn = self._failed_txn, 0
        self._env.close()
        try:
            self._open_env()
        except Exception as exc:
            self._diverged = f"LMDB in {self.path} could not be opened again: {exc}; restart weir"
            log.error("%s", self._diverged)
            return
        last = int(self._env.info()["last_txnid"])
        if failed > 0 and last >= failed:
            self._diverged = (
                f"LMDB in {self.path} holds commit {failed}, which failed; "
                "restart weir to load what it holds"
            )
            log.error("%s", self._diverged)
            return
        log.warning(
            "LMDB in %s had a fatal error after a failed commit; opened again at commit %d",
            self.path,
            last,
        )

    def max_key_size(self) -> int:
        """The longest key LMDB takes (511 bytes in its default build)."""
        return int(self._env.max_key_size())

    def usage(self) -> Usage:
        with self._lock:  # not while it is being opened again
            info = self._env.info()
            psize = self._env.stat()["psize"]
        st = os.statvfs(self.path)
        return Usage(
            used_bytes=(info["last_pgno"] + 1) * psize,
            capacity_bytes=info["map_size"],
            disk_free_bytes=st.f_bavail * st.f_frsize,
        )

    def close(self) -> None:
        """Refuses new users, waits `CLOSE_WAIT_S` at most for those inside, closes."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            deadline = time.monotonic() + CLOSE_WAIT_S
            while self._users and (left := deadline - time.monotonic()) > 0:
                self._drained.wait(left)
            if self._users:
                log.error("closing LMDB in %s with %d users inside", self.path, self._users)
            self._env.close()
        self._release_lock()


class _Snapshot:
    """`LmdbKV.snapshot`: a class rather than a generator, as it is every read's path."""

    __slots__ = ("_kv", "_txn")

    def __init__(self, kv: LmdbKV) -> None:
        self._kv = kv

    def __enter__(self) -> ReadView:
        kv = self._kv
        kv._enter(UnavailableError)
        try:
            self._txn = kv._env.begin(buffers=True)
        except lmdb.PanicError as exc:
            kv._leave(-1)
            raise UnavailableError(f"LMDB in {kv.path} had a fatal error: {exc}") from None
        except BaseException:
            kv._leave()
            raise
        return _LmdbView(self._txn, kv._dbs)

    def __exit__(self, *exc: object) -> None:
        try:
            self._txn.abort()  # a read transaction: ends it
        finally:
            self._kv._leave()
