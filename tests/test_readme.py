"""README.md's Python example runs as written against a real server."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT, ServerProcess


def test_readme_python_example_runs(server: ServerProcess) -> None:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"```python readme-sdk\n(.*?)```", text, re.S)
    assert m, "README.md has no ```python readme-sdk block"
    code = m.group(1).replace("127.0.0.1:2136", server.endpoint)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.split()
    assert lines[-1] == "0"  # no lag left for the consumer


def test_readme_ydb_example_runs(server: ServerProcess) -> None:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"```python readme-ydb\n(.*?)```", text, re.S)
    assert m, "README.md has no ```python readme-ydb block"
    code = m.group(1).replace("127.0.0.1:2136", server.endpoint)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["page=/home", "page=/cart"]
