"""The sync writer on the native TCP port that the caller's thread drives
(`weir.client.direct_writer`): same results, order, dedup and errors as the loop's
writer, with no task of its own in the client's loop; what the caller leaves behind
(a message buffered behind one in flight, a future nobody waits on) still arrives;
a full buffer, several threads and a silent server are handled.

Restarts, authentication and TLS of this writer are in test_tcp_transport.py
(``routing="pinned"`` there takes this writer)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import weir
from tests.client.test_tcp_transport import client_of, read_all, tcp_env
from tests.conftest import ServerProcess
from weir.client.direct_writer import DirectWriterCore
from weir.errors import BadRequestError, ClosedError, DeliveryTimeoutError, UnknownNamespaceError


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("direct-writer"), env=tcp_env())
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[weir.Client]:
    with client_of(server, "tcp") as c:
        yield c


def wait_for(cond: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def writer_tasks(client: weir.Client) -> list[str]:
    loop = client._loop.loop

    async def names() -> list[str]:
        return [t.get_name() for t in asyncio.all_tasks()]

    return [n for n in asyncio.run_coroutine_threadsafe(names(), loop).result(10) if "writer" in n]


def test_results_order_and_dedup_with_no_task_in_the_loop(
    client: weir.Client, topic_name: str
) -> None:
    client.create_topic(topic_name, partitions=2)
    with client.writer(topic_name, partition=1, producer_id="d") as w:
        assert isinstance(w._core, DirectWriterCore)
        first = w.write_with_result(b"a", key="k", headers={"h": "1"})
        for i in range(5000):
            w.write(b"%d" % i)
        w.write_many([b"m1", b"m2"], keys=[b"x", None])
        futs = [w.write_future(b"f") for _ in range(3)]
        assert writer_tasks(client) == []
        w.flush()
        assert [f.result(10).offset for f in futs] == [5003, 5004, 5005]
        assert w.unacknowledged == 0
    assert (first.partition, first.offset, first.seq_no) == (1, 0, 1)
    # the producer's next writer continues its seq_nos; a resent seq_no is skipped
    with client.writer(topic_name, partition=1, producer_id="d") as w2:
        assert w2.wait_init().last_seq_no == 5006
    with client.writer(topic_name, partition=1, producer_id="m") as w3:
        w3.write_many([b"s1", b"s2"], seq_nos=[10, 11])
        with pytest.raises(BadRequestError, match="either give every message a seq_no"):
            w3.write(b"auto")
    with client.writer(topic_name, partition=1, producer_id="m") as w4:
        again = w4.write_with_result(b"again", seq_no=11)
        assert again.skipped and again.offset is None
    msgs = read_all(client, topic_name)
    assert msgs[0].key == b"k" and msgs[0].headers == {"h": "1"}
    assert [m.data for m in msgs[1:5001]] == [b"%d" % i for i in range(5000)]
    assert [m.data for m in msgs[5001:]] == [b"m1", b"m2", b"f", b"f", b"f", b"s1", b"s2"]
    assert msgs[5001].key == b"x"
    with pytest.raises(ClosedError):
        w.write(b"late")


def test_what_the_caller_leaves_behind_arrives(client: weir.Client, topic_name: str) -> None:
    """A message buffered behind one in flight, and a future nobody waits on, with the
    caller doing nothing more: the idle tick sends the one and resolves the other."""
    client.create_topic(topic_name)
    w = client.writer(topic_name, partition=0)
    try:
        w.wait_init()
        done = threading.Event()
        w.write(b"one")  # goes at once: nothing in flight
        w.write(b"two")  # waits behind it
        w.write_future(b"three").add_done_callback(lambda f: done.set())
        assert done.wait(20)
        wait_for(lambda: len(read_all(client, topic_name)) == 3)
        assert [m.data for m in read_all(client, topic_name)] == [b"one", b"two", b"three"]
    finally:
        w.close()


def test_futures_work_with_wait_as_completed_and_other_threads(
    client: weir.Client, topic_name: str
) -> None:
    """The futures of one writer share one condition (`DrivenFuture`): the standard
    helpers still see each one resolve, and a thread waiting
    on one future is not woken into a wrong answer by another's ack."""
    client.create_topic(topic_name)
    with client.writer(topic_name, partition=0) as w:
        w.wait_init()
        futs = [w.write_future(b"%d" % i) for i in range(50)]
        done, not_done = concurrent.futures.wait(futs, timeout=30)
        assert not not_done and len(done) == 50
        assert sorted(f.result().offset for f in concurrent.futures.as_completed(futs, 30)) == (
            list(range(50))
        )
        # results from other threads, while this one writes more
        more = [w.write_future(b"t%d" % i) for i in range(20)]
        got: list[int | None] = []
        waiters = [
            threading.Thread(target=lambda f=f: got.append(f.result(30).offset)) for f in more
        ]
        for t in waiters:
            t.start()
        for i in range(200):
            w.write(b"x%d" % i)
        for t in waiters:
            t.join(30)
        assert sorted(o for o in got if o is not None) == list(range(50, 70))
        calls: list[int] = []
        f = w.write_future(b"cb")
        f.add_done_callback(lambda f: calls.append(f.result().offset or 0))
        w.flush()
        assert calls == [270]


def test_a_full_buffer_waits_for_acks(client: weir.Client, topic_name: str) -> None:
    client.create_topic(topic_name)
    with client.writer(
        topic_name,
        partition=0,
        max_buffer_messages=7,
        max_batch_messages=3,
        max_inflight_requests=1,
    ) as w:
        for i in range(400):
            w.write(b"%d" % i)
            assert w.unacknowledged <= 7
    assert [int(m.data) for m in read_all(client, topic_name)] == list(range(400))


def test_threads_share_one_writer(client: weir.Client, topic_name: str) -> None:
    client.create_topic(topic_name)
    with client.writer(topic_name, partition=0) as w:

        def produce(t: int) -> None:
            for i in range(500):
                w.write(b"%d:%d" % (t, i))
                if i % 100 == 0:
                    w.write_with_result(b"%d:r%d" % (t, i), timeout=30)

        threads = [threading.Thread(target=produce, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        w.flush(timeout=30)
    by_thread: dict[bytes, list[bytes]] = {}
    for m in read_all(client, topic_name):
        t, _, i = m.data.partition(b":")
        by_thread.setdefault(t, []).append(i)
    for t in range(4):
        got = by_thread[b"%d" % t]
        assert [i for i in got if not i.startswith(b"r")] == [b"%d" % i for i in range(500)]
        assert len(got) == 505


def test_errors_are_typed(client: weir.Client) -> None:
    w = client.writer("no_such_namespace/topic", partition=0)
    with pytest.raises(UnknownNamespaceError, match="no_such_namespace does not exist"):
        w.wait_init()
    with pytest.raises(UnknownNamespaceError):
        w.write(b"x")
    w.close()


class Garbage(threading.Thread):
    """A TCP port that answers every connection with ``reply`` and closes it."""

    def __init__(self, reply: bytes) -> None:
        super().__init__(daemon=True)
        self.reply = reply
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.connections = 0

    def run(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                self.connections += 1
                with conn:
                    conn.sendall(self.reply)


@pytest.mark.parametrize(
    "reply",
    [
        b"\x00\x00\x00\x05\xff\xff\xff\xff\xff",  # a frame that is not protobuf
        b"\x7f\xff\xff\xff",  # a length of 2 GiB
        b"HTTP/1.1 400 Bad Request\r\n\r\n",  # not this protocol at all
    ],
)
def test_a_server_speaking_garbage_is_retried_then_given_up_on(
    server: ServerProcess, reply: bytes
) -> None:
    """Hostile or foreign bytes from the TCP port: a typed, retryable loss of the
    connection (never a parser's exception in the caller), then the delivery timeout."""
    garbage = Garbage(reply)
    garbage.start()
    try:
        with weir.Client(
            server.endpoint, transport="tcp", tcp_endpoint=f"127.0.0.1:{garbage.port}"
        ) as c:
            w = c.writer("t", partition=0, delivery_timeout=1.0)
            w.write(b"never acked")
            with pytest.raises(DeliveryTimeoutError, match=r"not the weir native protocol|exceeds"):
                w.flush(timeout=30)
            w.close()
        assert garbage.connections >= 2  # it reconnected
    finally:
        garbage.sock.close()


def test_a_silent_server_ends_in_the_delivery_timeout(server: ServerProcess) -> None:
    """A TCP port that accepts and never answers (a hung server): the writer gives up
    after its delivery timeout, naming it, instead of waiting for ever."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        with weir.Client(server.endpoint, transport="tcp", tcp_endpoint=f"127.0.0.1:{port}") as c:
            w = c.writer("t", partition=0, delivery_timeout=0.5)
            w.write(b"never acked")
            with pytest.raises(DeliveryTimeoutError, match="delivery_timeout"):
                w.flush(timeout=20)
            with pytest.raises(DeliveryTimeoutError):
                w.write(b"after")
            w.close()


def test_closing_the_client_closes_its_writers(server: ServerProcess, topic_name: str) -> None:
    with client_of(server, "tcp") as c:
        c.create_topic(topic_name)
        w = c.writer(topic_name, partition=0)
        assert w.write_with_result(b"kept").offset == 0
    with pytest.raises(ClosedError):
        w.write(b"after the client")
    with client_of(server, "tcp") as c:
        assert [m.data for m in read_all(c, topic_name)] == [b"kept"]


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.binary(max_size=300), st.none()),
        st.tuples(st.just("keyed"), st.binary(max_size=50), st.binary(min_size=1, max_size=8)),
        st.tuples(st.just("future"), st.binary(max_size=50), st.none()),
        st.tuples(st.just("many"), st.binary(max_size=50), st.integers(1, 40)),
        st.tuples(st.just("flush"), st.none(), st.none()),
    ),
    min_size=1,
    max_size=60,
)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=OPS, batch=st.sampled_from([1, 7, 1 << 20]))
def test_any_mix_of_calls_is_stored_in_order(
    client: weir.Client, ops: list[tuple[str, object, object]], batch: int
) -> None:
    """Whatever mix of write / keyed write / future / write_many / flush, with batches of
    1, 7 or many messages: the partition holds exactly what was written, in order, and
    each future names its message's offset."""
    topic = f"mix-{time.monotonic_ns()}"
    client.create_topic(topic)
    expected: list[tuple[bytes, bytes | None]] = []
    futures: list[tuple[int, object]] = []
    with client.writer(topic, partition=0, max_batch_messages=batch, max_inflight_requests=2) as w:
        for kind, data, extra in ops:
            if kind == "write":
                w.write(data)  # type: ignore[arg-type]
                expected.append((data, None))  # type: ignore[arg-type]
            elif kind == "keyed":
                w.write(data, key=extra)  # type: ignore[arg-type]
                expected.append((data, extra))  # type: ignore[arg-type]
            elif kind == "future":
                futures.append((len(expected), w.write_future(data)))  # type: ignore[arg-type]
                expected.append((data, None))  # type: ignore[arg-type]
            elif kind == "many":
                values = [data] * extra  # type: ignore[operator]
                w.write_many(values)
                expected.extend((v, None) for v in values)  # type: ignore[misc]
            else:
                w.flush(timeout=30)
    stored = [(m.data, m.key or None) for m in read_all(client, topic)]
    assert stored == expected
    for index, fut in futures:
        assert fut.result(10).offset == index  # type: ignore[attr-defined]
