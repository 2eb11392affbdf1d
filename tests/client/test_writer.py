"""The SDK writer against a real server: buffering, acks, results, seq_nos, restarts."""

from __future__ import annotations

import contextlib
import datetime as dt
import signal
import threading
from collections.abc import Iterator

import pytest

import weir
from tests.conftest import ServerProcess
from weir.errors import (
    BadRequestError,
    ClosedError,
    MessageTooLargeError,
    UnknownNamespaceError,
    WeirTimeoutError,
)


def read_all(client: weir.Client, topic: str) -> list[weir.Message]:
    info = client.describe_topic(topic)
    out: list[weir.Message] = []
    for p in info.partition_info:
        for chunk in client.read_range(topic, p.partition, p.start_offset, p.end_offset):
            out.extend(m for m in chunk.messages() if m.offset >= p.start_offset)
    return out


@pytest.fixture
def client(shared_server: ServerProcess) -> weir.Client:
    c = weir.Client(shared_server.endpoint)
    yield c
    c.close()


def test_write_flush_and_read_back_everything(client: weir.Client, topic_name: str) -> None:
    client.create_topic(topic_name, partitions=2)
    created = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    # pinned: every message, keyed or not, in the producer's one partition, one seq_no run
    with client.writer(topic_name, producer_id="p1", routing="pinned") as w:
        for i in range(5000):
            w.write(f"m{i}".encode(), key=f"k{i % 3}", headers={"n": str(i)} if i % 2 else None)
        w.write("text is utf-8", created_at=created)
        w.flush()
        assert w.partition in (0, 1)
    msgs = read_all(client, topic_name)
    assert [m.data for m in msgs[:-1]] == [f"m{i}".encode() for i in range(5000)]
    assert [m.seq_no for m in msgs] == list(range(1, 5002))
    assert msgs[7].key == b"k1" and msgs[7].headers == {"n": "7"} and msgs[8].headers == {}
    assert msgs[-1].data == b"text is utf-8" and msgs[-1].created_at == created
    assert all(m.producer_id == "p1" for m in msgs)
    assert [m.offset for m in msgs] == list(range(5001))


def test_write_with_result_and_future(client: weir.Client, topic_name: str) -> None:
    client.create_topic(topic_name, partitions=4)
    w = client.writer(topic_name, producer_id="results")
    r1 = w.write_with_result(b"a")
    futs = [w.write_future(b"x") for _ in range(10)]
    results = [f.result(10) for f in futs]
    assert r1.offset == 0 and r1.seq_no == 1 and not r1.skipped
    assert [r.offset for r in results] == list(range(1, 11))
    assert {r.partition for r in [r1, *results]} == {w.partition}
    w.close()


def test_seq_nos_continue_after_reconnect_and_resent_ones_are_skipped(
    client: weir.Client, topic_name: str
) -> None:
    client.create_topic(topic_name)
    with client.writer(topic_name, producer_id="svc") as w:
        for _ in range(10):
            w.write(b"first")
    w2 = client.writer(topic_name, producer_id="svc").wait_init()
    assert w2.last_seq_no == 10
    assert w2.write_with_result(b"next").seq_no == 11
    w2.close()
    # caller-supplied seq_nos: the ones already stored are reported as skipped
    w3 = client.writer(topic_name, producer_id="svc")
    skipped = w3.write_with_result(b"again", seq_no=5)
    fresh = w3.write_with_result(b"new", seq_no=20)
    assert skipped.skipped and skipped.offset is None
    assert not fresh.skipped and fresh.offset == 11 and fresh.seq_no == 20
    with pytest.raises(BadRequestError, match="not above"):
        w3.write(b"backwards", seq_no=19)
    with pytest.raises(BadRequestError, match="every message a seq_no or none"):
        w3.write(b"auto")
    w3.close()
    assert len(read_all(client, topic_name)) == 12


@contextlib.contextmanager
def paused(srv: ServerProcess) -> Iterator[None]:
    """The server process stopped (SIGSTOP): connections stay open, nothing is acknowledged."""
    assert srv.proc is not None
    srv.proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        srv.proc.send_signal(signal.SIGCONT)


def test_write_blocks_while_the_buffer_is_full_and_resumes_on_acks(
    shared_server: ServerProcess, topic_name: str
) -> None:
    c = weir.Client(shared_server.endpoint)
    c.create_topic(topic_name)
    w = c.writer(topic_name, producer_id="slow", max_buffer_messages=100).wait_init()
    entered, done = threading.Event(), threading.Event()

    def more() -> None:
        entered.set()
        w.write(b"beyond the bound")  # blocks until acks free space
        done.set()

    t = threading.Thread(target=more, daemon=True)
    with paused(shared_server):  # no acks while the buffer fills
        for i in range(100):
            w.write(b"%d" % i)  # up to the bound: none of these waits
        t.start()
        assert entered.wait(10)
        # a negative check: a write that does not block returns within microseconds, so a
        # second is ample; a slow machine can only make this pass, never fail wrongly
        assert not done.wait(1.0), "write() returned with the buffer full and nothing acked"
        assert t.is_alive()
    assert done.wait(60), "write() did not resume once the server acknowledged"
    t.join()
    w.close()
    assert [m.data for m in read_all(c, topic_name)] == [
        *(b"%d" % i for i in range(100)),
        b"beyond the bound",
    ]
    c.close()


def test_full_buffer_times_out_with_a_clear_error(
    shared_server: ServerProcess, topic_name: str
) -> None:
    c = weir.Client(shared_server.endpoint)
    c.create_topic(topic_name)
    w = c.writer(topic_name, producer_id="stuck", max_buffer_messages=5).wait_init()
    with paused(shared_server):  # the server answers nothing
        for i in range(5):
            w.write(b"%d" % i)
        with pytest.raises(WeirTimeoutError, match="buffer full"):
            w.write(b"one too many", timeout=0.3)
    w.close(timeout=30)
    # the write that timed out was not buffered: it is not sent later behind the caller's back
    assert [m.data for m in read_all(c, topic_name)] == [b"%d" % i for i in range(5)]
    c.close()


def test_close_waits_for_unacked_then_refuses(client: weir.Client, topic_name: str) -> None:
    client.create_topic(topic_name)
    w = client.writer(topic_name, producer_id="closer")
    for i in range(20_000):
        w.write(b"%d" % i)
    w.close()  # returns only after every message is acknowledged
    assert sum(p.end_offset for p in client.describe_topic(topic_name).partition_info) == 20_000
    with pytest.raises(ClosedError):
        w.write(b"late")
    with pytest.raises(ClosedError):
        w.flush()
    w.close()  # closing twice is fine


def test_big_writes_are_split_under_the_request_limit(client: weir.Client, topic_name: str) -> None:
    client.create_topic(topic_name)
    blob = b"z" * (3 << 20)
    with client.writer(
        topic_name, producer_id="big", max_request_bytes=4 << 20, max_batch_bytes=1 << 20
    ) as w:
        for _ in range(6):
            w.write(blob)
    msgs = read_all(client, topic_name)
    assert [len(m.data) for m in msgs] == [len(blob)] * 6


def test_bad_input_is_refused_clearly(client: weir.Client, topic_name: str) -> None:
    client.create_topic(topic_name)
    w = client.writer(topic_name, producer_id="bad", max_message_bytes=1000)
    with pytest.raises(BadRequestError, match="bytes or str"):
        w.write(12345)  # type: ignore[arg-type]
    with pytest.raises(MessageTooLargeError):
        w.write(b"x" * 1001)
    with pytest.raises(BadRequestError, match="headers"):
        w.write(b"x", headers=[("a", "b")])  # type: ignore[arg-type]
    w.close()
    # an unknown topic is created on first use, but only in a namespace that exists
    w = client.writer("no_such_namespace/topic", producer_id="x")
    with pytest.raises(UnknownNamespaceError, match="no_such_namespace does not exist"):
        w.wait_init()
    with pytest.raises(UnknownNamespaceError):
        w.write(b"x")
    w.close()


def test_server_restart_mid_stream_loses_and_duplicates_nothing(
    server: ServerProcess, topic_name: str
) -> None:
    c = weir.Client(server.endpoint)
    c.create_topic(topic_name, partitions=2)
    w = c.writer(topic_name, producer_id="survivor")
    n = 0
    for _ in range(5):
        for _ in range(2000):
            w.write(b"%d" % n)
            n += 1
        server.restart()  # clean stop and start on the same port, messages in flight
        # until the writer is through, before the next restart: a loaded machine takes ~20 s
        # per restart, and five back to back outlast the 60 s delivery timeout, which then
        # fails the writer as it should
        w.flush(timeout=60)
    w.close()
    msgs = read_all(c, topic_name)
    assert sorted(int(m.data) for m in msgs) == list(range(n))
    assert [int(m.data) for m in msgs] == list(range(n))  # one producer, one partition: in order
    c.close()


def test_kill_9_mid_stream_loses_and_duplicates_nothing(
    server: ServerProcess, topic_name: str
) -> None:
    c = weir.Client(server.endpoint)
    c.create_topic(topic_name)
    w = c.writer(topic_name, producer_id="killed")
    n = 0
    for _ in range(3):
        for _ in range(3000):
            w.write(b"%d" % n)
            n += 1
        server.kill()
        server.start()
    w.flush(timeout=60)
    w.close()
    assert [int(m.data) for m in read_all(c, topic_name)] == list(range(n))
    c.close()


def test_write_many_buffers_columns_at_once(client: weir.Client, topic_name: str) -> None:
    client.create_topic(topic_name)
    with client.writer(topic_name, producer_id="bulk") as w:
        w.write_many([b"a%d" % i for i in range(1000)], keys=[f"k{i % 3}" for i in range(1000)])
        w.write_many(["text"], headers=[{"h": "1"}], created_at=1_700_000_000_000)
        w.write(b"single")
    msgs = read_all(client, topic_name)
    assert [m.data for m in msgs[:1000]] == [b"a%d" % i for i in range(1000)]
    assert msgs[4].key == b"k1" and [m.seq_no for m in msgs] == list(range(1, 1003))
    assert msgs[1000].data == b"text" and msgs[1000].headers == {"h": "1"}
    assert msgs[1000].created_at_ms == 1_700_000_000_000 and msgs[1001].data == b"single"
    w2 = client.writer(topic_name, producer_id="bulk2")
    with pytest.raises(BadRequestError, match="entries for"):
        w2.write_many([b"x", b"y"], keys=[b"k"])
    with pytest.raises(BadRequestError, match="strictly increasing"):
        w2.write_many([b"x", b"y"], seq_nos=[5, 5])
    w2.write_many([b"x", b"y"], seq_nos=[5, 9])
    with pytest.raises(BadRequestError, match="not above"):
        w2.write_many([b"z"], seq_nos=[9])
    w2.close()


def test_writer_survives_kill_9_while_sending(server: ServerProcess, topic_name: str) -> None:
    """Regressions, both found by kills while the in-flight window is full:
    - the sender waited for acks of requests sent on the dead stream and was not woken
      when the new stream came up, so it never resent them: write() blocked for good;
    - grpc.aio raised CancelledError inside a stream write the session loop had cancelled,
      and the sender task died."""
    c = weir.Client(server.endpoint)
    c.create_topic(topic_name)
    w = c.writer(topic_name, producer_id="busy")
    payload = b"x" * 2000
    n = 0
    try:
        for _ in range(8):
            sent_before_kill = n + 10_000
            while n < sent_before_kill:  # the buffer stays full: the sender is always writing
                w.write(payload + b"%d" % n, timeout=30)  # raised when the sender had died
                n += 1
            server.kill()
            server.start()
        w.flush(timeout=60)
    finally:
        w.close(timeout=10)
    got = [int(m.data[2000:]) for m in read_all(c, topic_name)]
    assert got == list(range(n))
    c.close()
