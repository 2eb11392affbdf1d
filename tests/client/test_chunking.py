"""Chunked messages: bigger than the message size limit, split by the writer, whole again
in the reader; one message for dedup, also across a kill -9 of the server."""

from __future__ import annotations

import hashlib
import time

import pytest

import weir
from tests.conftest import ServerProcess
from tests.reliability.checker import check
from tests.reliability.history import History, Stored
from tests.reliability.proxy import FaultyProxy
from weir.client.chunks import CHUNK_COUNT, CHUNK_ID, CHUNK_UUID, ChunkAssembler
from weir.client.messages import _Part
from weir.errors import BadRequestError, MessageTooLargeError

MB = 1_000_000


def big(n: int, seed: int = 0) -> bytes:
    """n bytes that are not all alike (a misplaced chunk changes them)."""
    block = b"".join(hashlib.sha256(f"{seed}/{i}".encode()).digest() for i in range(4096))
    return (block * (n // len(block) + 1))[:n]


def read_messages(c: weir.Client, topic: str, consumer: str, want: int) -> list[weir.Message]:
    out: list[weir.Message] = []
    with c.reader(topic, consumer=consumer) as r:
        while len(out) < want:
            batch = r.receive_batch(timeout=60)
            assert batch is not None, f"only {len(out)} of {want} messages"
            out.extend(batch)
            r.commit(batch)
    return out


def stored_count(c: weir.Client, topic: str) -> int:
    return sum(p.end_offset - p.start_offset for p in c.describe_topic(topic).partition_info)


def test_a_50_mb_message_round_trips(shared_server: ServerProcess, topic_name: str) -> None:
    payload = big(50 * MB)
    with weir.Client(shared_server.endpoint) as c:
        c.create_topic(topic_name, consumers=["r"])
        with c.writer(topic_name, producer_id="big", chunking=True) as w:
            w.write(b"before")
            result = w.write_with_result(payload, key="k", headers={"kind": "blob"})
            w.write(b"after")
        limit = w.max_message_bytes
        chunks = -(-(len(payload)) // (limit - 1))
        assert chunks >= 2 and result.offset == chunks  # the last chunk's offset
        got = read_messages(c, topic_name, "r", 3)
        assert [m.data for m in (got[0], got[2])] == [b"before", b"after"]
        whole = got[1]
        assert whole.data == payload
        assert (whole.key, dict(whole.headers), whole.offset) == (b"k", {"kind": "blob"}, chunks)
        assert stored_count(c, topic_name) == chunks + 2
        assert c.describe_consumer(topic_name, "r").lag == 0
        # without chunking the writer refuses it, as before
        with c.writer(topic_name) as plain, pytest.raises(MessageTooLargeError):
            plain.write(payload)


def test_many_small_chunks_and_bad_uses(shared_server: ServerProcess, topic_name: str) -> None:
    payload = big(3 * MB + 7, seed=1)
    with weir.Client(shared_server.endpoint) as c:
        c.create_topic(topic_name, partitions=2, consumers=["r"])
        with c.writer(topic_name, chunking=True, max_message_bytes=100_000) as w:
            w.write_many([b"a", payload, b"b"], keys=[None, "key", None])
            with pytest.raises(BadRequestError, match="chunked messages need automatic seq_nos"):
                w.write(payload, seq_no=10)
        got = read_messages(c, topic_name, "r", 3)
        assert sorted(len(m.data) for m in got) == [1, 1, len(payload)]
        assert next(m for m in got if m.key == b"key").data == payload
        assert stored_count(c, topic_name) == 2 + -(-len(payload) // (100_000 - 3))


def test_range_reads_put_chunked_messages_together_once_across_any_split(
    shared_server: ServerProcess, topic_name: str
) -> None:
    """read_range(assemble_chunks=True): a chunked message whole at its last chunk's
    offset, returned by the range holding that chunk (reading back for the others): two
    consecutive ranges split anywhere return every message exactly once."""
    big1, big2 = big(5000, seed=2), big(3500, seed=3)
    with weir.Client(shared_server.endpoint) as c:
        c.create_topic(topic_name)
        with c.writer(topic_name, chunking=True, max_message_bytes=1000) as w:
            w.write_many([b"p0", big1, b"p1", big2, b"p2"], keys=[None, "k1", None, "k2", None])
        end = c.describe_topic(topic_name).partition_info[0].end_offset

        def read(lo: int, hi: int) -> list[tuple[int, bytes, bytes, dict[str, str]]]:
            return [
                (m.offset, m.key, m.data, dict(m.headers))
                for ch in c.read_range(topic_name, 0, lo, hi, max_bytes=1500, assemble_chunks=True)
                for m in ch.messages()
            ]

        whole = read(0, end)
        assert [(k, d) for _, k, d, _ in whole] == [
            (b"", b"p0"),
            (b"k1", big1),
            (b"", b"p1"),
            (b"k2", big2),
            (b"", b"p2"),
        ]
        assert all(h == {} for *_, h in whole)  # the chunk headers are gone
        assert [o for o, *_ in whole][1] == end - 3 - -(-len(big2) // 997)  # big1's last chunk
        for split in range(end + 1):
            assert read(0, split) + read(split, end) == whole, f"split at {split}"
        raw = [m for ch in c.read_range(topic_name, 0, 0, end) for m in ch.messages()]
        assert len(raw) == end and sum(CHUNK_UUID in m.headers for m in raw) == end - 3


def test_a_chunked_send_cut_by_kill_9_is_stored_once(
    server: ServerProcess, topic_name: str
) -> None:
    """The writer goes through a proxy that, once some chunks are stored, swallows the
    server's answers: the chunks stored after that are never acknowledged before the
    kill, so the resend after the restart repeats them and only dedup keeps them single.

    Also judged by the reliability checker: each chunk is a message of the `History`
    (``id:cut:<chunk id>``), all attempted by the one write, acknowledged by its one ack
    (the last chunk at the offset the ack names, the others as stored somewhere), the
    whole message delivered as its last chunk; the raw log read back is the contents."""
    payload = big(40 * MB, seed=2)
    room = 256 * 1024
    chunks = -(-len(payload) // room)
    h = History()
    mids = [f"id:cut:{i}" for i in range(chunks)]
    proxy = FaultyProxy(lambda: server.port)
    with weir.Client(server.endpoint) as c, weir.Client(proxy.endpoint) as via_proxy:
        c.create_topic(topic_name, consumers=["r"])
        w = via_proxy.writer(topic_name, producer_id="cut", chunking=True, max_message_bytes=room)
        for mid in mids:
            h.attempted(mid)
        fut = w.write_future(payload)
        seen = 0
        for _ in range(100_000):  # until some chunks are stored (bounded)
            seen = stored_count(c, topic_name)
            if seen:
                break
        assert proxy.mute_replies() >= 1
        unacked = seen
        for _ in range(100_000):  # until a chunk is stored whose ack cannot arrive (bounded)
            unacked = stored_count(c, topic_name)
            if unacked > seen or unacked == chunks:
                break
        server.kill()
        h.fault("kill -9 of the server")
        # (in a run where the rest went in before the kill, the resend repeats all of it)
        assert 0 < seen < chunks and seen < unacked <= chunks, f"{seen}, then {unacked} stored"
        server.start()
        result = fut.result(timeout=120)
        assert result.offset == chunks - 1
        for mid in mids[:-1]:
            h.acked(mid, result.partition, None)  # stored, at an offset the ack does not name
        h.acked(mids[-1], result.partition, result.offset)
        w.close()
        assert w.reconnects >= 1
        assert (
            stored_count(c, topic_name) == chunks
        )  # every chunk once: the resend was deduplicated
        (whole,) = read_messages(c, topic_name, "r", 1)
        assert whole.data == payload and whole.producer_id == "cut"
        h.delivered("reader r", whole.partition, whole.offset, mids[-1])
        stored: dict[int, list[Stored]] = {0: []}
        for ch in c.read_range(topic_name, 0, 0):
            for m in ch.messages():
                piece = int(m.headers[CHUNK_ID])
                assert m.data == payload[piece * room : (piece + 1) * room], f"chunk {piece}"
                stored[0].append(Stored(m.offset, mids[piece], m.producer_id, m.seq_no))
    proxy.close()
    report = check(h, stored, {0: 0})
    assert report.ok, report.summary()
    assert report.stored == report.acknowledged == chunks


def part(first: int, rows: list[tuple[bytes, dict[str, str]]]) -> _Part:
    return _Part(
        first, len(rows), list(range(first + 1, first + 1 + len(rows))), 0, 0, "p", None,
        [d for d, _ in rows], [h for _, h in rows],
    )  # fmt: skip


def chunk(u: str, i: int, n: int) -> dict[str, str]:
    return {CHUNK_UUID: u, CHUNK_ID: str(i), CHUNK_COUNT: str(n), "x": "y"}


def test_the_assembler_interleaves_holds_back_commits_and_expires() -> None:
    now = [0.0]
    a = ChunkAssembler(expiry=60, clock=lambda: now[0])
    got = a.feed([part(10, [(b"A0", chunk("A", 0, 2)), (b"plain", {}), (b"B0", chunk("B", 0, 2))])])
    assert [(p.first_offset, p.data) for p in got] == [(11, [b"plain"])]
    assert a.commit_limit() == 10  # a commit must not pass A's first chunk
    got = a.feed([part(13, [(b"A1", chunk("A", 1, 2))])])
    assert [(p.first_offset, p.data, p.headers) for p in got] == [(13, [b"A0A1"], [{"x": "y"}])]
    assert a.commit_limit() == 12  # B is still incomplete
    now[0] = 61.0  # B's writer died mid-way and never resent it
    assert a.commit_limit() is None and a.expired == 1
    assert a.feed([part(20, [(b"z", {})])])[0].data == [b"z"]


def test_an_incomplete_chunked_message_expires_and_is_acked_away(
    shared_server: ServerProcess, topic_name: str
) -> None:
    """A writer that died after the first chunk of two: the reader delivers what follows,
    holds its commits at that first chunk (it might still complete), and once the chunk
    expiry has passed lets them go past it, so the consumer's lag reaches 0."""
    with weir.Client(shared_server.endpoint) as c:
        c.create_topic(topic_name, consumers=["r"])
        with c.writer(topic_name, producer_id="died") as w:
            w.write(b"half", headers={CHUNK_UUID: "u-dead", CHUNK_ID: "0", CHUNK_COUNT: "2"})
        with c.writer(topic_name, producer_id="alive") as w:
            w.write(b"a")
            w.write(b"b")
        with c.reader(topic_name, consumer="r", chunk_expiry=0.5) as r:
            got: list[weir.Message] = []
            while len(got) < 2:
                batch = r.receive_batch(timeout=30)
                assert batch is not None, f"only {len(got)} of 2 messages"
                got.extend(batch)
            assert [m.data for m in got] == [b"a", b"b"]  # the half message is not delivered
            r.commit_with_ack(got[-1])
            assert c.describe_consumer(topic_name, "r").lag == 3  # held at the first chunk
            deadline = time.monotonic() + 30
            while c.describe_consumer(topic_name, "r").lag:  # the expiry passes: acked away
                assert time.monotonic() < deadline, "the incomplete message never expired"
                r.commit_with_ack(got[-1])
