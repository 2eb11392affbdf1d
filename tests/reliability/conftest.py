"""Reliability suite: quick mode runs in the default test command; long mode (`make soak`)
runs the slow tests too (WEIR_SOAK=1, WEIR_SOAK_SECONDS=1800 by default)."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("WEIR_SOAK") == "1":
        return
    skip = pytest.mark.skip(reason="long mode: run with `make soak` (WEIR_SOAK=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
