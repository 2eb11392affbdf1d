"""A weir server for the Pulsar front's tests, and real `pulsar-client` clients of it."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.conftest import ServerProcess

_topics = itertools.count(1)


def quiet() -> pulsar.ConsoleLogger:
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def make_client(url: str, **kwargs: object) -> pulsar.Client:
    """A client with short timeouts: an answer the server does not give fails in seconds."""
    return pulsar.Client(url, operation_timeout_seconds=5, logger=quiet(), **kwargs)


@pytest.fixture(scope="module")
def pulsar_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(Path(tmp_path_factory.mktemp("pulsar-server")))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(pulsar_server: ServerProcess) -> Iterator[pulsar.Client]:
    c = make_client(pulsar_server.pulsar_url)
    yield c
    c.close()


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return f"pt-{request.node.name[:40].replace('[', '-').replace(']', '')}-{next(_topics)}"
