"""Hostile bytes at the native TCP port: each gets a clear error, the server stays up, and
stored data does not change.

Each case is a real connection with hand-made bytes (tests/native_tcp_raw.py): another
protocol's bytes, truncated frames, hostile lengths, protobuf garbage, a method or version
the port does not serve, bad batches; then seeded random damage to a valid connection's
bytes. Afterwards a real SDK writer still writes through the port, and the topic written
before is byte for byte what it was.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Iterator

import pytest

import weir
from tests import native_tcp_raw as raw
from tests.conftest import ServerProcess
from tests.reliability.test_hostile import fingerprint, good_batch
from weir.client.messages import decode_parts
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.frame_connection import DIRECT_FRAME_BYTES
from weir.protocols.native.framing import MAGIC

ENV = {
    "WEIR_LIMITS_MAX_BATCH_BYTES": "64KiB",
    "WEIR_METRICS_ENABLED": "false",
    "WEIR_NATIVE_TCP_ENABLED": "true",
}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path_factory.mktemp("tcp-hostile") / "data", env=ENV).start()
    with weir.Client(s.endpoint, transport="tcp", tcp_endpoint=s.native_tcp) as c:
        c.create_topic("target", partitions=2)
        c.create_topic("fuzzed", partitions=1)
        with c.writer("target", producer_id="good") as w:
            for i in range(500):
                w.write(b"good-%d" % i)
    yield s
    s.stop()


START = MAGIC + raw.hello()
INIT = raw.init("target", "evil")


def alive(srv: ServerProcess) -> None:
    assert srv.proc is not None and srv.proc.poll() is None, "the server died"


def test_bad_starts_are_refused_with_a_hello_error(srv: ServerProcess) -> None:
    before = fingerprint(srv)
    cases = {
        "another protocol (HTTP/2)": (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "BAD_REQUEST"),
        "a wrong magic": (b"we", "BAD_REQUEST"),
        "hello length past the limit": (MAGIC + struct.pack(">I", 0xFFFFFFFF), "MESSAGE_TOO_LARGE"),
        "truncated hello header": (MAGIC + b"\x00\x00", "BAD_REQUEST"),
        "truncated hello": (MAGIC + raw.hello()[:-3], "BAD_REQUEST"),
        "hello that is not protobuf": (MAGIC + raw.frame(b"\x0a\xff\xff"), "BAD_REQUEST"),
        "unknown framing version": (MAGIC + raw.hello(version=9), "BAD_REQUEST"),
        "a method not served here": (MAGIC + raw.hello(method="Subscribe"), "BAD_REQUEST"),
        "a bad authorization": (MAGIC + raw.hello(authorization="Basic abc"), "UNAUTHORIZED"),
        "a forged token": (MAGIC + raw.hello(authorization="Bearer forged"), "UNAUTHORIZED"),
    }
    for name, (data, code) in cases.items():
        frames, rest = raw.exchange(srv.native_tcp, data + INIT + raw.batches(good_batch()))
        got = raw.error_code(frames)
        assert got == code, f"{name}: got {got!r} ({frames!r})"
        assert len(frames) <= 1 and not rest, f"{name}: more than the hello result: {frames!r}"
        alive(srv)
    assert fingerprint(srv) == before


def test_bad_stream_frames_get_typed_errors_and_store_nothing(srv: ServerProcess) -> None:
    before = fingerprint(srv)
    flipped = bytearray(good_batch())
    flipped[-1] ^= 0xFF
    cases = {
        "batches before init": (raw.batches(good_batch()), "BAD_REQUEST"),
        "a frame length past the limit": (
            INIT + struct.pack(">I", 0xFFFFFFF0),
            "MESSAGE_TOO_LARGE",
        ),
        "a truncated frame": (INIT + raw.batches(good_batch())[:-5], "BAD_REQUEST"),
        # past DIRECT_FRAME_BYTES: received into a buffer of its own, then cut short
        "a truncated large frame": (
            INIT + raw.batches(*[good_batch(1, "evil", i) for i in range(1, 1001)])[:-5],
            "BAD_REQUEST",
        ),
        "protobuf garbage": (INIT + raw.frame(b"\x12\xff\xff\xff\xff\x0f"), "BAD_REQUEST"),
        "a batch with a wrong CRC": (INIT + raw.batches(bytes(flipped)), "BAD_BATCH"),
        "garbage for a batch": (INIT + raw.batches(b"\x00" * 100), "BAD_BATCH"),
        "another producer's batch": (
            INIT + raw.batches(good_batch(producer="someone-else")),
            "BAD_REQUEST",
        ),
        "an oversized batch": (
            INIT + raw.batches(good_batch(n=1) + b"z" * 70_000),
            "MESSAGE_TOO_LARGE",
        ),
        "an unknown topic's namespace": (
            raw.init("no_such_ns/t", "evil") + raw.batches(good_batch()),
            "UNKNOWN_NAMESPACE",
        ),
    }
    for name, (data, code) in cases.items():
        frames, _ = raw.exchange(srv.native_tcp, START + data)
        result, _ = raw.answers(frames)
        assert result is not None and not result.HasField("error"), name
        got = raw.error_code(frames)
        assert got == code, f"{name}: got {got!r}"
        alive(srv)
    assert fingerprint(srv) == before


def test_a_valid_raw_stream_is_acked_after_its_init(srv: ServerProcess) -> None:
    """The framing as docs/native-protocol.md spells it: what a client in another language
    sends (the hello and init pipelined, then batches) is stored and acked in order."""
    data = START + raw.init("fuzzed", "raw") + raw.batches(good_batch(producer="raw"))
    frames, rest = raw.exchange(srv.native_tcp, data + raw.batches(good_batch(2, "raw", 4)))
    result, responses = raw.answers(frames)
    assert result is not None and result.version == 1 and not result.HasField("error")
    assert [r.WhichOneof("kind") for r in responses] == ["init", "ack", "ack"] and not rest
    assert [a.written for r in responses[1:] for a in r.ack.acks] == [3, 2]


def test_pipelined_requests_are_acked_once_each_in_order(srv: ServerProcess) -> None:
    """Hundreds of requests sent before any answer is read: each is acked once, in order
    (the acks go out in the partition actor's turn, or from the session's ack task when
    that cannot be done at once: both in one order), offsets dense, every message stored."""
    with weir.Client(srv.endpoint) as c:
        c.create_topic("pipelined", partitions=1)
    n = 300
    data = START + raw.init("pipelined", "pipe")
    data += b"".join(raw.batches(good_batch(2, "pipe", 1 + 2 * i)) for i in range(n))
    frames, rest = raw.exchange(srv.native_tcp, data)
    result, responses = raw.answers(frames)
    assert result is not None and not result.HasField("error") and not rest
    assert [r.WhichOneof("kind") for r in responses] == ["init"] + ["ack"] * n
    acks = [a for r in responses[1:] for a in r.ack.acks]
    assert [(a.offset, a.written, a.skipped) for a in acks] == [(2 * i, 2, 0) for i in range(n)]
    with weir.Client(srv.endpoint) as c:
        assert c.describe_topic("pipelined").partition_info[0].end_offset == 2 * n


def test_requests_of_every_size_back_to_back_are_acked_in_order(srv: ServerProcess) -> None:
    """Small requests and requests past `DIRECT_FRAME_BYTES` (received into a buffer of
    their own, not the connection's), back to back in one stream, cut into the socket's
    reads wherever they fall: each is acked once, in order, and every message is stored."""
    with weir.Client(srv.endpoint) as c:
        c.create_topic("sizes", partitions=1)
    counts = [1, 1500, 2, 4000, 1, 900, 3]  # batches per request, ~100 bytes each
    requests, seq = [], 1
    for k in counts:
        requests.append(raw.batches(*[good_batch(1, "sz", seq + i) for i in range(k)]))
        seq += k
    assert sum(len(r) > DIRECT_FRAME_BYTES for r in requests) == 3
    frames, rest = raw.exchange(
        srv.native_tcp, START + raw.init("sizes", "sz") + b"".join(requests)
    )
    result, responses = raw.answers(frames)
    assert result is not None and not result.HasField("error") and not rest
    assert [r.WhichOneof("kind") for r in responses] == ["init"] + ["ack"] * len(counts)
    assert [len(r.ack.acks) for r in responses[1:]] == counts
    acks = [a for r in responses[1:] for a in r.ack.acks]
    assert [(a.offset, a.written) for a in acks] == [(i, 1) for i in range(sum(counts))]
    with weir.Client(srv.endpoint) as c:
        assert c.describe_topic("sizes").partition_info[0].end_offset == sum(counts)


def damaged(rnd: random.Random, valid: bytes, heads: list[int]) -> bytes:
    """``valid`` with one seeded mutation: a truncation, bit flips, a hostile length at one
    of the frame headers at ``heads``, or inserted junk."""
    b = bytearray(valid)
    kind = rnd.randrange(4)
    if kind == 0:
        b = b[: rnd.randrange(len(b))]
    elif kind == 1:
        for _ in range(rnd.randrange(1, 6)):
            b[rnd.randrange(len(b))] ^= 1 << rnd.randrange(8)
    elif kind == 2:
        struct.pack_into(">I", b, rnd.choice(heads), rnd.choice([0, 1, 0x7FFFFFFF, 0xFFFFFFFF]))
    else:
        at = rnd.randrange(len(b))
        b[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 32)))
    return bytes(b)


def survives_damage(
    srv: ServerProcess,
    rnd: random.Random,
    valid: bytes,
    heads: list[int],
    parse: Callable[[list[bytes]], object],
) -> None:
    """40 connections sending ``valid`` damaged (`damaged`): whatever comes back parses
    (``parse``), the server lives, and what is stored does not change."""
    before = fingerprint(srv)
    for _ in range(40):
        frames, _ = raw.exchange(srv.native_tcp, damaged(rnd, valid, heads))
        parse(frames)
        alive(srv)
    assert fingerprint(srv) == before


def test_random_damage_to_a_valid_connection_never_hurts_the_server(srv: ServerProcess) -> None:
    """Seeded damage (truncation, bit flips, hostile lengths, inserted junk) anywhere in a
    valid connection's bytes: every answer is a frame that parses, and the server lives."""
    valid = START + raw.init("fuzzed", "fuzz") + raw.batches(good_batch(producer="fuzz"))
    heads = [len(MAGIC), len(START), len(START) + len(raw.init("fuzzed", "fuzz"))]
    survives_damage(srv, random.Random(20261126), valid, heads, raw.answers)
    # and the port still serves a real writer
    with (
        weir.Client(srv.endpoint, transport="tcp", tcp_endpoint=srv.native_tcp) as c,
        c.writer("fuzzed", producer_id="after") as w,
    ):
        assert w.write_with_result(b"still here").offset is not None


# ---------------------------------------------------------------- read streams

READ_START = MAGIC + raw.read_hello()


def test_bad_read_stream_frames_get_typed_errors(srv: ServerProcess) -> None:
    """A read stream (hello method StreamRead) takes ReadRequests: what is not one, or not
    one the session can take, ends the stream with a typed error; nothing stored changes
    and no commit lands."""
    before = fingerprint(srv)
    init = raw.read_init("target", consumer="hostile-reader")
    cases = {
        "credit before init": (raw.read_request(credit={"bytes": 10}), "BAD_REQUEST"),
        "an init without topics": (raw.read_request(init={"consumer": "x"}), "BAD_REQUEST"),
        "an unknown topic's namespace": (raw.read_init("no_such_ns/t"), "UNKNOWN_NAMESPACE"),
        "a negative credit": (init + raw.read_request(credit={"bytes": -5}), "BAD_REQUEST"),
        "a commit of an assignment not held": (
            init + raw.read_request(commit={"assignment_id": 999_999, "offset": 400}),
            "BAD_REQUEST",
        ),
        "a frame length past the limit": (
            init + struct.pack(">I", 0xFFFFFFF0),
            "MESSAGE_TOO_LARGE",
        ),
        # a read request is small: 2 MiB is refused before it is read, as a write's is not
        "a read request past 1 MiB": (init + struct.pack(">I", 2 << 20), "MESSAGE_TOO_LARGE"),
        "a truncated frame": (init + raw.read_request(credit={"bytes": 10})[:-2], "BAD_REQUEST"),
        "protobuf garbage": (raw.frame(b"\x0a\xff\xff\xff\xff\x0f"), "BAD_REQUEST"),
    }
    for name, (data, code) in cases.items():
        frames, _ = raw.exchange(srv.native_tcp, READ_START + data)
        result, _ = raw.read_answers(frames)
        assert result is not None and not result.HasField("error"), name
        got = raw.error_code(frames, read=True)
        assert got == code, f"{name}: got {got!r}"
        alive(srv)
    assert fingerprint(srv) == before
    with weir.Client(srv.endpoint) as c:
        info = c.describe_consumer("target", "hostile-reader")
        assert [p.committed_offset for p in info.partitions] == [0, 0]


def _read_so_far(responses: list[pb.ReadResponse]) -> int:
    """How many offsets the data answers cover, over all assignments."""
    start = {
        r.assigned.assignment_id: r.assigned.read_offset
        for r in responses
        if r.HasField("assigned")
    }
    end = dict(start)
    for r in responses:
        if r.HasField("data"):
            end[r.data.assignment_id] = r.data.next_offset
    return sum(end[a] - start[a] for a in start)


def test_a_valid_raw_read_stream_delivers_what_is_stored(srv: ServerProcess) -> None:
    """The read stream as docs/native-protocol.md spells it, from a plain socket: the hello
    and the init pipelined, then the init result, an assignment per partition and the
    stored batches as they are."""
    frames = raw.read_until(
        srv.native_tcp,
        READ_START + raw.read_init("target"),
        lambda frames: _read_so_far(raw.read_answers(frames)[1]) >= 500,
    )
    result, responses = raw.read_answers(frames)
    assert result is not None and not result.HasField("error")
    kinds = [r.WhichOneof("kind") for r in responses]
    assert kinds[0] == "init" and kinds.count("assigned") == 2 and "error" not in kinds
    chunks = [c for r in responses if r.HasField("data") for c in r.data.chunks]
    got = sorted(bytes(d) for p in decode_parts(chunks, 0) for d in p.data)
    assert got == sorted(b"good-%d" % i for i in range(500))


def test_random_damage_to_a_read_stream_never_hurts_the_server(srv: ServerProcess) -> None:
    """Seeded damage to a read stream's bytes (a consumer's init, a credit, a commit): every
    answer parses, the server lives, and what is stored is unchanged."""
    valid = (
        READ_START
        + raw.read_init("target", consumer="fuzz-reader", credit=4096)
        + raw.read_request(credit={"bytes": 4096})
        + raw.read_request(commit={"assignment_id": 1, "offset": 3})
    )
    heads = [len(MAGIC), len(READ_START)]
    survives_damage(srv, random.Random(20261127), valid, heads, raw.read_answers)
    with (
        weir.Client(srv.endpoint, transport="tcp", tcp_endpoint=srv.native_tcp) as c,
        c.reader("target", start="earliest") as r,
    ):  # and the port still serves a real reader
        got = []
        while len(got) < 500 and (batch := r.receive_batch(timeout=20)) is not None:
            got += [m.data for m in batch]
        assert sorted(got) == sorted(b"good-%d" % i for i in range(500))
