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
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol, cast

import lmdb

from weir.errors import CommitFailedError, DataDirLockedError, StorageFullError

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
        try:
            self._env = lmdb.open(
                str(self.path),
                map_size=map_size,
                max_dbs=max(16, len(self.tables) + 4),
                subdir=True,
                sync=sync,
                metasync=sync,
                meminit=False,
                max_readers=512,
                lock=True,
            )
            self._dbs = {name: self._env.open_db(name.encode()) for name in self.tables}
        except BaseException:
            self._release_lock()
            raise
        self._closed = False

    def _release_lock(self) -> None:
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        finally:
            os.close(self._lock_fd)

    def snapshot(self) -> AbstractContextManager[ReadView]:
        return self._snapshot()

    @contextmanager
    def _snapshot(self) -> Iterator[ReadView]:
        with self._env.begin(buffers=True) as txn:
            yield _LmdbView(txn, self._dbs)

    def write(self, ops: Iterable[Op]) -> None:
        dbs = self._dbs
        try:
            with self._env.begin(write=True) as txn:
                for table, key, value in ops:
                    if value is None:
                        txn.delete(key, db=dbs[table])
                    elif isinstance(value, RangeEnd):
                        _delete_range(txn.cursor(db=dbs[table]), key, value.stop)
                    else:
                        txn.put(key, value, db=dbs[table])
        except lmdb.MapFullError:
            raise StorageFullError(
                f"LMDB map of {self._env.info()['map_size']} bytes is full; raise storage.map_size "
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

    def max_key_size(self) -> int:
        """The longest key LMDB takes (511 bytes in its default build)."""
        return int(self._env.max_key_size())

    def usage(self) -> Usage:
        info = self._env.info()
        st = os.statvfs(self.path)
        return Usage(
            used_bytes=(info["last_pgno"] + 1) * self._env.stat()["psize"],
            capacity_bytes=info["map_size"],
            disk_free_bytes=st.f_bavail * st.f_frsize,
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._env.close()
        self._release_lock()
