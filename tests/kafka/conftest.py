"""A weir server with its Kafka listener on an ephemeral port, shared by the module's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import ServerProcess


@pytest.fixture(scope="module")
def kafka_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("kafka-server"))
    srv.start()
    assert srv.kafka_port, "the server did not announce its Kafka listener"
    yield srv
    code = srv.stop()
    assert code == 0, "".join(srv.log[-40:])


@pytest.fixture
def bootstrap(kafka_server: ServerProcess) -> str:
    return kafka_server.kafka
