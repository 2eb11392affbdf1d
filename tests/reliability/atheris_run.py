"""One atheris harness of this folder (``fuzz_*.py``) run for a bounded time, as a test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def fuzz_for(harness: str, seconds: int, tmp_path: Path) -> None:
    """Run ``tests/reliability/<harness>`` for ``seconds`` over a fresh corpus in
    ``tmp_path`` (the harness seeds it); a crash fails with its output (skipped
    without atheris)."""
    pytest.importorskip("atheris")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    out = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name(harness)),
            f"-max_total_time={seconds}",
            "-rss_limit_mb=2048",
            f"-artifact_prefix={tmp_path}/",
            str(corpus),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Done" in out.stderr, out.stderr[-2000:]
