"""Idle streams stay up: the SDK pings every 10 s, and the server must let it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ydb

from tests.conftest import ServerProcess
from tests.ydb.conftest import connect, path, receive

IDLE_S = 60  # grpc's default ping policy would have sent GOAWAY after about 30 s


@pytest.fixture
def logging_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server that logs every YDB session it opens."""
    srv = ServerProcess(tmp_path / "data", "--log-level", "debug")
    srv.start()
    yield srv
    srv.kill()


def sessions(srv: ServerProcess, kind: str) -> int:
    return sum(f"ydb {kind} session" in line and "opened" in line for line in srv.log)


def test_idle_reader_and_writer_stay_connected_for_60_s(
    logging_server: ServerProcess, topic_name: str
) -> None:
    topic = path(topic_name)
    with connect(logging_server) as driver:
        tc = driver.topic_client
        tc.create_topic(topic, consumers=["idle"])
        writer = tc.writer(topic, producer_id="idle")
        reader = tc.reader(topic, consumer="idle")
        try:
            writer.write_with_ack(ydb.TopicWriterMessage(b"before"))
            assert [m.data for m in receive(reader, 1, commit=True)] == [b"before"]
            read_session = reader.read_session_id
            assert (sessions(logging_server, "write"), sessions(logging_server, "read")) == (1, 1)

            time.sleep(IDLE_S)  # idle is the point: nothing to wait for

            writer.write_with_ack(ydb.TopicWriterMessage(b"after"))
            assert [m.data for m in receive(reader, 1, commit=True)] == [b"after"]
            assert reader.read_session_id == read_session
            assert (sessions(logging_server, "write"), sessions(logging_server, "read")) == (1, 1)
            assert not [line for line in logging_server.log if "too_many_pings" in line]
        finally:
            writer.close()
            reader.close()
