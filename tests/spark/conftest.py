"""One local Spark (local[2,2]) for every Spark test, and a weir server with quick retention."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ServerProcess
from tests.spark.session import make_spark

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

# The first Spark test starts the session (about 30 s on a quiet machine, minutes on a loaded
# one) inside its own time limit: the Spark tests' hang guard is 600 s, not the suite's 300.
SPARK_TIMEOUT_S = 600


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.timeout(SPARK_TIMEOUT_S))  # after a test's own mark


@pytest.fixture(scope="session")
def spark_work() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="weir-spark-") as d:
        yield Path(d)


@pytest.fixture(scope="session")
def spark(spark_work: Path) -> Iterator[Any]:
    session = make_spark(spark_work, "weir-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def weir_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose retention runs every 200 ms, so retention tests need not wait long."""
    srv = ServerProcess(
        tmp_path_factory.mktemp("spark-server"), env={"WEIR_TOPICS_RETENTION_INTERVAL_S": "200ms"}
    )
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def client(weir_server: ServerProcess) -> Iterator[Any]:
    import weir

    c = weir.Client(weir_server.endpoint)
    yield c
    c.close()


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")
