"""Storage micro-benchmark: durable appends through PartitionLog vs the disk's raw
append + fdatasync rate, measured in the same run on the same file system.

    python bench/storage_bench.py [--dir DIR] [--seconds 3] [--json out.json]

Every case writes pre-encoded batches (encoding is the client's work) and waits
for each write to be durable before the next, like an acknowledged produce. The
raw row appends the same number of bytes per fdatasync to a plain file.
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

from weir.storage.batch import encode_batch
from weir.storage.partition import PartitionConfig, validate_incoming
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


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--dir", default=None, help="directory on the disk to measure (default: a temp dir)"
    )
    ap.add_argument("--seconds", type=float, default=3.0, help="duration of each case")
    ap.add_argument("--json", default=None, help="write the rows as JSON to this file")
    args = ap.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="weir-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    for msg_size, batch_msgs in CASES:
        batch_bytes = len(encode_batch([b"x" * msg_size] * batch_msgs, producer_id="bench-0"))
        rows.append(raw_fsync(base, batch_bytes, args.seconds, msg_size, batch_msgs))
        rows.append(weir_append(base, msg_size, batch_msgs, 1, args.seconds))
        rows.append(weir_append(base, msg_size, batch_msgs, 4, args.seconds))
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
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                [{**asdict(r), "msgs_per_s": r.msgs_per_s, "mb_per_s": r.mb_per_s} for r in rows],
                indent=1,
            )
        )
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
