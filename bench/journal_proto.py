"""Prototype, bench only (issue 26): a journal in front of LMDB, one fdatasync per commit.

    .venv/bin/python -m bench.journal_proto [--n 3000] [--rate 5000] [--dir PATH]

LMDB with sync on makes two durable writes per commit: an fdatasync of the data pages,
then the meta page through an O_DSYNC descriptor. BookKeeper acknowledges after one
journal fdatasync and applies entries to its ledger storage later, up to a checkpoint.
This measures, on the same file system, the latency of one durable commit of one
100 B message (paced at ``--rate``, one at a time, as one ack in flight would see it):

- ``lmdb sync``: weir today (put + commit, ``sync=True, metasync=True``);
- ``lmdb nometasync``: the meta page not synced (for reference: not crash-safe alone);
- ``journal (append)``: append a framed record (length, CRC32C, payload) to a journal
  file and fdatasync it; the LMDB put is committed with ``sync=False`` after the ack,
  and every ``--checkpoint-ms`` an ``env.sync()`` makes LMDB durable and the journal is
  truncated (a checkpoint);
- ``journal (preallocated)``: the same into a preallocated, zero-filled journal that is
  overwritten in place, so the fdatasync never has to write the file's size (metadata);
- ``fdatasync only``: a 100 B overwrite + fdatasync, the disk's floor.

Nothing here is in the server: what it would take is a journal that is replayed into
LMDB on start (records past the last checkpoint, CRC-checked, a torn tail dropped) and
the crash / power-cut suites run against it. The figures go in docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import lmdb

from weir.storage.batch import crc32c

_FRAME = struct.Struct(">II")  # length, crc32c
_now = time.perf_counter_ns


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))]


def _paced(n: int, rate: int, one: Callable[[int], None]) -> list[float]:
    """Run ``one(i)`` n times at ``rate``/s (at once when late); µs per call."""
    out = []
    interval = 1e9 / rate
    start = _now()
    for i in range(n):
        wait = (start + i * interval - _now()) / 1e9
        if wait > 0:
            time.sleep(wait)
        t = _now()
        one(i)
        out.append((_now() - t) / 1e3)
    return out


def _open(path: Path, *, sync: bool, metasync: bool) -> lmdb.Environment:
    path.mkdir(parents=True, exist_ok=True)
    return lmdb.open(
        str(path), map_size=1 << 30, sync=sync, metasync=metasync, meminit=False, max_dbs=4
    )


def lmdb_case(d: Path, n: int, rate: int, payload: bytes, metasync: bool) -> list[float]:
    env = _open(d, sync=True, metasync=metasync)

    def one(i: int) -> None:
        with env.begin(write=True) as txn:
            txn.put(i.to_bytes(8, "big"), payload)

    try:
        return _paced(n, rate, one)
    finally:
        env.close()


def journal_case(
    d: Path, n: int, rate: int, payload: bytes, prealloc: bool, checkpoint_ms: float
) -> tuple[list[float], int]:
    """µs per ack (journal append + fdatasync); LMDB applied after, unsynced, with a
    checkpoint (env.sync + journal truncation) every ``checkpoint_ms``."""
    env = _open(d / "kv", sync=False, metasync=False)
    jpath = d / "journal"
    size = 64 << 20
    fd = os.open(jpath, os.O_RDWR | os.O_CREAT, 0o644)
    if prealloc:
        os.posix_fallocate(fd, 0, size)
        os.pwrite(fd, bytes(size), 0)  # written once: later overwrites change no extents
        os.fsync(fd)
    pos = 0
    last_cp = _now()
    checkpoints = 0

    def one(i: int) -> None:
        nonlocal pos, last_cp, checkpoints
        rec = _FRAME.pack(len(payload), crc32c(payload)) + payload
        os.pwrite(fd, rec, pos)
        os.fdatasync(fd)  # durable here: the ack could go now
        pos += len(rec)
        with env.begin(write=True) as txn:  # applied to LMDB, not synced
            txn.put(i.to_bytes(8, "big"), payload)
        if (_now() - last_cp) / 1e6 >= checkpoint_ms or pos > size - 4096:
            env.sync(True)  # LMDB durable up to here: the journal can start over
            if not prealloc:
                os.ftruncate(fd, 0)
            pos = 0
            last_cp = _now()
            checkpoints += 1

    try:
        return _paced(n, rate, one), checkpoints
    finally:
        env.close()
        os.close(fd)


def fdatasync_case(d: Path, n: int, rate: int, payload: bytes) -> list[float]:
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / "f", os.O_RDWR | os.O_CREAT, 0o644)
    os.pwrite(fd, bytes(1 << 20), 0)
    os.fsync(fd)

    def one(i: int) -> None:
        os.pwrite(fd, payload, (i * 128) % (1 << 20))
        os.fdatasync(fd)

    try:
        return _paced(n, rate, one)
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--checkpoint-ms", type=float, default=1000.0)
    ap.add_argument("--dir", type=Path, help="file system to measure (default: a temp dir)")
    args = ap.parse_args(argv)
    payload = os.urandom(args.size)
    rows: dict[str, list[float]] = {}
    notes: dict[str, str] = {}
    n, rate, cp_ms = args.n, args.rate, args.checkpoint_ms

    def journal(prealloc: bool) -> Callable[[Path], list[float]]:
        def run(d: Path) -> list[float]:
            xs, cps = journal_case(d, n, rate, payload, prealloc, cp_ms)
            notes[f"journal ({'preallocated' if prealloc else 'append'}) + lmdb nosync"] = (
                f"{cps} checkpoints"
            )
            return xs

        return run

    cases: list[tuple[str, Callable[[Path], list[float]]]] = [
        ("lmdb sync (weir today)", lambda d: lmdb_case(d, n, rate, payload, True)),
        ("lmdb nometasync", lambda d: lmdb_case(d, n, rate, payload, False)),
        ("journal (append) + lmdb nosync", journal(False)),
        ("journal (preallocated) + lmdb nosync", journal(True)),
        ("fdatasync only", lambda d: fdatasync_case(d, n, rate, payload)),
    ]
    with tempfile.TemporaryDirectory(prefix="weir-journal-", dir=args.dir) as tmp:
        root = Path(tmp)
        for rep in range(args.reps):  # the cases alternate, so load drifts hit all alike
            k = rep % len(cases)
            for i, (name, fn) in enumerate(cases[k:] + cases[:k]):
                rows.setdefault(name, []).extend(fn(root / f"{rep}-{i}"))
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(
        f"one {args.size} B durable commit at a time, paced at {args.rate}/s, "
        f"{args.reps} x {args.n}; load after {load}; µs"
    )
    print("| case | p50 | p99 | p99.9 | mean |")
    print("|---|---:|---:|---:|---:|")
    for name, xs in rows.items():
        extra = f" ({notes[name]})" if name in notes else ""
        print(
            f"| {name}{extra} | {_pct(xs, 50):.0f} | {_pct(xs, 99):.0f} | "
            f"{_pct(xs, 99.9):.0f} | {sum(xs) / len(xs):.0f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
