"""docs/sdk.md's example runs as written against a real server and prints what it says."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT, ServerProcess


def test_sdk_page_example_runs(server: ServerProcess) -> None:
    text = (ROOT / "docs" / "sdk.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "docs/sdk.md has no python example"
    code = "\n".join(blocks).replace("127.0.0.1:2136", server.endpoint)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == ["True", "[b'event 10', b'event 11', b'event 12']"]
