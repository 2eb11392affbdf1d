"""Transactions through the native SDK (sync and asyncio twins) against a real server:
commit and abort across three topics of several partitions, read-committed and
read-uncommitted readers side by side, offsets that move only on commit, timeouts,
fencing by a newer instance, and bad input."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

import weir
import weir.aio
from tests.conftest import ServerProcess
from weir.errors import (
    BadRequestError,
    ClosedError,
    ProducerFencedError,
    TransactionEndedError,
    UnknownConsumerError,
    UnknownTransactionError,
)
from weir.protocols.native import weir_pb2 as pb

PARTITIONS = 3


@pytest.fixture
def client(shared_server: ServerProcess) -> Iterator[weir.Client]:
    c = weir.Client(shared_server.endpoint)
    yield c
    c.close()


def topics(client: weir.Client, base: str) -> list[str]:
    names = [f"{base}_{k}" for k in ("a", "b", "c")]
    for n in names:
        client.create_topic(n, partitions=PARTITIONS)
    return names


def everything(client: weir.Client, names: list[str], *, committed: bool) -> list[bytes]:
    """Every message of the topics, as a read (committed or not) of every partition sees it."""
    out = []
    for t in names:
        for p in range(client.describe_topic(t).partitions):
            for chunk in client.read_range(t, p, 0, read_committed=committed):
                out.extend(m.data for m in chunk.messages())
    return sorted(out)


def drain(reader: weir.Reader, n: int, timeout: float = 20) -> list[weir.Message]:
    out: list[weir.Message] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        b = reader.receive_batch(timeout=0.2)
        if b is not None:
            out.extend(b)
    return out


def write_spread(tx: weir.Transaction, names: list[str], tag: str) -> list[bytes]:
    sent = []
    for t in names:
        for p in range(PARTITIONS):
            w = tx.writer(t, partition=p)
            for i in range(3):
                data = f"{tag}:{t[-1]}{p}:{i}".encode()
                w.write(data)
                sent.append(data)
    return sent


def test_commit_and_abort_across_three_topics_with_readers_side_by_side(
    client: weir.Client, topic_name: str
) -> None:
    names = topics(client, topic_name)
    committed_reader = client.reader(names, read_committed=True)
    raw_reader = client.reader(names)
    with client.transaction() as tx:
        kept = write_spread(tx, names, "kept")
        for w in tx._inner._writers:
            asyncio.run_coroutine_threadsafe(w.flush(), client._loop.loop).result(30)
        # stored already: read-uncommitted readers see it, read-committed ones do not yet
        assert everything(client, names, committed=False) == sorted(kept)
        assert everything(client, names, committed=True) == []
        assert drain(committed_reader, 1, timeout=0.5) == []
    assert tx.state == "committed"
    assert everything(client, names, committed=True) == sorted(kept)
    assert sorted(m.data for m in drain(committed_reader, len(kept))) == sorted(kept)

    with pytest.raises(RuntimeError, match="changed my mind"), client.transaction() as tx2:
        dropped = write_spread(tx2, names, "dropped")
        raise RuntimeError("changed my mind")
    assert tx2.state == "aborted"
    plain = client.writer(names[0], partition=0)
    plain.write(b"after")
    plain.close()
    assert everything(client, names, committed=True) == sorted([*kept, b"after"])
    assert sorted(m.data for m in drain(committed_reader, 1)) == [b"after"]
    # the read-uncommitted reader saw everything, the aborted messages too; only their
    # messages that reached the server before the abort can be there, never more
    raw = sorted(m.data for m in drain(raw_reader, len(kept) + 1))
    raw += sorted(m.data for m in drain(raw_reader, len(dropped), timeout=1))
    assert set(kept) | {b"after"} <= set(raw) <= set(kept) | {b"after"} | set(dropped)
    committed_reader.close()
    raw_reader.close()


def test_offsets_move_only_when_the_transaction_commits(
    client: weir.Client, topic_name: str
) -> None:
    src, out = f"{topic_name}_in", f"{topic_name}_out"
    client.create_topic(src, partitions=2)
    client.create_topic(out, partitions=2)
    w = client.writer(src, partition=0)
    for i in range(10):
        w.write(b"%d" % i)
    w.close()
    reader = client.reader(src, consumer="etl")
    msgs = drain(reader, 10)
    assert len(msgs) == 10

    def offset() -> int:
        return client.describe_consumer(src, "etl").partitions[0].committed_offset

    tx = client.transaction().begin()
    tx.writer(out).write(b"x")
    reader.commit(msgs[4], transaction=tx)
    assert offset() == 0
    tx.abort()
    assert offset() == 0
    with client.transaction() as tx:
        tx.writer(out).write(b"y")
        reader.commit(msgs[-1], transaction=tx)
        assert offset() == 0
    assert offset() == 10
    reader.close()


def test_a_transaction_past_its_timeout_is_aborted(client: weir.Client, topic_name: str) -> None:
    client.create_topic(topic_name, partitions=2)
    tx = client.transaction(timeout=0.3).begin()
    w = tx.writer(topic_name, partition=1)
    w.write(b"late")
    w.flush()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # until the server wrote the abort marker after it
        if client.describe_topic(topic_name).partition_info[1].end_offset == 2:
            break
        time.sleep(0.05)
    with pytest.raises(TransactionEndedError, match="timed out"):
        tx.commit()
    assert everything(client, [topic_name], committed=True) == []


def test_a_newer_instance_fences_the_older(shared_server: ServerProcess, topic_name: str) -> None:
    with (
        weir.Client(shared_server.endpoint) as first,
        weir.Client(shared_server.endpoint) as second,
    ):
        first.create_topic(topic_name, partitions=2)
        old = first.transaction(transactional_id=f"{topic_name}-etl").begin()
        old_writer = old.writer(topic_name, partition=0)
        old_writer.write(b"zombie")
        old_writer.flush()
        with second.transaction(transactional_id=f"{topic_name}-etl") as tx:
            tx.writer(topic_name, partition=0).write(b"fresh")
        # the old instance's transaction was aborted; its writes and commit fail
        with pytest.raises(ProducerFencedError):
            old_writer.write(b"zombie2")
            old_writer.flush(10)
        with pytest.raises(ProducerFencedError, match="newer instance"):
            old.commit()
        with pytest.raises(ProducerFencedError, match="newer instance"):
            first.transaction(transactional_id=f"{topic_name}-etl").begin()
        got = [
            m.data
            for c in first.read_range(topic_name, 0, 0, read_committed=True)
            for m in c.messages()
        ]
        assert got == [b"fresh"]
        raw = [m.data for c in first.read_range(topic_name, 0, 0) for m in c.messages()]
        assert b"zombie2" not in raw  # the fenced write was not stored at all


def test_bad_input_gets_a_clear_error(client: weir.Client, topic_name: str) -> None:
    client.create_topic(topic_name, partitions=1)
    call = client._aio.conn.call
    with pytest.raises(UnknownTransactionError):
        client._run(call("CommitTransaction", pb.EndTransactionRequest(transaction_id=99)))
    tx = client.transaction().begin()
    w = client.writer(topic_name, partition=0)
    w.write(b"one")
    w.close()
    with pytest.raises(BadRequestError, match="end offset is 1"):
        tx.commit_offsets([_at(topic_name, 0, 0), _at(topic_name, 0, 5)], "c")
    tx.commit()
    with pytest.raises(UnknownConsumerError):  # nothing of the refused request was taken
        client.describe_consumer(topic_name, "c")
    with pytest.raises(ClosedError):
        tx.commit()
    with pytest.raises(TransactionEndedError, match="committed"):
        client._run(call("CommitTransaction", pb.EndTransactionRequest(transaction_id=tx.id)))
    with pytest.raises(BadRequestError, match="timeout"):
        client.transaction(timeout=10**7).begin()


def _at(topic: str, partition: int, offset: int) -> weir.Message:
    return weir.Message(topic, partition, offset, 0, 0, 0, "", b"", b"", {})


async def test_asyncio_twin(shared_server: ServerProcess, topic_name: str) -> None:
    async with weir.aio.Client(shared_server.endpoint) as client:
        await client.create_topic(topic_name, partitions=2)
        async with client.transaction() as tx:
            w = tx.writer(topic_name, partition=1)
            await w.write(b"a")
            await w.write(b"b")
        assert tx.state == "committed"
        tx2 = await client.transaction().begin()
        await tx2.writer(topic_name, partition=0).write(b"gone")
        await tx2.abort()
        got = []
        for p in range(2):
            async for c in client.read_range(topic_name, p, 0, read_committed=True):
                got.extend(m.data for m in c.messages())
        assert sorted(got) == [b"a", b"b"]


def test_a_subscription_takes_markers_as_acknowledged(client: weir.Client, topic_name: str) -> None:
    """Subscriptions read uncommitted; the offsets transaction markers hold carry no message,
    so they never wait for an ack: the backlog drains."""
    client.create_topic(topic_name, partitions=1)
    client.create_subscription(topic_name, "s", initial_position="earliest")
    for outcome in ("commit", "abort", "commit"):
        tx = client.transaction().begin()
        w = tx.writer(topic_name, partition=0)
        w.write(outcome.encode())
        w.flush()  # stored, then committed or aborted
        tx.commit() if outcome == "commit" else tx.abort()
    consumer = client.subscribe(topic_name, "s", create=False)
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < 3 and time.monotonic() < deadline:
        msgs = consumer.receive_batch(10, timeout=0.5)
        got += [m.data for m in msgs]
        if msgs:
            consumer.acknowledge(msgs)
    consumer.close()
    assert sorted(got) == [b"abort", b"commit", b"commit"]
    assert client.describe_subscription(topic_name, "s").backlog == 0


def _compacted(client: weir.Client, topic: str, *, committed: bool) -> list[tuple[bytes, bytes]]:
    """(key, value) of partition 0 read as compacted, from offset 0 to where it stops."""
    return [
        (m.key, m.data)
        for c in client.read_range(topic, 0, 0, compacted=True, read_committed=committed)
        for m in c.messages()
    ]


def _fold(pairs: list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for k, v in pairs:
        if v:
            out[k] = v
        else:
            out.pop(k, None)
    return out


def test_compaction_keeps_committed_values_only_and_stops_at_open_transactions(
    client: weir.Client, topic_name: str
) -> None:
    client.create_topic(topic_name, partitions=1)
    with client.writer(topic_name, partition=0) as w:
        for k in (b"a", b"b", b"c", b"d"):
            w.write(b"plain", key=k)
    with client.transaction() as tx:  # committed: new values and a tombstone
        w = tx.writer(topic_name, partition=0)
        w.write(b"committed", key=b"a")
        w.write(b"", key=b"b")
        w.write(b"committed", key=b"e")
    aborted = client.transaction().begin()  # aborted: values, a tombstone, a new key
    w = aborted.writer(topic_name, partition=0)
    for k, v in [(b"a", b"aborted"), (b"c", b""), (b"d", b"aborted"), (b"x", b"aborted")]:
        w.write(v, key=k)
    w.flush()
    aborted.abort()
    opened = client.transaction().begin()  # open during the run: held back by the LSO
    w = opened.writer(topic_name, partition=0)
    w.write(b"open", key=b"a")
    w.write(b"", key=b"e")
    w.write(b"open", key=b"y")
    w.flush()
    with client.writer(topic_name, partition=0) as plain:
        plain.write(b"after", key=b"d")  # past the open transaction's first offset
    part = client.describe_topic(topic_name).partition_info[0]
    assert part.stable_offset < part.end_offset

    info = client.compact(topic_name, wait=True)
    assert not info.running and info.last_error == ""
    assert info.partitions[0].position == part.stable_offset  # never into the open one
    # the view: the latest committed value of each key; the tombstone kept for readers
    # behind; nothing of the aborted transaction (not its values, nor its delete of c)
    view = {b"a": b"committed", b"c": b"plain", b"d": b"plain", b"e": b"committed"}
    got = _compacted(client, topic_name, committed=True)
    assert (b"b", b"") in got and _fold(got) == view
    assert not [v for _, v in got if v in (b"aborted", b"open", b"after")]
    # read uncommitted, the tail past the view shows the open transaction as it is;
    # the aborted values below the position are gone all the same
    raw = _compacted(client, topic_name, committed=False)
    assert not [v for _, v in raw if v == b"aborted"]
    assert _fold(raw) == {b"a": b"open", b"c": b"plain", b"d": b"after", b"y": b"open"}

    opened.commit()  # now the run goes past it: its values and its tombstone count
    info = client.compact(topic_name, wait=True)
    end = client.describe_topic(topic_name).partition_info[0].end_offset
    assert info.partitions[0].position == end
    got = _compacted(client, topic_name, committed=True)
    assert _fold(got) == {b"a": b"open", b"c": b"plain", b"d": b"after", b"y": b"open"}
    assert not [v for _, v in got if v == b"aborted"]
    assert {k for k, v in got if not v} == {b"b", b"e"}  # the deletes, kept for readers behind
