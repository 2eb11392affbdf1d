"""The hand-rolled wire codec is byte-for-byte protobuf, and falls back on anything else."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native import wire

chunks = st.lists(st.binary(max_size=300), max_size=6)
offsets = st.integers(0, 2**62)


@settings(max_examples=200)
@given(chunks)
def test_write_request_matches_protobuf(batches: list[bytes]) -> None:
    ours = wire.encode_write_request(wire.RawWriteRequest(batches))
    theirs = pb.WriteRequest(batches=pb.WriteBatches(batches=batches)).SerializeToString()
    assert ours == theirs
    back = wire.decode_write_request(theirs)
    assert isinstance(back, wire.RawWriteRequest)
    assert [bytes(b) for b in back.batches] == batches


def test_write_request_init_goes_through_protobuf() -> None:
    init = pb.WriteRequest(init=pb.WriteInit(topic="t", producer_id="p", partition=3))
    assert wire.encode_write_request(init) == init.SerializeToString()
    assert wire.decode_write_request(init.SerializeToString()) == init


@settings(max_examples=200)
@given(chunks, st.integers(0, 2**63), offsets, offsets, offsets)
def test_read_data_matches_protobuf(cs: list[bytes], aid: int, nxt: int, end: int, n: int) -> None:
    ours = wire.encode_read_response(wire.RawReadData(aid, list(cs), nxt, end, n))
    theirs = pb.ReadResponse(
        data=pb.ReadData(assignment_id=aid, chunks=cs, next_offset=nxt, end_offset=end, bytes=n)
    ).SerializeToString()
    assert ours == theirs
    back = wire.decode_read_response(theirs)
    assert isinstance(back, wire.RawReadData)
    assert (
        back.assignment_id,
        [bytes(c) for c in back.chunks],
        back.next_offset,
        back.end_offset,
        back.bytes,
    ) == (
        aid,
        cs,
        nxt,
        end,
        n,
    )


def test_other_read_responses_go_through_protobuf() -> None:
    msg = pb.ReadResponse(assigned=pb.PartitionAssigned(assignment_id=1, topic="t", read_offset=5))
    assert wire.decode_read_response(msg.SerializeToString()) == msg
    assert wire.encode_read_response(msg) == msg.SerializeToString()


@settings(max_examples=200)
@given(chunks, offsets, offsets, offsets, offsets)
def test_range_response_matches_protobuf(cs: list[bytes], a: int, b: int, c: int, d: int) -> None:
    ours = wire.encode_range_response(wire.RawRangeResponse(list(cs), a, b, c, d))
    theirs = pb.ReadRangeResponse(
        chunks=cs, first_offset=a, next_offset=b, start_offset=c, end_offset=d
    )
    assert ours == theirs.SerializeToString()
    back = wire.decode_range_response(theirs.SerializeToString())
    assert (
        [bytes(x) for x in back.chunks],
        back.first_offset,
        back.next_offset,
        back.start_offset,
        back.end_offset,
    ) == (
        cs,
        a,
        b,
        c,
        d,
    )


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_garbage_falls_back_to_the_protobuf_parser(junk: bytes) -> None:
    for decode, cls in (
        (wire.decode_write_request, pb.WriteRequest),
        (wire.decode_read_response, pb.ReadResponse),
    ):
        try:
            expected = cls.FromString(junk)
        except Exception:
            expected = None
        try:
            got = decode(junk)
        except Exception:
            got = None
        if expected is None:
            # protobuf refuses it; we may only accept it if it is a well-formed bulk message
            assert got is None or isinstance(got, wire.RawWriteRequest | wire.RawReadData)
        elif isinstance(got, wire.RawWriteRequest):
            assert [bytes(b) for b in got.batches] == list(expected.batches.batches)
        elif isinstance(got, wire.RawReadData):
            assert [bytes(c) for c in got.chunks] == list(expected.data.chunks)
        else:
            assert got == expected
