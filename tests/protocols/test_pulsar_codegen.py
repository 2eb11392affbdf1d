"""The committed generated code of pulsar_api.proto matches the .proto (run `make proto` if not)."""

from __future__ import annotations

import subprocess
import sys


def test_generated_code_is_fresh() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "weir.protocols.pulsar.codegen", "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
