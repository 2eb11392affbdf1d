"""Invalid input gets a clear YDB status the SDK understands, and stored data stays intact."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import ydb

import weir
from tests.conftest import ServerProcess
from tests.ydb.conftest import config_file, connect, path, receive


def write_some(driver: ydb.Driver, topic: str, n: int = 10) -> None:
    driver.topic_client.create_topic(topic, min_active_partitions=2, consumers=["c"])
    with driver.topic_client.writer(topic, producer_id="good") as w:
        w.write([ydb.TopicWriterMessage(b"keep%d" % i) for i in range(n)])


def still_there(driver: ydb.Driver, topic: str, n: int = 10) -> None:
    reader = driver.topic_client.reader(topic, consumer="c")
    try:
        got = receive(reader, n)
    finally:
        reader.close(flush=False)
    assert sorted(m.data for m in got) == sorted(b"keep%d" % i for i in range(n))


def test_unknown_topic_is_a_scheme_error_everywhere(driver: ydb.Driver, topic_name: str) -> None:
    tc = driver.topic_client
    missing = path(f"{topic_name}_missing")
    with pytest.raises(ydb.SchemeError, match="does not exist"):
        tc.describe_topic(missing)
    with pytest.raises(ydb.SchemeError):
        tc.drop_topic(missing)
    with pytest.raises(ydb.SchemeError):
        tc.commit_offset(missing, "c", 0, 1)
    writer = tc.writer(missing, producer_id="p")
    with pytest.raises(ydb.SchemeError, match="does not exist"):
        writer.wait_init(timeout=10)
    with pytest.raises(ydb.SchemeError):
        writer.close()
    reader = tc.reader(missing, consumer="c")
    with pytest.raises(ydb.SchemeError):
        reader.receive_message(timeout=10)
    reader.close(flush=False)


def test_bad_partitions_and_requests_are_bad_requests(driver: ydb.Driver, topic_name: str) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    write_some(driver, topic)
    for partition in (-1, 2, 99):
        writer = tc.writer(topic, producer_id=f"p{partition}", partition_id=partition)
        with pytest.raises(ydb.BadRequest, match=r"partitions 0\.\.1"):
            writer.wait_init(timeout=10)
        with pytest.raises(ydb.BadRequest):  # a stopped writer reports why on close too
            writer.close(flush=False)
    with pytest.raises(ydb.BadRequest):
        tc.create_topic(path(f"{topic_name}_neg"), min_active_partitions=-1)
    with pytest.raises(ydb.BadRequest, match="partitions"):
        tc.create_topic(path(f"{topic_name}_many"), min_active_partitions=1_000_000)
    with pytest.raises(ydb.BadRequest, match="bad topic name"):
        tc.create_topic("/local/bad name!")
    with pytest.raises(ydb.BadRequest, match="never removed"):
        tc.alter_topic(topic, set_min_active_partitions=1)
    with pytest.raises(ydb.BadRequest, match="end offset"):
        tc.commit_offset(topic, "c", 0, 1_000_000)
    with pytest.raises(ydb.BadRequest):
        tc.commit_offset(topic, "c", 0, -5)
    with pytest.raises(ydb.BadRequest, match="codec 5"):
        tc.create_topic(path(f"{topic_name}_lz4"), supported_codecs=[5])  # reserved by the API
    # a codec the topic does not accept
    tc.create_topic(path(f"{topic_name}_rawonly"), supported_codecs=[ydb.TopicCodec.RAW])
    with tc.writer(path(f"{topic_name}_rawonly"), producer_id="p") as w:
        assert w.wait_init(timeout=10).supported_codecs == [ydb.TopicCodec.RAW]
    still_there(driver, topic)


@pytest.fixture
def small_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server that takes batches of at most 1 MiB."""
    cfg = config_file(tmp_path, '[limits]\nmax_batch_bytes = "1M"\n')
    srv = ServerProcess(tmp_path / "data", "--config", str(cfg))
    srv.start()
    yield srv
    srv.kill()


def test_a_non_persistent_topic_is_refused_clearly(
    driver: ydb.Driver, shared_server: ServerProcess, topic_name: str
) -> None:
    """The YDB topic API has no non-persistent topics: its writers and readers of one
    (made through the native API) get BAD_REQUEST saying so, and nothing is stored."""
    tc = driver.topic_client
    with weir.Client(shared_server.endpoint) as c:
        c.create_topic(topic_name, partitions=2, kind="non-persistent")
        writer = tc.writer(path(topic_name), producer_id="p")
        with pytest.raises(ydb.BadRequest, match="non-persistent"):
            writer.wait_init(timeout=10)
        with pytest.raises(ydb.BadRequest):
            writer.close(flush=False)
        reader = tc.reader(path(topic_name), consumer="c")
        try:
            with pytest.raises(ydb.BadRequest, match="non-persistent"):
                reader.receive_message(timeout=10)
        finally:
            reader.close(flush=False)
        info = c.describe_topic(topic_name)
        assert info.kind == "non-persistent"
        assert sum(p.delivered_messages for p in info.partition_info) == 0


def test_oversized_message_is_refused_and_nothing_is_lost(
    small_server: ServerProcess, topic_name: str
) -> None:
    topic = path(topic_name)
    with connect(small_server) as driver:
        write_some(driver, topic)
        tc = driver.topic_client
        # many small messages in one request are fine: they are stored in several batches
        with tc.writer(topic, producer_id="bulk", codec=ydb.TopicCodec.RAW) as w:
            w.write([ydb.TopicWriterMessage(b"x" * 1000) for _ in range(3000)])
        writer = tc.writer(topic, producer_id="big", codec=ydb.TopicCodec.RAW)
        with pytest.raises(ydb.BadRequest, match="exceeds the limit"):
            writer.write_with_ack(ydb.TopicWriterMessage(b"y" * (2 << 20)))
        with pytest.raises(ydb.BadRequest):
            writer.close()
        info = tc.describe_topic(topic)
        assert sum(p.partition_stats.partition_end for p in info.partitions) == 3010
        still_there(driver, topic)


def test_garbage_bytes_on_the_port_leave_the_server_serving(
    shared_server: ServerProcess, driver: ydb.Driver, topic_name: str
) -> None:
    topic = path(topic_name)
    write_some(driver, topic)
    host, port = shared_server.endpoint.rsplit(":", 1)
    junk = [
        os.urandom(64 * 1024),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + os.urandom(4096),  # the HTTP/2 preface, then noise
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x04\x08\x00\x00\x00\x00\x00" * 100,
    ]
    for payload in junk:
        with socket.create_connection((host, int(port)), timeout=5) as s:
            try:
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
                while s.recv(65536):
                    pass
            except OSError:
                pass  # the server hung up on the noise: fine
    assert shared_server.proc is not None and shared_server.proc.poll() is None
    still_there(driver, topic)
    with driver.topic_client.writer(topic, producer_id="good") as w:
        assert w.wait_init(timeout=10).last_seqno == 10
