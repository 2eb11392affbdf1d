"""What the head of a partition costs the event loop per write and per tailing read.

    .venv/bin/python -m bench.head_stalls [--writes 12000] [--batches 5] [--size 84]

One partition written the way a paced producer's requests reach it (``--batches``
one-message batches per write, fsync off: the event loop's share is measured, not the
disk), with a reader that tails it, reading from where its last read ended after every
write. Prints, per write, the time of ``prepare_write`` and ``apply`` (both run on the
broker's event loop) and of the tailing read, with the worst ones: coalescing head
segments and packing the head into a big blob (compaction) are what make them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from weir.storage import partition as part
from weir.storage.batch_encoding import encode_batch
from weir.storage.incoming import validate_incoming
from weir.storage.partition import PartitionConfig
from weir.storage.store import Store

_now = time.perf_counter_ns


def _timed(cls: Any, name: str, into: list[int]) -> None:
    orig = getattr(cls, name)

    def wrapper(self: Any, *a: Any, **k: Any) -> Any:
        t = _now()
        try:
            return orig(self, *a, **k)
        finally:
            into.append(_now() - t)

    setattr(cls, name, wrapper)


def _row(name: str, ns: list[int]) -> str:
    s = sorted(ns)
    n = len(s)
    return (
        f"| {name} | {s[n // 2] / 1e3:.0f} | {s[int(n * 0.99)] / 1e3:.0f} | {s[-1] / 1e3:,.0f} | "
        f"{sum(1 for x in s if x > 1_000_000)} | {sum(s) / 1e6:,.0f} |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--writes", type=int, default=12_000)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--size", type=int, default=84)
    args = ap.parse_args(argv)
    prep: list[int] = []
    apply: list[int] = []
    reads: list[int] = []
    _timed(part.PartitionLog, "prepare_write", prep)
    _timed(part.PartitionLog, "apply", apply)
    d = Path(tempfile.mkdtemp(prefix="weir-head-"))
    try:
        store = Store(d / "s", sync=False)
        log = store.open_partition(0, PartitionConfig())
        payload = os.urandom(args.size)
        seq, pos = 1, 0
        for i in range(args.writes):
            batches = []
            for _ in range(args.batches):
                batches.append(encode_batch([payload], producer_id="p", first_seq_no=seq))
                seq += 1
            log.write(validate_incoming(batches), now_ms=1_000 + i)
            t = _now()
            pos = log.read(pos, 1 << 20).next_offset
            reads.append(_now() - t)
        assert pos == log.end_offset
        store.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"{args.writes:,} writes of {args.batches} one-message batches of {args.size} B; µs")
    print("\n| step | p50 | p99 | max | over 1 ms | total ms |\n|---|---:|---:|---:|---:|---:|")
    print(_row("prepare_write", prep))
    print(_row("apply", apply))
    print(_row("tailing read", reads))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
