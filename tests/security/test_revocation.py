"""A revoked user's open streams end as soon as the change is made, not at the next login:
deleting the user, changing its password or revoking the grant a stream uses ends the
write and read sessions of the native front and of the YDB front with the reason, and other
streams go on; a deleted user's Kafka connection is closed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import ydb
from confluent_kafka import KafkaError, Producer

import weir
from tests.conftest import ServerProcess
from tests.security.conftest import ROOT, ROOT_PW, superuser_server
from tests.ydb.conftest import connect, path, receive
from weir.errors import PermissionDeniedError, UnauthorizedError

PW = "stream-user-password"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = superuser_server(tmp_path_factory, "revocation", WEIR_NATIVE_TCP_ENABLED="true")
    yield srv
    srv.stop()


def setup_user(srv: ServerProcess, user: str, topic: str) -> weir.Client:
    """A topic with one message, and ``user`` allowed to produce and consume it."""
    root = weir.Client(srv.endpoint, credentials=(ROOT, ROOT_PW))
    root.create_topic(topic, partitions=1, consumers=["c"])
    with root.writer(topic, producer_id="seed") as w:
        w.write(b"seed")
    root.add_user(user, PW)
    root.grant(user, "produce", topic)
    root.grant(user, "consume", topic)
    return root


@pytest.mark.parametrize("transport", ["grpc", "tcp"])
def test_revoking_a_grant_ends_the_stream_that_uses_it(
    server: ServerProcess, topic_name: str, transport: str
) -> None:
    """On the gRPC port and on the native TCP port (``transport="tcp"``: the reader's and
    the writer's streams go there)."""
    user = f"rita-{transport}"
    root = setup_user(server, user, topic_name)
    try:
        with weir.Client(
            server.endpoint,
            credentials=(user, PW),
            transport=transport,
            tcp_endpoint=server.native_tcp if transport == "tcp" else None,
        ) as c:
            reader = c.reader(topic_name, consumer="c")
            writer = c.writer(topic_name, producer_id=user)
            try:
                assert reader.receive_batch(timeout=30) is not None
                writer.write(b"one")
                writer.flush(timeout=30)
                assert root.revoke(user, "consume", topic_name)
                # the read session ends with the reason; waiting for more data does not hang
                with pytest.raises(PermissionDeniedError, match=f"read topic '{topic_name}'"):
                    for _ in range(100):  # bounded: each call waits at most 5 s
                        reader.receive_batch(timeout=5)
                # the write session does not need the consume grant: it goes on
                writer.write(b"two")
                writer.flush(timeout=30)
                assert root.revoke(user, "produce", topic_name)
                with pytest.raises(PermissionDeniedError, match=f"write to topic '{topic_name}'"):
                    for _ in range(100):
                        writer.write(b"three")
                        writer.flush(timeout=30)
            finally:
                reader.close()
                writer.close()
        assert root.describe_topic(topic_name).messages == 3  # seed, one, two
    finally:
        root.close()


@pytest.mark.parametrize("change", ["delete", "passwd"])
def test_deleting_a_user_or_changing_its_password_ends_its_streams(
    server: ServerProcess, topic_name: str, change: str
) -> None:
    user = f"sam-{change}"
    root = setup_user(server, user, topic_name)
    try:
        with weir.Client(server.endpoint, credentials=(user, PW)) as c:
            reader = c.reader(topic_name, consumer="c")
            try:
                assert reader.receive_batch(timeout=30) is not None
                if change == "delete":
                    root.delete_user(user)
                else:
                    root.set_password(user, "a-new-password-9")
                # the stream ends; the SDK's login again with the old password is refused
                with pytest.raises(UnauthorizedError):
                    for _ in range(100):
                        reader.receive_batch(timeout=5)
            finally:
                reader.close()
        # other users' streams are not touched
        with root.reader(topic_name, consumer="c2") as r:
            assert r.receive_batch(timeout=30) is not None
    finally:
        root.close()


# ---------------------------------------------------------------------------- the ydb SDK


def test_revoking_ends_the_ydb_sdk_read_and_write_sessions(
    server: ServerProcess, topic_name: str
) -> None:
    """The YDB front's streams end like the native ones: inside the revoke, so a topic writer
    of the real `ydb` SDK writes nothing once the revoke's answer has landed."""
    root = setup_user(server, "yuri", topic_name)
    topic = path(topic_name)
    try:
        driver = connect(server, credentials=ydb.StaticCredentials.from_user_password("yuri", PW))
        try:
            tc = driver.topic_client
            reader = tc.reader(topic, consumer="c")
            writer = tc.writer(topic, producer_id="yuri")
            try:
                assert [m.data for m in receive(reader, 1)] == [b"seed"]
                writer.write_with_ack(ydb.TopicWriterMessage(b"one"), timeout=30)
                assert root.revoke("yuri", "consume", topic_name)
                # the read session ends with the reason; waiting for more does not hang
                with pytest.raises(
                    ydb.Error, match=rf"read topic .*{topic_name}.* consume permission"
                ):
                    for _ in range(20):  # bounded: each call waits at most 5 s
                        reader.receive_batch(timeout=5)
                # the write session does not need the consume grant: it goes on
                writer.write_with_ack(ydb.TopicWriterMessage(b"two"), timeout=30)
                assert root.revoke("yuri", "produce", topic_name)
                # the revoke has answered: this write is refused, not stored
                with pytest.raises(
                    ydb.Error, match=rf"write to topic .*{topic_name}.* produce perm"
                ):
                    writer.write_with_ack(ydb.TopicWriterMessage(b"three"), timeout=30)
            finally:
                with contextlib.suppress(Exception):
                    reader.close(flush=False, timeout=10)
                with contextlib.suppress(Exception):
                    writer.close(flush=False, timeout=10)
        finally:
            driver.stop(timeout=5)
        assert root.describe_topic(topic_name).messages == 3  # seed, one, two
    finally:
        root.close()


# ---------------------------------------------------------------------------- Kafka


def test_deleting_a_user_closes_its_kafka_connection(
    server: ServerProcess, topic_name: str
) -> None:
    """confluent-kafka with SASL PLAIN: once the user is deleted its connection is closed
    and its reconnect refused, so a message produced after the delete is not stored."""
    root = setup_user(server, "kim", topic_name)
    # every principal may produce here: what stops kim is the end of its login, not a grant
    root.grant("*", "produce", topic_name)
    try:
        conf = {
            "bootstrap.servers": server.kafka,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "kim",
            "sasl.password": PW,
        }
        producer = Producer({**conf, "message.timeout.ms": 5000, "linger.ms": 0})
        reports: list[KafkaError | None] = []
        producer.produce(topic_name, b"one", on_delivery=lambda err, _m: reports.append(err))
        producer.flush(30)
        assert reports == [None]
        root.delete_user("kim")
        producer.produce(topic_name, b"never", on_delivery=lambda err, _m: reports.append(err))
        producer.flush(30)
        assert len(reports) == 2 and reports[1] is not None  # not delivered
        assert root.describe_topic(topic_name).messages == 2  # seed, one
    finally:
        root.close()
