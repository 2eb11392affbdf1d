"""Static credentials: Auth.Login with the users of the config, tickets on every call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import ydb
from ydb._grpc.common import ydb_topic_v1_pb2_grpc
from ydb._grpc.common.protos import ydb_topic_pb2
from ydb._grpc.common.protos.ydb_status_codes_pb2 import StatusIds

from tests.conftest import ServerProcess
from tests.ydb.conftest import config_file, connect, path, receive, reconnected

CONFIG = """
[auth]
users = { alice = "wonderland", bob = "builder" }
allow_anonymous = false
"""


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path / "data", "--config", str(config_file(tmp_path, CONFIG)))
    srv.start()
    yield srv
    srv.kill()


def login(user: str, password: str) -> ydb.StaticCredentials:
    return ydb.StaticCredentials.from_user_password(user, password)


def test_static_user_writes_and_reads_and_its_ticket_survives_a_restart(
    auth_server: ServerProcess, topic_name: str
) -> None:
    topic = path(topic_name)
    driver = connect(auth_server, credentials=login("alice", "wonderland"))
    try:
        tc = driver.topic_client
        tc.create_topic(topic, consumers=["c"])
        with tc.writer(topic, producer_id="alice") as w:
            w.write(ydb.TopicWriterMessage(b"before"))
        # The driver keeps the ticket it got before the restart: it is still good.
        auth_server.restart()
        info = reconnected(lambda: tc.describe_topic(topic))
        assert info.partitions[0].partition_stats.partition_end == 1
        with tc.writer(topic, producer_id="alice") as w:
            w.write(ydb.TopicWriterMessage(b"after"))
        reader = tc.reader(topic, consumer="c")
        try:
            assert [m.data for m in receive(reader, 2, commit=True)] == [b"before", b"after"]
        finally:
            reader.close()
    finally:
        driver.stop(timeout=5)


def test_bad_password_and_unknown_user_are_refused_as_unauthorized(
    auth_server: ServerProcess,
) -> None:
    for creds in (login("alice", "wrong"), login("mallory", "wonderland")):
        with pytest.raises(ydb.issues.ConnectionFailure, match="400020"):
            connect(auth_server, credentials=creds)


def test_anonymous_calls_are_refused_when_not_allowed(
    auth_server: ServerProcess, topic_name: str
) -> None:
    with pytest.raises(ydb.issues.ConnectionFailure, match="authentication required"):
        connect(auth_server)
    # Past discovery, every call needs a ticket: a raw client that skips Login is refused.
    with grpc.insecure_channel(auth_server.endpoint) as channel:
        stub = ydb_topic_v1_pb2_grpc.TopicServiceStub(channel)
        resp = stub.CreateTopic(ydb_topic_pb2.CreateTopicRequest(path=path(topic_name)))
        assert resp.operation.status == StatusIds.UNAUTHORIZED
        init = ydb_topic_pb2.StreamWriteMessage.FromClient(
            init_request=ydb_topic_pb2.StreamWriteMessage.InitRequest(
                path=path(topic_name), producer_id="anon"
            )
        )
        first = next(iter(stub.StreamWrite(iter([init]))))
        assert first.status == StatusIds.UNAUTHORIZED
        assert "authentication required" in first.issues[0].message


def test_anonymous_is_allowed_by_default_but_a_forged_ticket_is_not(
    shared_server: ServerProcess, topic_name: str
) -> None:
    driver = connect(shared_server)  # no credentials: the default config allows it
    try:
        driver.topic_client.create_topic(path(topic_name))
    finally:
        driver.stop(timeout=5)
    forged = ydb.Driver(
        endpoint=f"grpc://{shared_server.endpoint}",
        database="/local",
        credentials=ydb.AccessTokenCredentials("YWxpY2U.99999999999999.forged"),
    )
    try:
        with pytest.raises(ydb.issues.ConnectionFailure, match="invalid auth ticket"):
            forged.wait(timeout=10, fail_fast=True)
    finally:
        forged.stop(timeout=5)
