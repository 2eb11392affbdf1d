"""The disk's own limit: append + fdatasync, the floor under every fsync-before-ack broker.

A broker that acks only after its data is durable cannot ack more batches per
second than the disk completes ``write`` + ``fdatasync`` cycles, nor move more
bytes per second than those cycles carry.  This module measures exactly that,
in the same directory the brokers use, for the batch sizes the brokers see.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from .workloads import MB, Result, percentile

DEFAULT_SIZES: tuple[int, ...] = (100, 4096, 65536, 1 << 20, 8 << 20)


def append_fdatasync(
    directory: Path,
    size: int,
    max_ops: int = 20_000,
    max_seconds: float = 3.0,
    max_bytes: int = 2_000_000_000,
) -> Result:
    """Append ``size``-byte records to a fresh file, fdatasync after each.

    Bounded by ``max_ops``, ``max_seconds`` and ``max_bytes`` (whichever comes
    first).  p50/p99 are per-cycle latencies (write + fdatasync).
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"disk-probe-{size}-{os.getpid()}.log"
    buf = os.urandom(size)
    lat: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    ops = 0
    try:
        t0 = time.monotonic_ns()
        deadline = t0 + int(max_seconds * 1e9)
        while ops < max_ops and ops * size < max_bytes:
            s = time.monotonic_ns()
            if s > deadline:
                break
            view = memoryview(buf)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fdatasync(fd)
            e = time.monotonic_ns()
            lat.append((e - s) / 1e6)
            ops += 1
        secs = (time.monotonic_ns() - t0) / 1e9
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    lat.sort()
    return Result(
        system="disk append+fdatasync",
        workload=f"append {_label(size)}",
        messages=ops,
        bytes=ops * size,
        seconds=secs,
        fsync_before_ack=True,
        p50_ms=percentile(lat, 50),
        p99_ms=percentile(lat, 99),
        extra=dict(
            size=size,
            fsyncs_per_s=ops / secs if secs > 0 else 0.0,
            mb_per_s=ops * size / MB / secs if secs > 0 else 0.0,
            directory=str(directory),
        ),
    )


def run_all(
    directory: Path, sizes: Sequence[int] = DEFAULT_SIZES, max_seconds: float = 3.0
) -> list[Result]:
    """One append+fdatasync probe per size."""
    return [append_fdatasync(directory, s, max_seconds=max_seconds) for s in sizes]


def _label(size: int) -> str:
    if size >= 1 << 20 and size % (1 << 20) == 0:
        return f"{size >> 20}MB"
    if size >= 1024 and size % 1024 == 0:
        return f"{size // 1024}KB"
    return f"{size}B"


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="weir-disk-") as d:
        for r in run_all(Path(d)):
            print(
                f"{r.workload:>12}: {r.extra['fsyncs_per_s']:9.0f} fsync/s "
                f"{r.extra['mb_per_s']:8.1f} MB/s  p50 {r.p50_ms:.3f} ms  p99 {r.p99_ms:.3f} ms"
            )
