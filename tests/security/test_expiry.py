"""A stream does not outlive its token: when the JWT that opened it expires, the server ends
it (native write, read and subscription streams, the ydb SDK's topic reader and writer, a
Pulsar connection, a Kafka connection)
with the front's authentication error, and nothing sent or stored after the expiry reaches
the expired client. Each test gives its token a few seconds, opens the streams and sees
data flow, then waits (bounded) for the server to end them."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Callable, Iterator

import pulsar
import pytest
import ydb
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

import weir
from tests.conftest import ServerProcess
from tests.pulsar.conftest import quiet
from tests.security.conftest import root, superuser_server
from tests.ydb.conftest import connect, path, receive
from weir.errors import UnauthorizedError, WeirError
from weir.security.jwt_tokens import create_token, jwt_expiry

SECRET = "an-expiry-test-secret-of-32-bytes!!"
LIFETIME = dt.timedelta(seconds=4)  # long enough to open the streams on a busy machine


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = superuser_server(tmp_path_factory, "expiry", WEIR_AUTH_JWT_SECRET=SECRET)
    yield srv
    srv.stop()


def short_token(subject: str) -> tuple[str, float]:
    """A JWT for ``subject`` and when it expires (epoch seconds: JWTs count whole seconds)."""
    token = create_token(subject, LIFETIME, secret=SECRET)
    exp = jwt_expiry(token)
    assert exp is not None
    return token, exp


def until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)  # polling a client's state to a deadline


def test_native_streams_end_when_their_jwt_expires(server: ServerProcess) -> None:
    """The weir SDK's writer, reader and subscription consumer, opened with a JWT, end with
    UnauthorizedError ('auth token expired') after it expires: nothing written after the
    expiry is stored, nothing written by others is delivered to them."""
    topic = "expiring-native"
    with root(server) as r:
        r.create_topic(topic, partitions=1, consumers=["c"])
        token, exp = short_token("svc")
        r.grant("svc", "produce", topic)
        r.grant("svc", "consume", topic)
        with weir.Client(server.endpoint, credentials=weir.Token(token)) as c:
            writer = c.writer(topic, producer_id="svc")
            reader = c.reader(topic, consumer="c")
            sub = c.subscribe(topic, "s", initial_position="earliest")
            try:
                writer.write(b"before")
                writer.flush(timeout=30)
                batch = reader.receive_batch(timeout=30)
                assert batch is not None and [m.data for m in batch.messages] == [b"before"]
                msg = sub.receive(timeout=30)
                assert msg is not None and msg.data == b"before"
                assert time.time() < exp, "the machine is too slow for this token's lifetime"
                until(lambda: time.time() > exp + 1, "time stands still")
                with r.writer(topic, producer_id="root") as w:
                    w.write(b"after")
                with pytest.raises(UnauthorizedError, match="expired"):
                    for _ in range(100):  # bounded: each call waits at most 1 s
                        batch = reader.receive_batch(timeout=1)
                        assert batch is None or b"after" not in [m.data for m in batch.messages]
                with pytest.raises(UnauthorizedError, match="expired"):
                    for _ in range(100):
                        got = sub.receive(timeout=1)
                        assert got is None or got.data == b"before"  # a redelivery at most
                with pytest.raises(UnauthorizedError, match="expired"):
                    for _ in range(100):
                        writer.write(b"never")
                        writer.flush(timeout=30)
            finally:
                for closing in (writer.close, reader.close, sub.close):
                    with contextlib.suppress(WeirError):  # it may raise its error again
                        closing()
        assert time.time() >= exp
        stored = r.describe_topic(topic).messages
        assert stored == 2  # before, after
        with r.reader(topic, consumer="check") as check:
            seen = []
            while len(seen) < stored:
                b = check.receive_batch(timeout=30)
                assert b is not None
                seen += [m.data for m in b.messages]
        assert b"never" not in seen


def test_a_pulsar_connection_ends_when_its_jwt_expires(server: ServerProcess) -> None:
    """pulsar-client with AuthenticationToken: the server closes the connection at expiry and
    refuses the client's reconnect with the same token, so the producer's sends fail and the
    consumer receives nothing more."""
    topic = "expiring-pulsar"
    with root(server) as r:
        r.create_topic(topic, partitions=1)
        r.grant("psvc", "produce", topic)
        r.grant("psvc", "consume", topic)
        token, exp = short_token("psvc")
        client = pulsar.Client(
            server.pulsar_url,
            authentication=pulsar.AuthenticationToken(token),
            operation_timeout_seconds=3,
            logger=quiet(),
        )
        try:
            producer = client.create_producer(topic, send_timeout_millis=3000)
            consumer = client.subscribe(
                topic, "s", initial_position=pulsar.InitialPosition.Earliest
            )
            producer.send(b"before")
            assert consumer.receive(10_000).data() == b"before"
            assert time.time() < exp, "the machine is too slow for this token's lifetime"
            until(lambda: time.time() > exp + 1, "time stands still")
            until(lambda: not producer.is_connected(), "the producer was not ended")
            until(lambda: not consumer.is_connected(), "the consumer was not ended")
            with r.writer(topic, producer_id="root") as w:
                w.write(b"after")
            with pytest.raises(pulsar.PulsarException):
                producer.send(b"never")
            with pytest.raises(pulsar.PulsarException):
                consumer.receive(1000)  # 'after' never reaches the expired consumer
        finally:
            client.close()
        assert r.describe_topic(topic).messages == 2  # before, after


def test_a_kafka_oauthbearer_connection_ends_when_its_jwt_expires(server: ServerProcess) -> None:
    """confluent-kafka with SASL OAUTHBEARER: the server closes the connection at the token's
    expiry; the client reconnects with the token its callback gives, which is refused, so a
    message produced after the expiry is not delivered and the consumer gets nothing more."""
    topic = "expiring-kafka"
    with root(server) as r:
        r.create_topic(topic, partitions=1)
        r.grant("ksvc", "produce", topic)
        r.grant("ksvc", "consume", topic)
        token, exp = short_token("ksvc")
        conf = {
            "bootstrap.servers": server.kafka,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": lambda _config: (token, exp + 3600),  # the client thinks it lasts
        }
        producer = Producer({**conf, "message.timeout.ms": 5000, "linger.ms": 0})
        # assigned, not subscribed: a group member's close would wait out its coordinator
        consumer = Consumer({**conf, "group.id": "g", "enable.auto.commit": False})
        try:
            reports: list[KafkaError | None] = []
            producer.produce(topic, b"before", on_delivery=lambda err, _m: reports.append(err))
            producer.flush(30)
            assert reports == [None]
            consumer.assign([TopicPartition(topic, 0, 0)])
            got = None
            deadline = time.monotonic() + 30
            while got is None and time.monotonic() < deadline:
                got = consumer.poll(0.5)
                if got is not None and got.error() is not None:
                    got = None
            assert got is not None and got.value() == b"before"
            assert time.time() < exp, "the machine is too slow for this token's lifetime"
            until(lambda: time.time() > exp + 1, "time stands still")
            with r.writer(topic, producer_id="root") as w:
                w.write(b"after")
            producer.produce(topic, b"never", on_delivery=lambda err, _m: reports.append(err))
            producer.flush(30)
            assert len(reports) == 2 and reports[1] is not None  # not delivered
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                late = consumer.poll(0.5)
                assert late is None or late.error() is not None, "data after the expiry"
        finally:
            consumer.close()
        assert r.describe_topic(topic).messages == 2  # before, after


def test_ydb_sdk_sessions_end_when_their_jwt_expires(server: ServerProcess) -> None:
    """The `ydb` SDK with AccessTokenCredentials(JWT): its topic reader and writer end with
    UNAUTHORIZED ('auth token expired') after the token expires; nothing more is stored or
    delivered."""
    topic_name = "expiring-ydb"
    with root(server) as r:
        r.create_topic(topic_name, partitions=1, consumers=["c"])
        r.grant("ysvc", "produce", topic_name)
        r.grant("ysvc", "consume", topic_name)
        token, exp = short_token("ysvc")
        driver = connect(server, credentials=ydb.AccessTokenCredentials(token))
        try:
            tc = driver.topic_client
            reader = tc.reader(path(topic_name), consumer="c")
            writer = tc.writer(path(topic_name), producer_id="ysvc")
            try:
                writer.write_with_ack(ydb.TopicWriterMessage(b"before"), timeout=30)
                assert [m.data for m in receive(reader, 1)] == [b"before"]
                assert time.time() < exp, "the machine is too slow for this token's lifetime"
                until(lambda: time.time() > exp + 1, "time stands still")
                with r.writer(topic_name, producer_id="root") as w:
                    w.write(b"after")
                with pytest.raises(ydb.Error, match="expired"):
                    for _ in range(30):  # bounded: each call waits at most 1 s
                        with contextlib.suppress(TimeoutError):
                            batch = reader.receive_batch(timeout=1)
                            assert b"after" not in [m.data for m in batch.messages]
                with pytest.raises(ydb.Error, match="expired"):
                    writer.write_with_ack(ydb.TopicWriterMessage(b"never"), timeout=30)
            finally:
                with contextlib.suppress(Exception):
                    reader.close(flush=False, timeout=2)  # ended already
                with contextlib.suppress(Exception):
                    writer.close(flush=False, timeout=2)  # ended already
        finally:
            driver.stop(timeout=5)
        assert r.describe_topic(topic_name).messages == 2  # before, after
