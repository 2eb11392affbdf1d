"""Storage micro-benchmark: durable appends through PartitionLog vs the disk's raw
append + fdatasync rate, measured in the same run on the same file system; the
write amplification of the head and compaction; readers sharing the read cache.

    python bench/storage_bench.py [--dir DIR] [--seconds 3] [--amp-mb 32] [--json out.json]
                                  [--only append,amp,cache]

Appends: every case writes pre-encoded batches (encoding is the client's work)
and waits for each write to be durable before the next, like an acknowledged
produce. The raw row appends the same number of bytes per fdatasync to a plain
file.

Amplification: ``--amp-mb`` MB of writes of 100 B, 1 KB and 10 KB messages, one
to four per write (many small requests) or as many as fit in one SDK batch
(1 MiB); bytes committed to the KV per byte stored, the sizes of the big blobs
compaction made, and the largest single commit. Byte counts do not depend on
the disk, so this part runs without fsync; CPU µs/write is the process's CPU
time (both threads) per write.

Read cache: 1, 4 and 10 consumers replay one partition side by side (in turn,
1 MiB per read request, as the broker serves them on its one event loop), with
the shared read cache off and on. Two shapes of data: 1 MiB SDK batches of 1 KB
messages (big blobs of 1 MiB, sealed in place) and 10 KB writes of 100 B
messages (big blobs of 6 MiB, packed by compaction).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from weir.storage.batch_encoding import encode_batch
from weir.storage.incoming import validate_incoming
from weir.storage.partition import PartitionConfig
from weir.storage.store import Store


@dataclass
class Row:
    case: str
    msg_size: int
    batch_msgs: int
    partitions: int
    messages: int
    seconds: float
    commits: int

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.messages * self.msg_size / self.seconds / 1e6


SDK_BATCH_BYTES = 1 << 20  # the SDK cuts batches at this size (writer.max_batch_bytes)

AMP_CASES = [  # (message size, messages per write; 0: a full SDK batch)
    (100, 1),
    (100, 4),
    (100, 0),
    (1_000, 1),
    (1_000, 4),
    (1_000, 0),
    (10_000, 1),
    (10_000, 4),
    (10_000, 0),
]

CASES = [  # (message size, messages per batch)
    (100, 1_000),
    (100, 10_000),
    (10_000, 100),
    (10_000, 800),
]


def raw_fsync(
    dirpath: Path, batch_bytes: int, seconds: float, msg_size: int, batch_msgs: int
) -> Row:
    path = dirpath / "raw.dat"
    buf = os.urandom(batch_bytes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    n = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    try:
        while time.perf_counter() < deadline and n < 100_000:
            os.write(fd, buf)
            os.fdatasync(fd)
            n += 1
    finally:
        os.close(fd)
        path.unlink()
    return Row(
        "raw append+fdatasync", msg_size, batch_msgs, 1, n * batch_msgs, time.perf_counter() - t0, n
    )


def weir_append(
    dirpath: Path, msg_size: int, batch_msgs: int, partitions: int, seconds: float
) -> Row:
    data_dir = dirpath / f"weir-{msg_size}-{batch_msgs}-{partitions}"
    store = Store(data_dir)
    logs = [store.open_partition(p, PartitionConfig()) for p in range(partitions)]
    payload = [os.urandom(msg_size) for _ in range(batch_msgs)]
    counts = [0] * partitions
    stop = threading.Event()

    def run(p: int) -> None:
        seq = 1
        log = logs[p]
        while not stop.is_set() and counts[p] < 50_000_000:
            batch = encode_batch(payload, producer_id=f"bench-{p}", first_seq_no=seq)
            log.write(validate_incoming([batch]))
            seq += batch_msgs
            counts[p] += batch_msgs

    threads = [threading.Thread(target=run, args=(p,)) for p in range(partitions)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)  # the measurement window itself
    stop.set()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    commits = store.committer.stats.commits
    store.close()
    shutil.rmtree(data_dir, ignore_errors=True)
    return Row(
        "weir PartitionLog.write", msg_size, batch_msgs, partitions, sum(counts), dt, commits
    )


@dataclass
class AmpRow:
    msg_size: int
    batch_msgs: int
    batch_bytes: int
    writes: int
    stored: int
    committed: int
    big_blobs: list[int]
    head_bytes: int
    largest_commit: int
    cpu_s: float

    @property
    def ratio(self) -> float:
        return self.committed / self.stored


def sdk_batch_msgs(msg_size: int) -> int:
    """How many messages of this size the SDK puts in one batch (just under 1 MiB)."""
    n = SDK_BATCH_BYTES // msg_size
    while len(encode_batch([b"x" * msg_size] * n, producer_id="bench")) > SDK_BATCH_BYTES:
        n -= 1
    return n


def amplification(dirpath: Path, msg_size: int, batch_msgs: int, total: int) -> AmpRow:
    """Write ``total`` bytes in writes of ``batch_msgs`` messages; count what was committed."""
    data_dir = dirpath / f"amp-{msg_size}-{batch_msgs}"
    store = Store(data_dir, sync=False)  # bytes committed do not depend on fsync
    log = store.open_partition(1, PartitionConfig())
    payload = [os.urandom(msg_size) for _ in range(batch_msgs)]
    seq = 1
    writes = 0
    largest = 0
    blen = 0
    c0 = time.process_time()
    while log.size_bytes < total:
        batch = encode_batch(payload, producer_id="bench", first_seq_no=seq)
        blen = len(batch)
        before = store.committer.stats.bytes
        log.write(validate_incoming([batch]))
        largest = max(largest, store.committer.stats.bytes - before)
        seq += batch_msgs
        writes += 1
    cpu = time.process_time() - c0
    row = AmpRow(
        msg_size,
        batch_msgs,
        blen,
        writes,
        log.size_bytes,
        store.committer.stats.bytes,
        [b.size for b in log.blobs if not b.is_head],
        log.head_bytes,
        largest,
        cpu,
    )
    store.close()
    shutil.rmtree(data_dir, ignore_errors=True)
    return row


def print_amplification(rows: list[AmpRow]) -> None:
    print(
        "| msg bytes | msgs/write | bytes/write | writes | stored MB | committed MB "
        "| committed/stored | big blobs | big blob MB (min-max) | largest commit MB | CPU µs/write |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        big = f"{min(r.big_blobs) / 1e6:.2f}-{max(r.big_blobs) / 1e6:.2f}" if r.big_blobs else "-"
        print(
            f"| {r.msg_size} | {r.batch_msgs} | {r.batch_bytes:,} | {r.writes:,} | "
            f"{r.stored / 1e6:.1f} | {r.committed / 1e6:.1f} | {r.ratio:.2f} | "
            f"{len(r.big_blobs)} | {big} | {r.largest_commit / 1e6:.2f} | "
            f"{1e6 * r.cpu_s / r.writes:.0f} |"
        )


READ_SHAPES = [  # (label, message size, messages per write)
    ("1 KB msgs, 1 MiB batches", 1_000, 1_000),
    ("100 B msgs, 10 KB writes", 100, 100),
]


@dataclass
class CacheRow:
    data: str
    readers: int
    cache: bool
    read_bytes: int
    seconds: float
    cpu_s: float
    hits: int
    misses: int

    @property
    def mb_per_s(self) -> float:
        return self.read_bytes / self.seconds / 1e6


def replay(data_dir: Path, readers: int, cache: bool) -> tuple[int, float, float, int, int]:
    """``readers`` consumers read the partition's big blobs from offset 0, in turn, on a
    freshly opened store (empty cache): (bytes read, seconds, CPU seconds, hits, misses)."""
    store = Store(data_dir, read_cache_bytes=(256 << 20) if cache else 0)
    log = store.open_partition(1, PartitionConfig())
    end = max(b.end_offset for b in log.blobs if not b.is_head)  # big blobs only
    pos = [0] * readers
    total = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while pos[-1] < end:
        for i in range(readers):  # each consumer's next read request in turn
            res = log.read(pos[i], 1 << 20, end)
            total += res.nbytes
            pos[i] = res.next_offset
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    st = store.read_cache.stats
    store.close()
    return total, dt, cpu, st.hits, st.misses


def cache_readers(
    dirpath: Path, mb: float, readers_list: list[int], repeat: int = 3
) -> list[CacheRow]:
    """Rows of `replay`, the fastest of ``repeat`` runs each (the machine is shared)."""
    rows = []
    for label, msg_size, batch_msgs in READ_SHAPES:
        data_dir = dirpath / f"read-{msg_size}"
        store = Store(data_dir, sync=False)
        log = store.open_partition(1, PartitionConfig())
        payload = [os.urandom(msg_size) for _ in range(batch_msgs)]
        seq = 1
        while log.size_bytes < mb * 1e6:
            log.write(validate_incoming([encode_batch(payload, producer_id="p", first_seq_no=seq)]))
            seq += batch_msgs
        store.close()
        for readers in readers_list:
            for cache in (False, True):
                runs = [replay(data_dir, readers, cache) for _ in range(repeat)]
                best = min(runs, key=lambda r: r[1])
                rows.append(CacheRow(label, readers, cache, *best))
        shutil.rmtree(data_dir, ignore_errors=True)
    return rows


def print_cache(rows: list[CacheRow]) -> None:
    print(
        "| data | consumers | read cache | MB read | seconds | MB/s | CPU ms per MB "
        "| hits | misses |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r.data} | {r.readers} | {'on' if r.cache else 'off'} | "
            f"{r.read_bytes / 1e6:,.0f} | {r.seconds:.2f} | {r.mb_per_s:,.0f} | "
            f"{1e3 * r.cpu_s / (r.read_bytes / 1e6):.2f} | {r.hits:,} | {r.misses:,} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--dir", default=None, help="directory on the disk to measure (default: a temp dir)"
    )
    ap.add_argument("--seconds", type=float, default=3.0, help="duration of each case")
    ap.add_argument("--amp-mb", type=float, default=32.0, help="MB written per amplification case")
    ap.add_argument(
        "--read-mb", type=float, default=48.0, help="MB in the partition the consumers replay"
    )
    ap.add_argument("--readers", default="1,4,10", help="consumer counts for the cache rows")
    ap.add_argument("--only", default="append,amp,cache", help="parts to run (comma-separated)")
    ap.add_argument("--json", default=None, help="write the rows as JSON to this file")
    args = ap.parse_args()
    parts = set(args.only.split(","))
    base = Path(args.dir or tempfile.mkdtemp(prefix="weir-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    out: dict[str, object] = {}
    if "append" in parts:
        out["append"] = run_appends(base, args.seconds)
    if "amp" in parts:
        amp = [
            amplification(base, size, n or sdk_batch_msgs(size), int(args.amp_mb * 1e6))
            for size, n in AMP_CASES
        ]
        print()
        print_amplification(amp)
        out["amplification"] = [{**asdict(r), "ratio": r.ratio} for r in amp]
    if "cache" in parts:
        cache = cache_readers(base, args.read_mb, [int(n) for n in args.readers.split(",")])
        print()
        print_cache(cache)
        out["read_cache"] = [{**asdict(r), "mb_per_s": r.mb_per_s} for r in cache]
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)


def run_appends(base: Path, seconds: float) -> list[dict[str, object]]:
    rows: list[Row] = []
    for msg_size, batch_msgs in CASES:
        batch_bytes = len(encode_batch([b"x" * msg_size] * batch_msgs, producer_id="bench-0"))
        rows.append(raw_fsync(base, batch_bytes, seconds, msg_size, batch_msgs))
        rows.append(weir_append(base, msg_size, batch_msgs, 1, seconds))
        rows.append(weir_append(base, msg_size, batch_msgs, 4, seconds))
    print("| case | msg bytes | msgs/batch | partitions | msgs/s | MB/s | fsyncs | % of raw |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    raw_mb = 0.0
    for r in rows:
        if r.case.startswith("raw"):
            raw_mb = r.mb_per_s
        pct = f"{100 * r.mb_per_s / raw_mb:.0f}%" if raw_mb else ""
        print(
            f"| {r.case} | {r.msg_size} | {r.batch_msgs} | {r.partitions} | {r.msgs_per_s:,.0f} | "
            f"{r.mb_per_s:,.1f} | {r.commits} | {pct} |"
        )
    return [{**asdict(r), "msgs_per_s": r.msgs_per_s, "mb_per_s": r.mb_per_s} for r in rows]


if __name__ == "__main__":
    main()
