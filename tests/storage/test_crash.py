"""kill -9 during writes: every acknowledged message survives exactly once, no torn batch."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.storage.crash_writer import CFG, PARTITIONS
from weir.storage.batch import decode_records, iter_batches
from weir.storage.store import Store

ROUNDS = 22
JOURNAL_ROUNDS = 10
ROOT = Path(__file__).resolve().parents[2]


def _run_round(path: Path, seed: int, kill_after: float, journal: bool) -> list[str]:
    extra = ["journal"] if journal else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.storage.crash_writer", str(path), str(seed), *extra],
        stdout=subprocess.PIPE,
        cwd=ROOT,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("READY"):
                ready.set()
            lines.append(line)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    assert ready.wait(60), "crash writer did not start"
    time.sleep(kill_after)  # a random moment is the point here, not a wait for an event
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    t.join(30)
    return lines


@pytest.mark.parametrize("journal", [False, True], ids=["lmdb", "journal"])
def test_kill_9_loses_no_acknowledged_write(tmp_path: Path, journal: bool) -> None:
    """With the journal (storage.journal) the kill lands anywhere between a journal
    append, the overlay, the applier's LMDB commit and the segment deletes; the
    reopen (journal replayed, or not when the last round's store had none) is checked
    the same way."""
    rng = random.Random(1234)
    path = tmp_path / "data"
    acked: dict[str, set[int]] = {}
    total_acks = 0
    rounds = JOURNAL_ROUNDS if journal else ROUNDS
    for r in range(rounds):
        lines = _run_round(path, r, rng.uniform(0.02, 0.5), journal)
        for line in lines:
            if line.startswith("ACK "):
                _, _p, producer, lo, hi, _off = line.split()
                acked.setdefault(producer, set()).update(range(int(lo), int(hi) + 1))
                total_acks += 1
    assert total_acks > rounds, "the writer acknowledged too little to test anything"

    store = Store(path, journal=journal)
    try:
        for p in range(PARTITIONS):
            log = store.open_partition(p, CFG, label=f"crash/{p}", verify_all=True)
            seen: dict[int, int] = {}
            expect = log.start_offset
            pos = log.start_offset
            while pos < log.end_offset:
                res = log.read(pos, 4 << 20)
                for chunk in res.chunks:
                    for bpos, _ in iter_batches(chunk):
                        for rec in decode_records(chunk, bpos):
                            assert rec.offset == expect
                            expect += 1
                            producer, seq, _ = rec.data.split(b":", 2)
                            assert producer == f"w{p}".encode()
                            assert rec.seq_no == int(seq)
                            seen[int(seq)] = seen.get(int(seq), 0) + 1
                pos = res.next_offset
            assert expect == log.end_offset
            dups = [s for s, c in seen.items() if c > 1]
            assert not dups, f"partition {p}: seq_nos stored twice: {dups[:10]}"
            missing = acked.get(f"w{p}", set()) - seen.keys()
            assert not missing, f"partition {p}: acknowledged but lost: {sorted(missing)[:10]}"
            # nothing beyond what was written: seq_nos are dense from 1
            assert sorted(seen) == list(range(1, len(seen) + 1))
    finally:
        store.close()
