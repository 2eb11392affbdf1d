"""The README's Spark pipeline, run as a user runs it: the three example scripts in turn.

The pipeline and the report each start their own Spark (a child JVM), so this costs
two Spark start-ups; it is the only test that proves the commands in README.md and
examples/README.md work and that the report's two "top customers" tables agree
(exactly-once totals).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, ServerProcess

EXAMPLES = ROOT / "examples"
ORDERS = 3000


def _run(script: str, work: Path, *args: str) -> str:
    tmp = work / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "SPARK_LOCAL_DIRS": str(tmp),  # nothing left in /tmp
        "JDK_JAVA_OPTIONS": f"-Djava.io.tmpdir={tmp}",
    }
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    return done.stdout


def _table_after(out: str, title: str) -> list[tuple[str, int, float]]:
    """(customer, orders, amount) rows of the `show()` table printed after ``title``."""
    block = out[out.index(title) :].split("\n== ", 1)[0]
    rows = []
    for line in block.splitlines():
        m = re.match(r"\|\s*(c\d+)\s*\|\s*(\d+)\s*\|\s*([\d.]+)\s*\|", line)
        if m:
            rows.append((m.group(1), int(m.group(2)), float(m.group(3))))
    return rows


# three scripts, each allowed 300 s (two start a Spark of their own): the suite's 300 s
# per test only guards against a hang, and a loaded machine takes longer than that
@pytest.mark.timeout(900)
def test_orders_pipeline_from_the_readme(server: ServerProcess, tmp_path: Path) -> None:
    # a server of its own: the examples use fixed topic names
    endpoint = ("--endpoint", server.endpoint)
    out_dir = ("--out", str(tmp_path / "orders-out"))

    produced = _run("orders_producer.py", tmp_path, *endpoint, "--orders", str(ORDERS))
    assert f"wrote {ORDERS:,} orders" in produced

    piped = _run("orders_pipeline.py", tmp_path, *endpoint, *out_dir)
    read = [int(n.replace(",", "")) for n in re.findall(r"([\d,]+) orders read", piped)]
    assert read == [ORDERS, ORDERS], piped  # both queries read every order once

    report = _run("orders_report.py", tmp_path, *endpoint, *out_dir)
    raw = _table_after(report, "top 5 customers by amount, computed from the raw orders")
    streamed = _table_after(report, "the same, from the latest record per key")
    assert len(raw) == 5
    assert streamed == raw, report  # the streaming totals were written exactly once
    assert "per-minute totals in Parquet" in report
