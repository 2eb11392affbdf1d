"""Several GB written, offloaded, and read back byte for byte by the SDK, the ydb SDK and
Spark, with local disk use held to the offload bound (slow: `make soak`, or
``WEIR_SOAK=1 pytest -m slow tests/spark/test_tier_soak.py``).

A topic of ``WEIR_SOAK_TIER_GB`` GB (default 3) of 4 KB messages whose bytes do not
compress (a message's index, then bytes drawn from a generator seeded with it) is
written through the SDK into 2 partitions with an offload threshold of
``WEIR_SOAK_TIER_BOUND_MB`` MiB (default 128) per partition. The producer goes no
faster than offload (it waits whenever the broker holds more than the bound plus what
it has in flight), as a producer does once the tier has caught up; the server's data
directory (LMDB, without the tier's directory) is measured all along and must stay
within the bound (it never grows with the topic). Then every message is read back and
compared with what was written, byte for byte, by its index: by the SDK's range read,
by the ydb SDK's topic reader, and by Spark (`weir.spark.read`: the offloaded part as
Spark's own Parquet scan, and `format("weir")`), each index exactly once. Size, times
and the data directory's peak are printed (run with -s to see them)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import weir
import weir.spark
from tests.conftest import ServerProcess

pytestmark = pytest.mark.slow

GB = float(os.environ.get("WEIR_SOAK_TIER_GB", "3"))
BOUND = int(float(os.environ.get("WEIR_SOAK_TIER_BOUND_MB", "128")) * (1 << 20))
SIZE = 4000
PARTITIONS = 2
STEP = 32 << 20  # bytes written between two looks at the broker's local bytes
HEAD = 8 << 20  # what a partition holds beyond the threshold: its head (not sealed yet)


def body(i: int) -> bytes:
    return b"%012d" % i + random.Random(i).randbytes(SIZE - 12)


def index_of(data: bytes) -> int:
    """The message's index if its bytes are exactly `body(index)`, else -1."""
    i = int(data[:12]) if data[:12].isdigit() else -1
    return i if i >= 0 and data == body(i) else -1


def disk_bytes(root: Path, skip: Path) -> int:
    """Bytes the files under ``root`` take on disk (allocated blocks), ``skip`` left out."""
    total = 0
    for dirpath, dirs, files in os.walk(root):
        if Path(dirpath) == skip.parent:
            dirs[:] = [d for d in dirs if Path(dirpath, d) != skip]
        for f in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(Path(dirpath, f)).st_blocks * 512
    return total


class Seen:
    """Which indexes were read (each must be read exactly once, each byte for byte)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.bits = bytearray(n)
        self.bad = 0
        self.twice = 0

    def add(self, data: bytes) -> None:
        i = index_of(data)
        if i < 0 or i >= self.n:
            self.bad += 1
        elif self.bits[i]:
            self.twice += 1
        else:
            self.bits[i] = 1

    def check(self, who: str) -> None:
        missing = self.n - sum(self.bits)
        assert (self.bad, self.twice, missing) == (0, 0, 0), (
            f"{who}: {self.bad} messages not as written, {self.twice} read twice, "
            f"{missing} missing of {self.n}"
        )


@pytest.fixture
def soak_server(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path, Path]]:
    data, tier = tmp_path / "data", tmp_path / "tier"
    srv = ServerProcess(
        data, env={"WEIR_TIER_INTERVAL_S": "0.5", "WEIR_TIER_LOCAL_DIR": str(tier)}
    ).start()
    try:
        assert srv.port and srv.proc is not None, "".join(srv.log[-20:])
        yield srv, data, tier
    finally:
        srv.stop()
        shutil.rmtree(tmp_path, ignore_errors=True)  # GBs: do not leave them to pytest


def _verify_in_spark(df: Any) -> tuple[int, int, int, int]:
    """(rows, rows not as written, distinct indexes, their sum) of a DataFrame of the
    topic, each row's value checked against `body` in Spark's Python workers."""
    from pyspark.sql import functions as F

    def check(batches: Any) -> Any:
        import random

        import pyarrow as pa

        for b in batches:
            idx = []
            for v in b.column("value").to_pylist():
                i = int(v[:12]) if v[:12].isdigit() else -1
                ok = i >= 0 and v == b"%012d" % i + random.Random(i).randbytes(len(v) - 12)
                idx.append(i if ok and len(v) == 4000 else -1)
            yield pa.RecordBatch.from_pydict({"idx": pa.array(idx, pa.int64())})

    out = df.select("value").mapInArrow(check, "idx long")
    r = out.agg(
        F.count("*").alias("n"),
        F.sum((F.col("idx") < 0).cast("long")).alias("bad"),
        F.countDistinct("idx").alias("distinct"),
        F.sum("idx").alias("total"),
    ).collect()[0]
    return r.n, r.bad or 0, r.distinct, r.total or 0


@pytest.mark.timeout(3 * 3600)  # GBs: over the Spark tests' 600 s (its own mark wins)
def test_several_gb_offloaded_held_to_the_bound_and_read_back_by_every_reader(
    soak_server: tuple[ServerProcess, Path, Path], spark: Any
) -> None:
    srv, data_dir, tier_dir = soak_server
    n = int(GB * 1e9 / SIZE)
    t0 = time.monotonic()
    peak = 0
    limit = PARTITIONS * (BOUND + HEAD) + STEP
    with weir.Client(srv.endpoint) as client:
        client.create_topic("soak", partitions=PARTITIONS)
        client.alter_topic("soak", policies={"offload_threshold_bytes": BOUND})
        with client.writer("soak", producer_id="soak", routing="round-robin") as w:
            for i in range(n):
                w.write(body(i))
                if (i + 1) % (STEP // SIZE) == 0:
                    w.flush()
                    deadline = time.monotonic() + 600
                    while sum(p.local_bytes for p in client.tier_status("soak").partitions) > (
                        limit
                    ):
                        assert time.monotonic() < deadline, "offload does not keep up"
                        time.sleep(0.2)
                    peak = max(peak, disk_bytes(data_dir, tier_dir))
        write_s = time.monotonic() - t0
        deadline = time.monotonic() + 600
        while True:  # the last writes past the threshold: offloaded by the next passes
            st = client.tier_status("soak")
            if all(p.local_bytes <= BOUND + HEAD for p in st.partitions):
                break
            assert time.monotonic() < deadline, [p.local_bytes for p in st.partitions]
            time.sleep(0.5)
        final = disk_bytes(data_dir, tier_dir)
        peak = max(peak, final)
        remote = sum(p.remote_bytes for p in st.partitions)
        assert sum(p.end_offset - p.start_offset for p in st.partitions) == n
        assert remote + PARTITIONS * (BOUND + HEAD) >= n * SIZE  # all but the bound: in the store
        # local disk: bounded by the policy (about 2 x 128 MiB), not by the topic's GBs
        assert peak <= limit + (256 << 20), (peak, limit)
        # the SDK: every partition from its start, byte for byte
        t1 = time.monotonic()
        seen = Seen(n)
        for p in st.partitions:
            for chunk in client.read_range("soak", p.partition, 0):
                for m in chunk.messages():
                    seen.add(m.data)
        seen.check("SDK")
        sdk_s = time.monotonic() - t1
    # the ydb SDK's topic reader
    from tests.ydb.conftest import connect, path

    t1 = time.monotonic()
    seen = Seen(n)
    driver = connect(srv)
    try:
        reader = driver.topic_client.reader(path("soak"), consumer="soak-ydb")
        try:
            got, deadline = 0, time.monotonic() + 1800
            while got < n and time.monotonic() < deadline:
                try:
                    batch = reader.receive_batch(timeout=1)
                except TimeoutError:
                    continue
                if batch is None:
                    continue
                for m in batch.messages:
                    seen.add(m.data)
                got += len(batch.messages)
        finally:
            reader.close()
    finally:
        driver.stop(timeout=5)
    seen.check("ydb SDK")
    ydb_s = time.monotonic() - t1
    # Spark: the offloaded part as Spark's own Parquet scan, and the Python source
    want = (n, 0, n, n * (n - 1) // 2)
    t1 = time.monotonic()
    native = weir.spark.read(spark, endpoint=srv.endpoint, topic="soak")
    assert _verify_in_spark(native) == want
    spark_native_s = time.monotonic() - t1
    t1 = time.monotonic()
    source = spark.read.format("weir").option("endpoint", srv.endpoint).option("topic", "soak")
    assert _verify_in_spark(source.load()) == want
    spark_source_s = time.monotonic() - t1
    print(
        f"\ntier soak: {n} messages, {n * SIZE / 1e9:.2f} GB written in {write_s:.0f} s "
        f"(paced by offload); offloaded {remote / 1e9:.2f} GB; local "
        f"bound {PARTITIONS} x {BOUND >> 20} MiB (+ head), data dir peak "
        f"{peak / 2**20:.0f} MiB, after {final / 2**20:.0f} MiB; read back: SDK {sdk_s:.0f} s, "
        f"ydb SDK {ydb_s:.0f} s, Spark weir.spark.read {spark_native_s:.0f} s, "
        f'format("weir") {spark_source_s:.0f} s; loadavg {os.getloadavg()}'
    )
