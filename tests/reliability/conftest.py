"""Reliability suite: quick mode runs in the default test command; long mode (`make soak`)
runs the slow tests too (WEIR_SOAK=1).

Chaos runs draw everything random from one seed, printed at the end of the run
(and in every failure message): replay a run with ``WEIR_CHAOS_SEED=<seed>``.
The seed is drawn once per run (tests/conftest.py), so xdist workers share it. Their
summary tables are printed at the end too (by tests/conftest.py, from each test's
``chaos`` user property, which xdist hands back from the workers).
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import CHAOS_SEED_ENV
from tests.reliability.chaos import ChaosResult, summary_column

SEED = int(os.environ[CHAOS_SEED_ENV])


@pytest.fixture
def chaos_seed() -> int:
    return SEED


@pytest.fixture
def record_chaos(request: pytest.FixtureRequest) -> object:
    """Call with (name, result): the result goes into the summary table printed at the end."""

    def record(name: str, result: ChaosResult) -> None:
        request.node.user_properties.append(("chaos", (name, summary_column(result))))

    return record


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("WEIR_SOAK") == "1":
        return
    skip = pytest.mark.skip(reason="long mode: run with `make soak` (WEIR_SOAK=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
