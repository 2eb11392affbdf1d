"""The hand-rolled wire codec is byte-for-byte protobuf, and falls back on anything else."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf.message import DecodeError
from hypothesis import event, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from tests.batch_fuzz import mutated_wire_messages, reach_settings, same_examples_everywhere
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


def _normal(msg: Any) -> Any:
    """A decoded message in comparable form, whichever parser made it."""
    if isinstance(msg, wire.RawWriteRequest):
        return ("batches", [bytes(b) for b in msg.batches])
    if isinstance(msg, wire.RawReadData):
        fields = (msg.assignment_id, msg.next_offset, msg.end_offset, msg.bytes)
        return ("data", [bytes(c) for c in msg.chunks], *fields)
    if isinstance(msg, wire.RawRangeResponse):
        fields = (msg.first_offset, msg.next_offset, msg.start_offset, msg.end_offset)
        return ("range", [bytes(c) for c in msg.chunks], *fields)
    if isinstance(msg, pb.WriteRequest) and msg.WhichOneof("kind") == "batches":
        return ("batches", list(msg.batches.batches))
    if isinstance(msg, pb.ReadResponse) and msg.WhichOneof("kind") == "data":
        d = msg.data
        return ("data", list(d.chunks), d.assignment_id, d.next_offset, d.end_offset, d.bytes)
    if isinstance(msg, pb.ReadRangeResponse):
        fields = (msg.first_offset, msg.next_offset, msg.start_offset, msg.end_offset)
        return ("range", list(msg.chunks), *fields)
    return msg


DECODERS = [
    (wire.decode_write_request, pb.WriteRequest),
    (wire.decode_read_response, pb.ReadResponse),
    (wire.decode_range_response, pb.ReadRangeResponse),
]


def _outcome(decode: Callable[[bytes], Any], cls: Any, data: bytes) -> str:
    """Decode ``data`` with ours and with protobuf's parser: both refuse it (DecodeError, the
    typed refusal) or both give the same message. Any other exception is a crash: it fails."""
    try:
        expected = cls.FromString(data)
    except DecodeError:
        expected = None
    try:
        got = decode(data)
    except DecodeError:
        got = None
    if expected is None:
        assert got is None, f"{decode.__name__} accepted what protobuf refuses: {data!r}"
        return "refused"
    assert got is not None, f"{decode.__name__} refused what protobuf parses: {data!r}"
    assert _normal(got) == _normal(expected), data
    # "fast path": our own parse of a bulk message; "parsed": protobuf's (the fallback)
    return "fast path" if isinstance(got, wire.RawWriteRequest | wire.RawReadData) else "parsed"


@settings(max_examples=300, deadline=None)
@given(mutated_wire_messages())
def test_damaged_messages_are_refused_or_parsed_as_protobuf_parses_them(
    mutation: tuple[str, bytes],
) -> None:
    kind, data = mutation
    event(kind)
    for decode, cls in DECODERS:
        event(f"{decode.__name__}: {_outcome(decode, cls, data)}")


def test_the_fuzzing_reaches_both_parsers_and_refusals() -> None:
    wanted = {
        ("decode_write_request", "fast path"),
        ("decode_write_request", "refused"),
        ("decode_write_request", "parsed"),
        ("decode_read_response", "fast path"),
        ("decode_read_response", "refused"),
        ("decode_read_response", "parsed"),
        ("decode_range_response", "refused"),
    }
    seen: set[tuple[str, str]] = set()

    def all_seen(mutation: tuple[str, bytes]) -> bool:
        for decode, cls in DECODERS:
            seen.add((decode.__name__, _outcome(decode, cls, mutation[1])))
        return wanted <= seen

    try:
        with same_examples_everywhere():
            find(mutated_wire_messages(), all_seen, settings=reach_settings(1000))
    except NoSuchExample:
        pytest.fail(f"1000 damaged messages never reached {sorted(wanted - seen)}")
