"""The SDK reader: consumers, committed offsets, partition sharing, start positions, asyncio twin."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import weir
import weir.aio
from tests.conftest import ServerProcess
from weir.errors import BadRequestError, ClosedError, UnknownNamespaceError, WeirTimeoutError


@pytest.fixture
def client(shared_server: ServerProcess) -> weir.Client:
    c = weir.Client(shared_server.endpoint)
    yield c
    c.close()


def fill(client: weir.Client, topic: str, n: int, partitions: int = 1, producers: int = 1) -> None:
    client.create_topic(topic, partitions=partitions)
    writers = [client.writer(topic, producer_id=f"w{i}") for i in range(producers)]
    for i in range(n):
        writers[i % producers].write(b"%d" % i)
    for w in writers:
        w.close()


def take(reader: weir.Reader, n: int, timeout: float = 20) -> list[weir.Message]:
    out: list[weir.Message] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        b = reader.receive_batch(timeout=0.5)
        if b is not None:
            out.extend(b)
    return out


def test_consumer_resumes_at_committed_offset(client: weir.Client, topic_name: str) -> None:
    fill(client, topic_name, 1000)
    r = client.reader(topic_name, consumer="billing")
    first = take(r, 400)
    assert [int(m.data) for m in first][:400] == list(range(400))
    r.commit_with_ack(first[399])
    r.close()
    assert client.describe_consumer(topic_name, "billing").partitions[0].committed_offset == 400
    r = client.reader(topic_name, consumer="billing")
    rest = take(r, 600)
    assert [int(m.data) for m in rest] == list(range(400, 1000))
    r.commit(rest[-1])  # fire and forget; close waits for its ack
    r.close()
    info = client.describe_consumer(topic_name, "billing")
    assert info.partitions[0].committed_offset == 1000 and info.lag == 0
    with pytest.raises(ClosedError):
        r.receive_batch(timeout=0.1)


def test_iterating_a_reader_mixes_with_receive_message(
    client: weir.Client, topic_name: str
) -> None:
    """``for m in reader`` builds messages one at a time; breaking out of it and calling
    receive_message (or iterating again) goes on from the next message, none skipped."""
    fill(client, topic_name, 3000)
    with client.reader(topic_name, start="earliest") as r:
        got: list[int] = []
        for m in r:
            got.append(int(m.data))
            if len(got) in (5, 1500):
                break
        first = r.receive_message(timeout=20)
        assert first is not None
        got.append(int(first.data))
        for m in r:
            got.append(int(m.data))
            if len(got) == 1500:
                break
        while len(got) < 3000:
            nxt = r.receive_message(timeout=20)
            assert nxt is not None
            got.append(int(nxt.data))
        assert got == list(range(3000))


async def test_async_iteration_mixes_with_receive_message(
    shared_server: ServerProcess, topic_name: str
) -> None:
    """The asyncio twin of the test above."""
    async with weir.aio.Client(shared_server.endpoint) as c:
        await c.create_topic(topic_name)
        w = c.writer(topic_name)
        await w.write_many([b"%d" % i for i in range(3000)])
        await w.close()
        r = c.reader(topic_name, start="earliest")
        got: list[int] = []
        async for m in r:
            got.append(int(m.data))
            if len(got) in (5, 1500):
                break
        first = await r.receive_message(timeout=20)
        assert first is not None
        got.append(int(first.data))
        async for m in r:
            got.append(int(m.data))
            if len(got) == 1500:
                break
        while len(got) < 3000:
            nxt = await r.receive_message(timeout=20)
            assert nxt is not None
            got.append(int(nxt.data))
        await r.close()
        assert got == list(range(3000))


def test_two_readers_share_partitions_and_nothing_is_read_twice_after_commit(
    client: weir.Client, topic_name: str
) -> None:
    fill(client, topic_name, 4000, partitions=4, producers=8)
    a = client.reader(topic_name, consumer="group").wait_connected()
    b = client.reader(topic_name, consumer="group").wait_connected()
    seen: dict[int, int] = {}
    deadline = time.monotonic() + 30
    while len(seen) < 4000 and time.monotonic() < deadline:
        for r in (a, b):
            batch = r.receive_batch(timeout=0.2)
            if batch is not None:
                for m in batch:
                    seen[int(m.data)] = seen.get(int(m.data), 0) + 1
                r.commit_with_ack(batch)
    assert sorted(seen) == list(range(4000))
    assert all(c == 1 for c in seen.values())
    parts_a = {p.partition for p in a.partitions}
    parts_b = {p.partition for p in b.partitions}
    assert parts_a and parts_b and not parts_a & parts_b and parts_a | parts_b == {0, 1, 2, 3}
    a.close()
    # b takes over a's partitions and finds nothing new: everything was committed
    deadline = time.monotonic() + 20
    while len(b.partitions) < 4 and time.monotonic() < deadline:
        assert b.receive_batch(timeout=0.2) is None
    assert len(b.partitions) == 4
    b.close()
    assert client.describe_consumer(topic_name, "group").lag == 0


def test_start_positions_and_read_from_time(client: weir.Client, topic_name: str) -> None:
    fill(client, topic_name, 100)
    cut = client.describe_topic(topic_name).partition_info[0].last_write_ms + 1
    while time.time() * 1000 < cut:  # the next writes must land in a later millisecond
        time.sleep(0.001)
    with client.writer(topic_name, producer_id="w0") as w:
        for i in range(100, 150):
            w.write(b"%d" % i)
    r = client.reader(topic_name, consumer="late", start="latest").wait_connected()
    assert r.receive_batch(timeout=0.3) is None
    with client.writer(topic_name, producer_id="w0") as w:
        w.write(b"150")
    assert [int(m.data) for m in take(r, 1)] == [150]
    r.close()
    r = client.reader(topic_name, read_from=cut)  # no consumer: from the time on, all partitions
    assert [int(m.data) for m in take(r, 51)] == list(range(100, 151))
    r.close()
    r = client.reader(topic_name, start="earliest")
    msgs = take(r, 151)
    assert len(msgs) == 151
    with pytest.raises(BadRequestError, match="without a consumer"):
        r.commit_with_ack(msgs[-1])
    r.close()


def test_unknown_topic_is_a_clear_error(client: weir.Client) -> None:
    # an unknown topic is created on first use, but only in a namespace that exists
    r = client.reader("does_not_exist/topic", consumer="c")
    with pytest.raises(UnknownNamespaceError, match="does_not_exist does not exist"):
        r.receive_batch(timeout=10)
    r.close()


async def test_asyncio_twin(shared_server: ServerProcess, topic_name: str) -> None:
    async with weir.aio.Client(shared_server.endpoint) as client:
        await client.create_topic(topic_name, partitions=2)
        async with client.writer(topic_name, producer_id="aio") as w:
            for i in range(300):
                await w.write(b"%d" % i, headers={"i": str(i)})
            res = await w.write_with_result(b"300")
            assert res.offset == 300 and res.seq_no == 301
        reader = client.reader(topic_name, consumer="aio-c")
        got: list[weir.Message] = []
        async for m in reader:
            got.append(m)
            if len(got) == 301:
                break
        await reader.commit_with_ack(got[-1])
        await reader.close()
        assert [int(m.data) for m in got] == list(range(301))
        assert got[5].headers == {"i": "5"}
        info = await client.describe_consumer(topic_name, "aio-c")
        assert info.lag == 0
        chunks = [c async for c in client.read_range(topic_name, res.partition, 0)]
        assert sum(len(c.messages()) for c in chunks) == 301


async def test_async_writer_buffer_bound_and_timeout(
    shared_server: ServerProcess, topic_name: str
) -> None:
    async with weir.aio.Client(shared_server.endpoint) as client:
        await client.create_topic(topic_name)
        w = client.writer(topic_name, producer_id="bounded", max_buffer_messages=10)
        await asyncio.gather(*(w.write(b"x") for _ in range(200)))
        await w.flush()
        await w.close()
        info = await client.describe_topic(topic_name)
        assert info.messages == 200


def test_commits_and_credits_interleave_on_one_stream(client: weir.Client, topic_name: str) -> None:
    """Regression: credits (after every batch, with a tiny buffer) and commits (after every
    message) were written to the stream from two tasks at once; grpc.aio answered with
    'Internal error from Core' and the session died. One writer per stream now."""
    fill(client, topic_name, 6000, partitions=4, producers=4)
    r = client.reader(topic_name, consumer="eager", buffer_bytes=512)
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 6000 and time.monotonic() < deadline:
        b = r.receive_batch(timeout=0.5)
        if b is None:
            continue
        for m in b:
            got.append(int(m.data))
            r.commit(m)
    r.close()  # waits for the acks of every commit made before it
    assert sorted(got) == list(range(6000))
    info = client.describe_consumer(topic_name, "eager")
    assert info.lag == 0 and sum(p.committed_offset for p in info.partitions) == 6000


def test_a_reader_keeps_order_while_its_caller_lags_and_races(
    client: weir.Client, topic_name: str
) -> None:
    """The sync reader's batches reach its caller through a hand-off at most one batch
    ahead, and the loop is woken only when that is full: a caller that sometimes lags
    (so the hand-off fills) and sometimes waits (so it is empty) gets every message once,
    in order, with a buffer so small that credit goes back after almost every batch."""
    client.create_topic(topic_name)
    n = 6000
    with client.writer(topic_name) as w:
        for i in range(n):
            w.write(b"%d" % i)
            if i % 7 == 6:
                w.flush()  # stored batches of 7: many small batches to hand over
    r = client.reader(topic_name, consumer="lags", buffer_bytes=256)
    got: list[int] = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        b = r.receive_batch(timeout=0.5 if len(got) % 3 else 0)
        if b is None:
            continue
        got.extend(int(m.data) for m in b)
        if len(got) % 5 == 0:
            sum(range(20_000))  # the caller lags: the task fills the hand-off and waits
    r.commit_with_ack(b)
    r.close()
    assert got == list(range(n))
    assert client.describe_consumer(topic_name, "lags").lag == 0


def test_closing_a_reader_wakes_the_callers_waiting_in_other_threads(
    client: weir.Client, topic_name: str
) -> None:
    client.create_topic(topic_name)
    r = client.reader(topic_name, consumer="waits").wait_connected()
    outcome: list[BaseException | object] = []

    def wait() -> None:
        try:
            outcome.append(r.receive_batch())  # no timeout: only close() ends it
        except BaseException as exc:  # the outcome is what is checked
            outcome.append(exc)

    waiting = [threading.Thread(target=wait) for _ in range(2)]
    for t in waiting:
        t.start()
    assert r.receive_batch(timeout=0.2) is None  # nothing there; the callers still wait
    r.close()
    for t in waiting:
        t.join(10)
        assert not t.is_alive(), "a waiting caller was never woken"
    assert len(outcome) == 2 and all(isinstance(o, ClosedError) for o in outcome), outcome
    with pytest.raises(ClosedError, match="closed"):
        r.receive_batch(timeout=0)


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path / "data").start()
    yield server
    server.kill()


@contextlib.contextmanager
def paused(server: ServerProcess) -> Iterator[None]:
    """The server process stopped (SIGSTOP): connected, but it answers nothing."""
    assert server.proc is not None
    server.proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        server.proc.send_signal(signal.SIGCONT)


def test_commit_with_ack_times_out_with_a_typed_retryable_error(own_server: ServerProcess) -> None:
    """A server that stops answering must not leak a bare TimeoutError from commit_with_ack
    (the soak's consumers died of one): it is WeirTimeoutError, retryable, and the commit
    lands once the server answers again."""
    with weir.Client(own_server.endpoint) as client:
        fill(client, "paused", 10)
        r = client.reader("paused", consumer="c")
        msgs = take(r, 10)
        with paused(own_server), pytest.raises(WeirTimeoutError, match="not acknowledged") as e:
            r.commit_with_ack(msgs[4], timeout=0.5)
        assert e.value.retryable
        r.commit_with_ack(msgs[-1], timeout=30)
        r.close()
        assert client.describe_consumer("paused", "c").partitions[0].committed_offset == 10


async def test_async_commit_with_ack_times_out_with_a_typed_retryable_error(
    own_server: ServerProcess,
) -> None:
    async with weir.aio.Client(own_server.endpoint) as client:
        await client.create_topic("paused")
        async with client.writer("paused", producer_id="p") as w:
            for i in range(10):
                await w.write(b"%d" % i)
        reader = client.reader("paused", consumer="c")
        got: list[weir.Message] = []
        async for m in reader:
            got.append(m)
            if len(got) == 10:
                break
        with paused(own_server), pytest.raises(WeirTimeoutError, match="not acknowledged") as e:
            await reader.commit_with_ack(got[4], timeout=0.5)
        assert e.value.retryable
        await reader.commit_with_ack(got[-1], timeout=30)
        await reader.close()
        info = await client.describe_consumer("paused", "c")
        assert info.partitions[0].committed_offset == 10


async def test_a_stream_naming_partitions_reads_only_those_and_refuses_unknown_ones(
    shared_server: ServerProcess, topic_name: str
) -> None:
    """`ReadInit.partitions` (what a cluster's reader sends each owner): only the named
    partitions are assigned; a partition the topic lacks, or of a topic the stream does
    not read, fails the reader with a typed error, and the stored data stays readable."""
    from weir.client.reader import ReaderCore
    from weir.errors import UnknownPartitionError

    async with weir.aio.Client(shared_server.endpoint) as client:
        await client.create_topic(topic_name, partitions=3)
        for p in range(3):
            async with client.writer(topic_name, producer_id=f"w{p}", partition=p) as w:
                await w.write(b"m%d" % p)
        core = ReaderCore(client.conn, [topic_name], partitions=[(topic_name, 1)])
        core.start_session()
        try:
            batch = await core.receive_batch(timeout=20)
            assert batch is not None and (batch.partition, batch.messages[0].data) == (1, b"m1")
            assert [ps.partition for ps in core.partitions] == [1]
        finally:
            await core.close()
        for named, error in (
            ([(topic_name, 7)], UnknownPartitionError),
            ([("other-topic", 0)], BadRequestError),
        ):
            core = ReaderCore(client.conn, [topic_name], partitions=named)
            core.start_session()
            try:
                with pytest.raises(error):
                    await core.receive_batch(timeout=20)
            finally:
                await core.close()
        reader = client.reader(topic_name)  # one broker serves them all: one plain stream
        try:
            got = set()
            while len(got) < 3:
                msg = await reader.receive_message(timeout=20)
                assert msg is not None
                got.add((msg.partition, msg.data))
            assert got == {(p, b"m%d" % p) for p in range(3)}
            assert len(reader._core._cores) == 1  # type: ignore[union-attr]
            assert reader._core._cores[0].named == []  # type: ignore[union-attr]
        finally:
            await reader.close()
