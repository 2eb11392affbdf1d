"""Faults under mixed load: SIGKILL, SIGSTOP/SIGCONT, clean restarts, dropped connections.

Quick mode here; `make soak` runs the same for 30 minutes and prints a summary table.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import ServerProcess
from tests.reliability.chaos import CHAOS_ENV, Chaos, ChaosResult, ChaosSettings


def summary_table(r: ChaosResult) -> str:
    rep = r.report
    rows = [
        (
            "faults injected",
            f"{sum(r.faults.values())} ({', '.join(f'{k} {v}' for k, v in sorted(r.faults.items()))})",
        ),
        ("operations", f"{r.operations}"),
        ("messages attempted", f"{rep.attempted}"),
        ("acknowledged messages", f"{rep.acknowledged}"),
        ("delivered to consumers", f"{rep.delivered}"),
        ("stored at the end", f"{rep.stored}"),
        ("lost", f"{len(rep.lost)}"),
        ("duplicated", f"{len(rep.duplicated)}"),
        ("at two offsets", f"{len(rep.moved)}"),
        ("offset gaps", f"{len(rep.gaps)}"),
        ("reads going backwards", f"{len(rep.backwards_reads)}"),
        ("commits going backwards", f"{len(rep.backwards_commits)}"),
        ("seconds", f"{r.seconds:.0f}"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"| {k.ljust(width)} | {v} |" for k, v in rows)


def run_chaos(tmp_path: Path, settings: ChaosSettings) -> ChaosResult:
    server = ServerProcess(tmp_path / "data", env=CHAOS_ENV).start()
    try:
        result = Chaos(server, settings).run()
    finally:
        server.kill()
    print("\n" + summary_table(result))
    return result


def test_mixed_load_under_faults_keeps_every_promise(tmp_path: Path) -> None:
    result = run_chaos(tmp_path, ChaosSettings(duration_s=25, seed=7))
    assert result.report.ok, result.report.summary()
    assert result.report.acknowledged > 1000, result.report.summary()
    assert sum(result.faults.values()) >= 8
    assert result.report.delivered > 0


@pytest.mark.slow
@pytest.mark.timeout(4 * 3600)  # WEIR_SOAK_SECONDS (30 min by default) plus the checking
def test_soak(tmp_path: Path) -> None:
    seconds = float(os.environ.get("WEIR_SOAK_SECONDS", "1800"))
    result = run_chaos(
        tmp_path,
        ChaosSettings(
            duration_s=seconds,
            producers=4,
            consumers=3,
            partitions=4,
            fault_every_s=(1.0, 6.0),
            seed=int(seconds),
        ),
    )
    assert result.report.ok, result.report.summary()
