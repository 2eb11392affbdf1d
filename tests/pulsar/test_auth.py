"""The Pulsar port and the admin REST behind weir's authentication and grants."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.conftest import ServerProcess
from tests.pulsar.conftest import quiet


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(
        Path(tmp_path_factory.mktemp("pulsar-auth")),
        env={
            "WEIR_AUTH_ALLOW_ANONYMOUS": "false",
            "WEIR_AUTH_USERS": "alice:secret,bob:pw",
            "WEIR_AUTH_SUPERUSERS": "alice",
        },
    )
    srv.start()
    yield srv
    srv.stop()


def test_basic_auth_user_produces_and_consumes(secured: ServerProcess) -> None:
    client = pulsar.Client(
        secured.pulsar_url,
        authentication=pulsar.AuthenticationBasic("alice", "secret"),
        operation_timeout_seconds=5,
        logger=quiet(),
    )
    producer = client.create_producer("private")
    producer.send(b"x")
    consumer = client.subscribe("private", "s", initial_position=pulsar.InitialPosition.Earliest)
    assert consumer.receive(5000).data() == b"x"
    client.close()


@pytest.mark.parametrize("who", [None, ("alice", "wrong"), ("bob", "pw")])
def test_anonymous_wrong_password_and_no_grant_are_refused(
    secured: ServerProcess, who: tuple[str, str] | None
) -> None:
    auth = pulsar.AuthenticationBasic(*who) if who else None
    client = pulsar.Client(
        secured.pulsar_url,
        authentication=auth,
        operation_timeout_seconds=3,
        logger=quiet(),
    )
    with pytest.raises(pulsar.PulsarException):
        client.create_producer("private")
    client.close()


def test_admin_rest_needs_credentials(secured: ServerProcess) -> None:
    url = secured.http_url + "/admin/v2/tenants"
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(url, timeout=5)
    assert err.value.code == 401
    basic = base64.b64encode(b"alice:secret").decode()
    req = urllib.request.Request(url, headers={"Authorization": f"Basic {basic}"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert b"public" in resp.read()
    bob = base64.b64encode(b"bob:pw").decode()
    req = urllib.request.Request(
        secured.http_url + "/admin/v2/tenants/evil",
        method="PUT",
        headers={"Authorization": f"Basic {bob}"},
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    assert err.value.code == 403
