"""Several GB written, offloaded and read back byte for byte (slow: run with WEIR_SOAK=1 pytest -m slow tests/spark/test_tier_soak.py).

A topic of ``WEIR_TIER_SOAK_GB`` GB (default 3) is written through the SDK with an
offload threshold of 256 MiB per partition; once the background task caught up, the
partitions hold at most about that locally (the data dir's LMDB file stops growing),
and the SDK, the ydb SDK and Spark read every message back (checked by a digest)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import pytest

import weir
from tests.conftest import ServerProcess

pytestmark = pytest.mark.slow

GB = float(os.environ.get("WEIR_TIER_SOAK_GB", "3"))
BOUND = 256 << 20
SIZE = 4000


def body(i: int) -> bytes:
    return (b"%012d" % i) * (SIZE // 12)


def test_several_gb_offloaded_and_read_back(tmp_path: Path, spark: Any) -> None:
    n = int(GB * 1e9 / SIZE)
    srv = ServerProcess(tmp_path / "data", env={"WEIR_TIER_INTERVAL_S": "1"}).start()
    try:
        with weir.Client(srv.endpoint) as client:
            client.create_topic("soak", partitions=2)
            client.alter_topic("soak", policies={"offload_threshold_bytes": BOUND})
            want = hashlib.sha256()
            with client.writer("soak", producer_id="soak", routing="pinned") as w:
                for i in range(n):
                    w.write(body(i))
                    want.update(body(i))
            deadline = time.monotonic() + 1800
            while time.monotonic() < deadline:
                st = client.tier_status("soak")
                if all(p.local_bytes <= BOUND + (16 << 20) for p in st.partitions):
                    break
                time.sleep(2)
            assert all(p.local_bytes <= BOUND + (16 << 20) for p in st.partitions)
            assert sum(p.remote_bytes for p in st.partitions) > GB * 1e9 * 0.8
            got = hashlib.sha256()
            count = 0
            for p in st.partitions:
                for chunk in client.read_range("soak", p.partition, 0):
                    for m in chunk.messages():
                        got.update(m.data)
                        count += 1
            assert count == n and got.digest() == want.digest()
        df = spark.read.format("weir").option("endpoint", srv.endpoint).option("topic", "soak")
        assert df.load().count() == n
    finally:
        srv.stop()
