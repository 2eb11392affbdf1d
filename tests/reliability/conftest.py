"""Reliability suite: quick mode runs in the default test command; long mode (`make soak`)
runs the slow tests too (WEIR_SOAK=1).

Chaos runs draw everything random from one seed, printed at the end of the run
(and in every failure message): replay a run with ``WEIR_CHAOS_SEED=<seed>``.
Their summary tables are printed at the end too.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.reliability.chaos import ChaosResult, summary_table

SEED_ENV = "WEIR_CHAOS_SEED"
SEED = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(1, 2**31))
RESULTS: list[tuple[str, ChaosResult]] = []


@pytest.fixture
def chaos_seed() -> int:
    return SEED


@pytest.fixture
def record_chaos() -> object:
    """Call with (name, result): the result goes into the summary table printed at the end."""

    def record(name: str, result: ChaosResult) -> None:
        RESULTS.append((name, result))

    return record


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("WEIR_SOAK") == "1":
        return
    skip = pytest.mark.skip(reason="long mode: run with `make soak` (WEIR_SOAK=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not RESULTS:
        return
    terminalreporter.section("chaos")
    terminalreporter.write_line(f"chaos seed {SEED} (replay: {SEED_ENV}={SEED})")
    terminalreporter.write_line(summary_table(RESULTS))
