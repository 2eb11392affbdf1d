"""The Kafka listener under weir's security: TLS (and mTLS principals), SASL PLAIN against
static and stored users, SASL OAUTHBEARER with weir JWTs, grants answered as Kafka's
authorization errors, and no request served before authentication."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka.errors import GroupAuthorizationFailedError

import weir
from tests.conftest import ServerProcess
from tests.security.certs import Authority
from weir.security.jwt_tokens import create_token

ROOT, ROOT_PW = "root", "root-pw-8"
ALICE, ALICE_PW = "alice", "alice-pw-8"
JWT_SECRET = "kafka-jwt-secret-of-thirty-two-bytes"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority(tmp_path_factory.mktemp("kafka-pki"))


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory, pki: Authority) -> Iterator[ServerProcess]:
    cert = pki.issue("localhost")
    env = {
        "WEIR_AUTH_USERS": f"{ROOT}:{ROOT_PW}",
        "WEIR_AUTH_ALLOW_ANONYMOUS": "false",
        "WEIR_AUTH_SUPERUSERS": ROOT,
        "WEIR_AUTH_JWT_SECRET": JWT_SECRET,
        "WEIR_TLS_CERT_FILE": str(cert.cert),
        "WEIR_TLS_KEY_FILE": str(cert.key),
    }
    srv = ServerProcess(tmp_path_factory.mktemp("kafka-secure"), env=env)
    srv.start()
    with weir.Client(srv.endpoint, credentials=(ROOT, ROOT_PW), tls=weir.Tls(ca=pki.path)) as c:
        c.add_user(ALICE, ALICE_PW)  # a stored user
        c.grant(ALICE, "produce", "alice-*")
        c.grant(ALICE, "consume", "alice-*")
        c.create_topic("alice-t", partitions=1)
        c.create_topic("secret", partitions=1)
    yield srv
    srv.stop()


def _conf(
    srv: ServerProcess, pki: Authority, user: str | None, pw: str = "", **extra: object
) -> dict:
    conf: dict = {"bootstrap.servers": srv.kafka, "ssl.ca.location": str(pki.path)}
    if user is None:
        conf["security.protocol"] = "SSL"
    else:
        conf.update(
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.username": user,
                "sasl.password": pw,
            }
        )
    conf.update(extra)
    return conf


def _produce(conf: dict, topic: str) -> KafkaError | None:
    p = Producer({**conf, "message.timeout.ms": 10_000})
    result: list = []
    p.produce(topic, b"v", on_delivery=lambda err, msg: result.append(err))
    p.flush(20)
    assert result, "no delivery report"
    return result[0]


def _refusal(conf: dict) -> KafkaError:
    """The error a client refused at connection gets first: librdkafka reports it to
    ``error_cb`` as it happens (a request would wait out its own timeout instead)."""
    errors: list[KafkaError] = []
    admin = AdminClient({**conf, "error_cb": errors.append, "reconnect.backoff.ms": 10_000})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        admin.poll(0.05)
    assert errors, "the client was not refused"
    return errors[0]


def test_sasl_plain_over_tls_produces_and_consumes(secure: ServerProcess, pki: Authority) -> None:
    conf = _conf(secure, pki, ALICE, ALICE_PW)
    assert _produce(conf, "alice-t") is None
    c = Consumer({**conf, "group.id": "alice-g", "auto.offset.reset": "earliest"})
    c.subscribe(["alice-t"])
    deadline = time.monotonic() + 30
    msg = None
    while msg is None and time.monotonic() < deadline:
        msg = c.poll(0.5)
    assert msg is not None and msg.error() is None and msg.value() == b"v"
    c.commit(asynchronous=False)
    c.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_scram_with_stored_and_static_users(
    secure: ServerProcess, pki: Authority, mechanism: str
) -> None:
    for user, pw in ((ALICE, ALICE_PW), (ROOT, ROOT_PW)):
        conf = _conf(secure, pki, user, pw, **{"sasl.mechanism": mechanism})
        assert _produce(conf, "alice-t") is None
    for user in (ALICE, "nobody"):  # a wrong password and an unknown user: the same refusal
        err = _refusal(_conf(secure, pki, user, "wrong-pw-99", **{"sasl.mechanism": mechanism}))
        assert err.code() == KafkaError._AUTHENTICATION, err


def test_topics_without_a_grant_answer_topic_authorization_failed(
    secure: ServerProcess, pki: Authority
) -> None:
    err = _produce(_conf(secure, pki, ALICE, ALICE_PW), "secret")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    admin = AdminClient(_conf(secure, pki, ALICE, ALICE_PW))
    md = admin.list_topics("secret", timeout=10)  # what a consumer of it learns first
    assert md.topics["secret"].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "secret" not in admin.list_topics(timeout=10).topics  # nor is it listed
    admin = AdminClient(_conf(secure, pki, ALICE, ALICE_PW))
    with pytest.raises(KafkaException) as info:
        admin.create_topics([NewTopic("secret2", 1)])["secret2"].result(20)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_joining_a_group_on_a_topic_without_consume_is_group_authorization_failed(
    secure: ServerProcess, pki: Authority
) -> None:
    consumer = KafkaConsumer(
        bootstrap_servers=secure.kafka,
        security_protocol="SASL_SSL",
        ssl_cafile=str(pki.path),
        sasl_mechanism="PLAIN",
        sasl_plain_username=ALICE,
        sasl_plain_password=ALICE_PW,
        group_id="alice-g3",
    )
    consumer.subscribe(["secret"])
    with pytest.raises(GroupAuthorizationFailedError):
        consumer.poll(timeout_ms=10_000)
    consumer.close()


def test_a_wrong_password_is_sasl_authentication_failed(
    secure: ServerProcess, pki: Authority
) -> None:
    err = _refusal(_conf(secure, pki, ALICE, "wrong-password"))
    assert err.code() == KafkaError._AUTHENTICATION, err


def test_no_credentials_gets_no_answer(secure: ServerProcess, pki: Authority) -> None:
    err = _refusal(_conf(secure, pki, None))  # the connection closes: no broker answers
    assert err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT), err


def test_plaintext_on_the_tls_port_fails(secure: ServerProcess) -> None:
    err = _refusal({"bootstrap.servers": secure.kafka})
    assert err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT), err


def test_oauthbearer_with_a_weir_jwt(secure: ServerProcess, pki: Authority) -> None:
    token = create_token(ROOT, dt.timedelta(minutes=5), secret=JWT_SECRET)

    def oauth(_config: str) -> tuple[str, float]:
        return token, time.time() + 300

    conf = {
        "bootstrap.servers": secure.kafka,
        "ssl.ca.location": str(pki.path),
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": oauth,
    }
    assert _produce(conf, "secret") is None  # root is a superuser
    bad = create_token(ROOT, dt.timedelta(minutes=5), secret="another-secret-of-thirty-two-bytes")
    conf["oauth_cb"] = lambda _c: (bad, time.time() + 300)
    err = _refusal(conf)
    assert err.code() == KafkaError._AUTHENTICATION and "invalid auth token" in err.str(), err
