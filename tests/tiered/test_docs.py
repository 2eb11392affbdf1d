"""docs/tiered-storage.md's worked example, run against a server with the default tier
(a directory under its data dir), printing what the page says it prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import ServerProcess
from tests.doc_blocks import block, blocks


def test_the_worked_example_runs_and_prints_what_the_page_says(tmp_path: Path) -> None:
    b = block("docs/tiered-storage.md", "tier-example")
    shown = next(
        x for x in blocks("docs/tiered-storage.md") if not x.name and x.code.startswith("True")
    )
    srv = ServerProcess(tmp_path / "data")
    srv.start()
    try:
        code = b.code.replace("127.0.0.1:2136", srv.endpoint)
        assert code != b.code
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, cwd=tmp_path
        )
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout.splitlines() == shown.code.splitlines()
        assert any((tmp_path / "data" / "tier" / "segments").rglob("*.parquet"))
        assert any((tmp_path / "data" / "tier" / "payloads").rglob("*"))
    finally:
        srv.stop()
