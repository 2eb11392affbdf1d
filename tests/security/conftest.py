"""One server with static users and anonymous access off, shared by the auth tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import ServerProcess

USER, PASSWORD = "alice", "secret"
AUTH_ENV = {"WEIR_AUTH_USERS": f"{USER}:{PASSWORD}", "WEIR_AUTH_ALLOW_ANONYMOUS": "false"}


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("auth-server"), env=AUTH_ENV)
    srv.start()
    yield srv
    srv.stop()
