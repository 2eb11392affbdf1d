"""Child process of tests/storage/test_journal.py: journaled commits, then SIGKILL at a
given stage of applying them. Prints "ACK i" once commit i is durable."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from weir.storage.journal import Journal
from weir.storage.journaled_kv import JournaledKV
from weir.storage.kv import Op, delete, delete_range, put

TABLES = ("t", "u")


def commit_ops(i: int) -> list[Op]:
    """Commit i of the deterministic history: puts, deletes and range deletes."""
    ops = [put("t", f"k{i % 7}".encode(), f"v{i}".encode() * (1 + i % 5))]
    if i % 3 == 0:
        ops.append(delete("t", f"k{(i + 1) % 7}".encode()))
    if i % 5 == 0:
        ops.append(delete_range("t", b"k2", b"k4"))
    ops.append(put("u", f"n{i:04d}".encode(), b"x"))
    return ops


def _die(*_: object) -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def main(path: str, stage: str, first: int, n: int) -> None:
    root = Path(path)
    if stage == "replay":
        # the replay at open is applied to LMDB, then killed before the journal goes
        Journal.delete_all = _die  # type: ignore[method-assign,assignment]
    kv = JournaledKV(root / "kv", root / "journal", TABLES, start_applier=False, segment_bytes=300)
    for i in range(first, first + n):
        kv.write(commit_ops(i))
        sys.stdout.write(f"ACK {i}\n")
        sys.stdout.flush()
    if stage == "half":
        kv.apply_pending(n // 2)
    elif stage == "checkpoint":
        kv.journal.delete_applied = _die  # type: ignore[method-assign,assignment]
        kv.apply_pending()
    elif stage == "applied":
        kv.apply_pending()
        kv.write(commit_ops(first + n))
        sys.stdout.write(f"ACK {first + n}\n")
    elif stage == "direct":
        kv._direct_bytes = 1  # the next commit goes to LMDB directly, after the deltas
        kv.write(commit_ops(first + n))
        sys.stdout.write(f"ACK {first + n}\n")
        assert kv.direct_commits == 1 and kv.unapplied == 0
    elif stage == "torn":
        last = sorted((root / "journal").iterdir())[-1]
        with open(last, "ab") as f:
            f.write(b"\x00\x00\x00\x40\xde\xad")  # half a header: a crash mid-append
    _die()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
