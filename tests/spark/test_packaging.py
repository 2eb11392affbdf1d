"""What a user meets before any Spark job runs: the install, the imports, the warnings."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import warnings

import pytest
from pyspark.sql.pandas.utils import require_minimum_pandas_version

from tests.conftest import ROOT


@pytest.mark.parametrize("missing", ["numpy", "pyarrow", "pyspark"])
def test_a_plain_install_without_the_spark_extra_says_to_install_it(missing: str) -> None:
    # `pip install weir` brings none of them: simulate the missing package in a fresh process
    code = f"import sys; sys.modules[{missing!r}] = None; import weir.spark"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: weir's Spark connector needs " + missing), last
    assert "pip install 'weir[spark]'" in last


def test_pyspark_takes_the_pinned_pandas_without_a_future_warning() -> None:
    """PySpark 4.3 warns at every session start that it does not fully support pandas >= 3:
    the [spark] extra pins a pandas it supports, and that is the one installed."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    m = re.search(r'"pandas==([^"]+)"', pyproject)
    assert m is not None
    assert importlib.metadata.version("pandas") == m.group(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        require_minimum_pandas_version()


def test_unpickling_the_source_does_not_import_the_sdk() -> None:
    """Spark unpickles `WeirDataSource` in a fresh Python worker only to ask its schema: that
    worker imports neither the SDK nor gRPC (a few tenths of a CPU second each time), and
    `weir.spark.read` is still there when asked for."""
    code = (
        "import sys, weir.spark.source as s; s.WeirDataSource({}).schema(); "
        "print(sorted(m for m in sys.modules if m.startswith(('weir.client', 'grpc')))); "
        "import weir.spark; print(weir.spark.read.__module__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "weir.spark.tier_files"]
