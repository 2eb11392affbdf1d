"""Hostile input on the native protocol: each gets a clear error, the server stays up,
and stored data does not change."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, given, settings

import weir
from tests.batch_fuzz import Mutation, decode_or_refuse, mutated_batches
from tests.conftest import ServerProcess
from tests.reliability.atheris_run import fuzz_for
from weir.errors import BatchFormatError
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native import weir_pb2_grpc as pb_grpc
from weir.storage.batch import crc32c, parse_header
from weir.storage.batch_encoding import encode_batch

ENV = {"WEIR_LIMITS_MAX_BATCH_BYTES": "64KiB", "WEIR_METRICS_ENABLED": "false"}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path_factory.mktemp("hostile") / "data", env=ENV).start()
    c = weir.Client(s.endpoint)
    c.create_topic("target", partitions=2)
    c.create_topic("fuzzed", partitions=1)
    with c.writer("target", producer_id="good") as w:
        for i in range(500):
            w.write(b"good-%d" % i)
    c.close()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def stub(srv: ServerProcess) -> Iterator[pb_grpc.WeirStub]:
    ch = grpc.insecure_channel(srv.endpoint)
    yield pb_grpc.WeirStub(ch)
    ch.close()


def fingerprint(srv: ServerProcess) -> list[tuple[int, int, str]]:
    """Per partition: start, end and a hash of every stored byte."""
    c = weir.Client(srv.endpoint)
    out = []
    for p in c.describe_topic("target").partition_info:
        h = hashlib.sha256()
        for chunk in c.read_range("target", p.partition, p.start_offset, p.end_offset):
            for b in chunk.chunks:
                h.update(b)
        out.append((p.start_offset, p.end_offset, h.hexdigest()))
    c.close()
    return out


def write_stream(
    stub: pb_grpc.WeirStub, init: pb.WriteInit | None, *batches: bytes
) -> list[pb.WriteResponse]:
    reqs = ([pb.WriteRequest(init=init)] if init is not None else []) + (
        [pb.WriteRequest(batches=pb.WriteBatches(batches=list(batches)))] if batches else []
    )
    return list(stub.StreamWrite(iter(reqs), timeout=20))


def error_of(responses: list[pb.WriteResponse] | list[pb.ReadResponse]) -> str:
    errs = [r.error.code for r in responses if r.WhichOneof("kind") == "error"]
    return errs[0] if errs else ""


def good_batch(n: int = 3, producer: str = "evil", first_seq: int = 1) -> bytes:
    return encode_batch(
        [b"x%d" % i for i in range(n)], producer_id=producer, first_seq_no=first_seq
    )


def recrc(buf: bytearray) -> bytes:
    """Make both CRCs of a tampered batch right again, so only the structure is wrong."""
    from weir.storage import batch as B

    (pid_len,) = struct.unpack_from("<H", buf, 66)
    start = B.HEADER_SIZE + pid_len
    struct.pack_into("<I", buf, 32, crc32c(bytes(buf[start:])))
    struct.pack_into("<I", buf, 12, B.header_crc_of(buf, 0, start))
    return bytes(buf)


INIT = pb.WriteInit(topic="target", producer_id="evil")


def test_bad_batches_get_clear_errors_and_change_nothing(
    srv: ServerProcess, stub: pb_grpc.WeirStub
) -> None:
    before = fingerprint(srv)
    good = good_batch()
    flipped = bytearray(good)
    flipped[-1] ^= 0xFF
    sparse = bytearray(encode_batch([b"a", b"b"], producer_id="evil", seq_nos=[10, 20]))
    struct.pack_into("<II", sparse, 72 + 4, 20, 10)  # seq column goes backwards
    bad_headers = bytearray(
        encode_batch([b"a", b"b"], producer_id="evil", headers=[{"k": "v"}, {"k2": "v"}])
    )
    bad_headers[-9] = 0xFF  # the second record's header key length (u16 at -9): past its end
    cases = {
        "garbage": (b"\x00" * 100, "BAD_BATCH"),
        "record headers that do not decode": (recrc(bad_headers), "BAD_BATCH"),
        "wrong CRC": (bytes(flipped), "BAD_BATCH"),
        "truncated": (good[:-3], "BAD_BATCH"),
        "trailing bytes": (good + b"xx", "BAD_BATCH"),
        "seq_no backwards inside a batch": (recrc(sparse), "BAD_BATCH"),
        "another producer's batch": (good_batch(producer="someone-else"), "BAD_REQUEST"),
        "oversized": (encode_batch([b"z" * 70_000], producer_id="evil"), "MESSAGE_TOO_LARGE"),
    }
    for name, (batch, code) in cases.items():
        got = error_of(write_stream(stub, INIT, batch))
        assert got == code, f"{name}: got {got!r}"
    assert fingerprint(srv) == before
    # a bad batch after a good one in the same request: the request is refused whole
    got = error_of(write_stream(stub, INIT, good_batch(first_seq=1000), cases["wrong CRC"][0]))
    assert got == "BAD_BATCH"
    assert fingerprint(srv) == before


def test_protocol_misuse_and_unknown_names(srv: ServerProcess, stub: pb_grpc.WeirStub) -> None:
    before = fingerprint(srv)
    assert error_of(write_stream(stub, None, good_batch())) == "BAD_REQUEST"  # batches before init
    # a producer or consumer of an unknown topic creates it (topics.auto_create), but
    # only in a namespace that exists
    assert (
        error_of(write_stream(stub, pb.WriteInit(topic="nowhere/nope", producer_id="p")))
        == "UNKNOWN_NAMESPACE"
    )
    assert (
        error_of(write_stream(stub, pb.WriteInit(topic="target", partition=7)))
        == "UNKNOWN_PARTITION"
    )
    assert (
        error_of(write_stream(stub, pb.WriteInit(topic="target", partition=-1)))
        == "UNKNOWN_PARTITION"
    )
    assert (
        error_of(write_stream(stub, pb.WriteInit(topic="target", partition=0, generation=-5)))
        == "STALE_GENERATION"
    )
    assert (
        error_of(write_stream(stub, pb.WriteInit(topic="bad name!", producer_id="p")))
        == "BAD_REQUEST"
    )
    reads = list(stub.StreamRead(iter([pb.ReadRequest(credit=pb.ReadCredit(bytes=5))]), timeout=20))
    assert error_of(reads) == "BAD_REQUEST"
    reads = list(
        stub.StreamRead(
            iter(
                [
                    pb.ReadRequest(init=pb.ReadInit(topics=["target"], consumer="c")),
                    pb.ReadRequest(commit=pb.ReadCommit(assignment_id=999_999, offset=1)),
                ]
            ),
            timeout=20,
        )
    )
    assert error_of(reads) == "BAD_REQUEST"
    reads = list(
        stub.StreamRead(
            iter([pb.ReadRequest(init=pb.ReadInit(topics=["nowhere/ghost"]))]), timeout=20
        )
    )
    assert error_of(reads) == "UNKNOWN_NAMESPACE"
    for call, req, status in [
        (
            stub.CreateTopic,
            pb.CreateTopicRequest(topic="t2", partitions=-1),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            stub.CreateTopic,
            pb.CreateTopicRequest(topic="a/b/c/d"),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            stub.CreateTopic,
            pb.CreateTopicRequest(topic="t3", retention_ms=-7),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (stub.DescribeTopic, pb.DescribeTopicRequest(topic="ghost"), grpc.StatusCode.NOT_FOUND),
        (
            stub.CommitOffset,
            pb.CommitOffsetRequest(topic="target", partition=0, consumer="c", offset=10**9),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            stub.CommitOffset,
            pb.CommitOffsetRequest(topic="target", partition=9, consumer="c", offset=0),
            grpc.StatusCode.NOT_FOUND,
        ),
    ]:
        with pytest.raises(grpc.RpcError) as exc:
            call(req, timeout=20)
        assert exc.value.code() == status, (req, exc.value.details())
        assert exc.value.details()
    with pytest.raises(grpc.RpcError) as exc:
        list(
            stub.ReadRange(
                pb.ReadRangeRequest(topic="target", partition=0, from_offset=-3), timeout=20
            )
        )
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert fingerprint(srv) == before


def test_resent_and_backwards_seq_nos_are_skipped_not_stored(
    srv: ServerProcess, stub: pb_grpc.WeirStub
) -> None:
    init = pb.WriteInit(topic="target", producer_id="replayer")
    first = write_stream(stub, init, good_batch(5, "replayer", 100))
    assert first[-1].ack.acks[0].written == 5
    again = write_stream(stub, init, good_batch(5, "replayer", 100), good_batch(3, "replayer", 50))
    acks = [a for r in again if r.WhichOneof("kind") == "ack" for a in r.ack.acks]
    assert [(a.written, a.skipped) for a in acks] == [(0, 5), (0, 3)]
    assert again[0].init.last_seq_no == 104


def test_cut_streams_and_garbage_on_the_port_leave_the_server_serving(
    srv: ServerProcess, stub: pb_grpc.WeirStub
) -> None:
    # a stream abandoned mid-flight: what was acknowledged stays, and whole batches only
    more = threading.Event()

    def requests() -> Iterator[pb.WriteRequest]:
        yield pb.WriteRequest(init=pb.WriteInit(topic="target", producer_id="quitter"))
        for i in range(20):
            if i == 3:
                more.wait(20)  # the rest only once the first ack is in: the cut lands mid-stream
            yield pb.WriteRequest(
                batches=pb.WriteBatches(batches=[good_batch(50, "quitter", 1 + 50 * i)])
            )

    call = stub.StreamWrite(requests(), timeout=20)
    assert next(call).WhichOneof("kind") == "init"
    first = next(call)
    assert first.WhichOneof("kind") == "ack" and first.ack.acks[0].written == 50
    more.set()
    call.cancel()
    # raw garbage on the gRPC port
    for junk in (b"GET / HTTP/1.1\r\n\r\n", b"\x00" * 64, bytes(range(256)) * 8):
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
            s.sendall(junk)
            s.settimeout(2)
            with contextlib.suppress(OSError):
                s.recv(1024)
    assert srv.proc is not None and srv.proc.poll() is None
    c = weir.Client(srv.endpoint)
    part = c.describe_topic("target").partition_info
    quitter: list[int] = []
    for p in part:
        msgs = [
            m
            for ch in c.read_range("target", p.partition, p.start_offset, p.end_offset)
            for m in ch.messages()
        ]
        assert [m.offset for m in msgs] == list(range(p.start_offset, p.end_offset))
        quitter += [int(m.data[1:]) for m in msgs if m.producer_id == "quitter"]
    # the acknowledged batch is there, and the cut left whole batches, in order, no gap
    assert len(quitter) >= 50 and len(quitter) % 50 == 0, len(quitter)
    assert quitter == [i % 50 for i in range(len(quitter))]
    c.close()


def _stored(srv: ServerProcess, topic: str, start: int, end: int) -> list[weir.Message]:
    with weir.Client(srv.endpoint) as c:
        return [
            m
            for ch in c.read_range(topic, 0, start, end)
            for m in ch.messages()
            if m.offset >= start
        ]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(m=mutated_batches(producer_id="fuzz"))
def test_damaged_batches_are_refused_or_stored_exactly_and_never_crash_the_server(
    srv: ServerProcess, stub: pb_grpc.WeirStub, m: Mutation
) -> None:
    """Valid batches with one mutation (see tests/batch_fuzz.py): the server must answer as the
    batch decoder does, refusing with BAD_BATCH what it refuses and storing exactly the
    records it decodes, and stay up with every other topic unchanged."""
    before = fingerprint(srv)
    with weir.Client(srv.endpoint) as c:
        end0 = c.describe_topic("fuzzed").partition_info[0].end_offset
    responses = write_stream(stub, pb.WriteInit(topic="fuzzed", producer_id="fuzz"), m.damaged)
    assert srv.proc is not None and srv.proc.poll() is None, "the server died"
    local = decode_or_refuse(m.damaged)
    with weir.Client(srv.endpoint) as c:
        end1 = c.describe_topic("fuzzed").partition_info[0].end_offset
    if isinstance(local, BatchFormatError):
        assert error_of(responses) == "BAD_BATCH", (m, local)
        assert end1 == end0, "a refused batch changed the topic"
    elif parse_header(m.damaged).producer_id != "fuzz":  # the damage hit the producer id
        assert error_of(responses) == "BAD_REQUEST", (m, responses)
        assert end1 == end0, "a refused batch changed the topic"
    else:
        assert error_of(responses) == "", (m, responses)
        (ack,) = [a for r in responses if r.WhichOneof("kind") == "ack" for a in r.ack.acks]
        assert ack.written + ack.skipped == len(local)
        assert end1 == end0 + ack.written
        stored = _stored(srv, "fuzzed", end0, end1)
        assert [(s.seq_no, s.key, s.data, s.headers) for s in stored] == [
            (r.seq_no, r.key, r.data, r.headers) for r in local[ack.skipped :]
        ]
    assert fingerprint(srv) == before


def test_atheris_fuzzes_the_batch_decoder_for_a_bounded_time(tmp_path: Path) -> None:
    fuzz_for("fuzz_batch.py", 15, tmp_path)
