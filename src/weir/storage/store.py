"""The storage of one data directory: the KV, its group committer and the partition logs."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from weir.errors import StorageFullError
from weir.storage import compaction, keys
from weir.storage.committer import CommitObserver, GroupCommitter
from weir.storage.compaction import COMPACTION_TABLES
from weir.storage.journaled_kv import JOURNAL_TABLE, JournaledKV, replay_into
from weir.storage.kv import DEFAULT_MAP_SIZE, KV, LmdbKV, Op
from weir.storage.partition import PartitionConfig, PartitionLog
from weir.storage.read_cache import DEFAULT_READ_CACHE_BYTES, ReadCache
from weir.storage.tiered.manager import DEFAULT_TIER_CACHE_BYTES, TierManager
from weir.storage.tiered.payloads import PAYLOAD_REFS
from weir.storage.tiered.remote_metadata import REMOTE_SEGMENTS
from weir.storage.tiered.remote_storage import RemoteStorage

FREE_SPACE_TTL_S = 0.1  # check_space asks the file system at most this often ...
FREE_SPACE_SLACK = 256 << 20  # ... while this far above the reserve


class Store:
    """Opens (or creates) a data directory and hands out its partition logs.

    ``extra_tables`` are key spaces for the layers above (topic registry,
    consumer offsets); they share the KV and the group committer, so an offset
    commit rides the same fsync as the writes around it. Its partitions share one
    read cache of ``read_cache_bytes`` (0 turns it off). With ``tier_storage`` (an
    object store) sealed blobs can be offloaded to it (`tier`, a `TierManager`).
    With ``journal`` a commit is durable after one journal append and LMDB is brought
    up to date behind it (`JournaledKV`); without, a journal left by an earlier run
    with it on is replayed into LMDB first, so switching it off never loses a write.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        extra_tables: Iterable[str] = (),
        map_size: int = DEFAULT_MAP_SIZE,
        sync: bool = True,
        min_disk_free: int = 64 << 20,
        observer: CommitObserver | None = None,
        read_cache_bytes: int = DEFAULT_READ_CACHE_BYTES,
        tier_storage: RemoteStorage | None = None,
        tier_cache_bytes: int = DEFAULT_TIER_CACHE_BYTES,
        tier_payload_grace_ms: int = 600_000,
        journal: bool = False,
    ) -> None:
        self.path = Path(path)
        tables = (
            *keys.STORAGE_TABLES,
            REMOTE_SEGMENTS,
            PAYLOAD_REFS,
            *COMPACTION_TABLES,
            *extra_tables,
        )
        self.kv: KV
        if journal:
            self.kv = JournaledKV(
                self.path / "kv", self.path / "journal", tables, map_size=map_size, sync=sync
            )
        else:
            lmdb_kv = LmdbKV(
                self.path / "kv", (*tables, JOURNAL_TABLE), map_size=map_size, sync=sync
            )
            try:
                replay_into(lmdb_kv, self.path / "journal")
            except BaseException:
                lmdb_kv.close()
                raise
            self.kv = lmdb_kv
        self.min_disk_free = min_disk_free
        self._free_bytes = 0  # check_space: the file system's free bytes when last asked
        self._free_at = -FREE_SPACE_TTL_S - 1.0  # ... when (monotonic): never yet
        self._checked_in = 0  # bytes of the writes checked since
        self._space_lock = threading.Lock()  # PartitionLog.write may run in several threads
        self._kv_dir = self.path / "kv"
        self.committer = GroupCommitter(self.kv, observer=observer)
        self.partitions: dict[int, PartitionLog] = {}
        self.read_cache = ReadCache(read_cache_bytes)
        self.tier: TierManager | None = None
        if tier_storage is not None:
            self.tier = TierManager(
                tier_storage,
                self.kv,
                self.committer,
                cache_bytes=tier_cache_bytes,
                payload_grace_ms=tier_payload_grace_ms,
            )

    def check_space(self, nbytes: int) -> None:
        """Refuse a write early when the disk is nearly full.

        The file system is asked (``statvfs``) at most every `FREE_SPACE_TTL_S` while
        the free space, less what was checked in since, stays `FREE_SPACE_SLACK` above
        the reserve; nearer the reserve, every write asks, and a write is refused only
        on a fresh answer. (Asking on every write, with LMDB's info and stat calls
        beside it, was a fifth of a paced write's preparation.) Space taken by others
        (other processes, compaction, the tier) is seen at the next question: more
        than the slack within the TTL would take over 2.5 GB/s of writing.
        A full LMDB map is not checked here: LMDB reuses freed pages, so only the
        commit itself can tell, and it fails alone with StorageFullError.
        """
        with self._space_lock:
            now = time.monotonic()
            free = self._free_bytes - self._checked_in - nbytes
            if (
                now - self._free_at > FREE_SPACE_TTL_S
                or free < self.min_disk_free + FREE_SPACE_SLACK
            ):
                st = os.statvfs(self._kv_dir)  # the file system LMDB's files are on
                self._free_bytes = st.f_bavail * st.f_frsize
                self._free_at = now
                self._checked_in = 0
                free = self._free_bytes - nbytes
            if free < self.min_disk_free:
                raise StorageFullError(
                    f"disk nearly full: {self._free_bytes} bytes free, "
                    f"keeping {self.min_disk_free} in reserve"
                )
            self._checked_in += nbytes

    def open_partition(
        self,
        log_id: int,
        config: PartitionConfig | None = None,
        *,
        label: str = "",
        verify_all: bool = False,
        strict: bool = True,
    ) -> PartitionLog:
        """The partition ``log_id`` rebuilt from the KV (an empty one if it never had data).

        ``strict=False`` opens a damaged partition in a degraded state instead of raising.
        """
        log = self.partitions.get(log_id)
        if log is None:
            log = PartitionLog.load(
                self.kv,
                self.committer,
                log_id,
                config,
                label=label,
                space_check=self.check_space,
                cache=self.read_cache,
                tier=self.tier,
                verify_all=verify_all,
                strict=strict,
            )
            self.partitions[log_id] = log
        return log

    def stored_log_ids(self) -> list[int]:
        """Every partition that has persisted metadata (had at least one write)."""
        return [keys.log_id_of(k) for k, _ in self.kv.scan(keys.PARTITIONS)]

    def drop_partition_ops(self, log_id: int) -> list[Op]:
        """KV ops that remove a partition entirely; forget it once they are committed."""
        log = self.open_partition(log_id)
        return [*log.drop_ops(), *compaction.drop_ops(log_id)]

    def forget(self, log_id: int) -> None:
        """Forget a dropped partition, and its blobs in the read cache."""
        log = self.partitions.pop(log_id, None)
        if log is not None:
            log.drop_cached()

    def close(self) -> None:
        """Finish pending commits, then close the KV."""
        if self.tier is not None:
            self.tier.close()
        self.committer.close()
        self.kv.close()
