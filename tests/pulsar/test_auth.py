"""The Pulsar port and the admin REST behind weir's authentication and grants: basic auth,
JWTs, and a revoked user's or grant's open producers and consumers ended at once."""

from __future__ import annotations

import base64
import datetime as dt
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

import weir
from tests.conftest import ServerProcess
from tests.pulsar.conftest import quiet
from weir.security.jwt_tokens import create_token

SECRET = "a-pulsar-test-secret-of-32-bytes!!"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(
        Path(tmp_path_factory.mktemp("pulsar-auth")),
        env={
            "WEIR_AUTH_ALLOW_ANONYMOUS": "false",
            "WEIR_AUTH_USERS": "alice:secret,bob:pw",
            "WEIR_AUTH_SUPERUSERS": "alice",
            "WEIR_AUTH_JWT_SECRET": SECRET,
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


def _client(srv: ServerProcess, auth: object) -> pulsar.Client:
    return pulsar.Client(
        srv.pulsar_url, authentication=auth, operation_timeout_seconds=3, logger=quiet()
    )


def test_jwt_token_auth(secured: ServerProcess) -> None:
    good = create_token("alice", dt.timedelta(minutes=5), secret=SECRET)
    client = _client(secured, pulsar.AuthenticationToken(good))
    try:
        consumer = client.subscribe("jwt", "s", initial_position=pulsar.InitialPosition.Earliest)
        client.create_producer("jwt").send(b"signed")
        assert consumer.receive(5000).data() == b"signed"
    finally:
        client.close()
    refused = {
        "expired": create_token("alice", dt.timedelta(seconds=-5), secret=SECRET),
        "other secret": create_token(
            "alice", dt.timedelta(minutes=5), secret="another-secret-of-32-bytes-long!!!"
        ),
        "no grant": create_token("nobody", dt.timedelta(minutes=5), secret=SECRET),
    }
    for token in refused.values():
        c = _client(secured, pulsar.AuthenticationToken(token))
        try:
            with pytest.raises(pulsar.PulsarException):
                c.create_producer("jwt")
        finally:
            c.close()


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)  # polling the client's state to a deadline


def test_revoking_a_grant_ends_the_producer_or_consumer_that_uses_it(
    secured: ServerProcess,
) -> None:
    topic = "revoked"
    with weir.Client(secured.endpoint, credentials=("alice", "secret")) as root:
        root.create_topic(topic)
        root.add_user("rita", "rita-password")
        root.grant("rita", "produce", topic)
        root.grant("rita", "consume", topic)
        client = _client(secured, pulsar.AuthenticationBasic("rita", "rita-password"))
        try:
            producer = client.create_producer(topic, send_timeout_millis=3000)
            consumer = client.subscribe(topic, "s")
            producer.send(b"before")
            assert consumer.receive(5000).data() == b"before"
            assert root.revoke("rita", "consume", topic)
            # the consumer is ended (and refused when it subscribes again)...
            _wait(lambda: not consumer.is_connected(), "the consumer was not ended")
            assert producer.is_connected()  # its connection was not cut: only the consumer went
            producer.send(b"after")  # ... the producer, whose grant stays, goes on
            with pytest.raises(pulsar.PulsarException):
                consumer.receive(500)
            with pytest.raises(pulsar.AuthorizationError):
                client.subscribe(topic, "s2")
            assert root.revoke("rita", "produce", topic)
            _wait(lambda: not producer.is_connected(), "the producer was not ended")
            with pytest.raises(pulsar.PulsarException):
                producer.send(b"never")  # as with Pulsar, the client retries until its timeout
        finally:
            client.close()
        assert root.describe_topic(topic).messages == 2  # before, after


def test_deleting_a_user_ends_its_connection(secured: ServerProcess) -> None:
    topic = "deleted-user"
    with weir.Client(secured.endpoint, credentials=("alice", "secret")) as root:
        root.create_topic(topic)
        root.add_user("dora", "dora-password")
        root.grant("dora", "produce", topic)
        client = _client(secured, pulsar.AuthenticationBasic("dora", "dora-password"))
        try:
            producer = client.create_producer(topic, send_timeout_millis=3000)
            producer.send(b"one")
            root.delete_user("dora")
            _wait(lambda: not producer.is_connected(), "the producer was not ended")
            with pytest.raises(pulsar.PulsarException):
                producer.send(b"never")
        finally:
            client.close()
        assert root.describe_topic(topic).messages == 1
