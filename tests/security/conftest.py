"""One server with static users and anonymous access off, shared by the auth tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import weir
from tests.conftest import ServerProcess

USER, PASSWORD = "alice", "secret"
AUTH_ENV = {"WEIR_AUTH_USERS": f"{USER}:{PASSWORD}", "WEIR_AUTH_ALLOW_ANONYMOUS": "false"}


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("auth-server"), env=AUTH_ENV)
    srv.start()
    yield srv
    srv.stop()


# the grant tests' servers: one static superuser, anonymous access off, every other
# principal added (and granted) by that superuser
ROOT, ROOT_PW = "root", "root-password"


def superuser_server(
    tmp_path_factory: pytest.TempPathFactory, name: str, **env: str
) -> ServerProcess:
    """A started server whose one static user is the superuser ROOT; ``env`` adds settings."""
    srv = ServerProcess(
        tmp_path_factory.mktemp(name),
        env={
            "WEIR_AUTH_USERS": f"{ROOT}:{ROOT_PW}",
            "WEIR_AUTH_ALLOW_ANONYMOUS": "false",
            "WEIR_AUTH_SUPERUSERS": ROOT,
            **env,
        },
    )
    srv.start()
    return srv


def root(srv: ServerProcess) -> weir.Client:
    """A client of ``srv`` logged in as the superuser."""
    return weir.Client(srv.endpoint, credentials=(ROOT, ROOT_PW))
