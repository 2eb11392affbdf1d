"""docs/replication.md's example, run against a real ZooKeeper and three bookies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.doc_blocks import block
from weir.replication.local_cluster import BookieProcess
from weir.replication.zkserver import ZooKeeperServer


def test_the_ledger_example_runs(
    zookeeper: ZooKeeperServer, zk_root: str, bookies: list[BookieProcess], tmp_path: Path
) -> None:
    b = block("docs/replication.md", "replication-ledger")
    code = b.code.replace("127.0.0.1:2181", zookeeper.hosts).replace('"/weir"', f'"{zk_root}"')
    assert code != b.code
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == ["109 b'entry 9'"]  # what the page says it prints
