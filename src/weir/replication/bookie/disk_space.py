"""Read-only mode: a bookie whose disk (or data limit) is nearly full stops taking adds.

BookKeeper's `LedgerDirsMonitor`: past the threshold the bookie turns read-only
instead of failing commits half-way: it refuses adds with READ_ONLY (the writer
replaces it, as for any failed bookie), keeps serving reads and fences, and
moves its ZooKeeper registration from ``available`` to ``readonly`` so no new
ledger picks it. It turns writable again once usage falls below the threshold
with a margin (``resume_ratio``), so it does not flap at the edge.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from weir.storage.kv import Usage

log = logging.getLogger("weir.replication.bookie")


DEFAULT_MIN_DISK_FREE = 64 << 20


@dataclass(frozen=True, slots=True)
class SpacePolicy:
    min_disk_free: int = DEFAULT_MIN_DISK_FREE  # bytes the file system must keep free
    max_data_bytes: int = 0  # a cap on the bookie's LMDB data file; 0: none
    check_every_bytes: int = 1 << 20  # accepted payload between two checks
    resume_ratio: float = 0.9  # writable again below this share of the threshold


ModeListener = Callable[[bool, str], None]  # (read_only, reason)


class DiskSpaceMonitor:
    def __init__(self, usage: Callable[[], Usage], policy: SpacePolicy | None = None) -> None:
        self.usage = usage
        self.policy = policy or SpacePolicy()
        self.read_only = False
        self.reason = ""
        self.listeners: list[ModeListener] = []
        self._since_check = 0

    def account(self, nbytes: int) -> None:
        """Count an accepted add; check the disk every ``check_every_bytes``."""
        self._since_check += nbytes
        if self._since_check >= self.policy.check_every_bytes:
            self.check()

    def check(self) -> bool:
        """Look at the disk now; returns whether the bookie is read-only."""
        self._since_check = 0
        u = self.usage()
        pol = self.policy
        ratio = pol.resume_ratio if self.read_only else 1.0
        reason = ""
        if pol.max_data_bytes and u.used_bytes >= pol.max_data_bytes * ratio:
            reason = f"data {u.used_bytes} bytes, limit {pol.max_data_bytes}"
        elif u.disk_free_bytes * ratio <= pol.min_disk_free:
            reason = f"disk {u.disk_free_bytes} bytes free, keeping {pol.min_disk_free}"
        self._set(bool(reason), reason)
        return self.read_only

    def storage_full(self, message: str) -> None:
        """A commit hit a full disk or map: read-only at once."""
        self._set(True, message)

    def _set(self, read_only: bool, reason: str) -> None:
        if read_only == self.read_only:
            return
        self.read_only, self.reason = read_only, reason
        log.warning("bookie is %s%s", "read-only: " if read_only else "writable again", reason)
        for listener in self.listeners:
            listener(read_only, reason)
