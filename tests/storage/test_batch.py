"""The batch format: round trips, and every kind of damage gives BatchFormatError."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.errors import BadRequestError, BatchFormatError
from weir.storage.batch import (
    HEADER_SIZE,
    decode_payload,
    decode_records,
    encode_batch,
    parse_header,
    stamp_header,
    verify_body,
)
from weir.storage.codecs import Codec
from weir.storage.partition import validate_incoming

header_maps = st.dictionaries(st.text(max_size=8), st.text(max_size=16), max_size=3)


@st.composite
def record_sets(draw: st.DrawFn) -> dict:
    n = draw(st.integers(1, 40))
    data = draw(st.lists(st.binary(max_size=300), min_size=n, max_size=n))
    first = draw(st.integers(0, 2**40))
    gaps = draw(st.lists(st.integers(1, 2**33), min_size=n - 1, max_size=n - 1))
    seqs = [first]
    for g in gaps:
        seqs.append(seqs[-1] + g)
    created = draw(
        st.one_of(
            st.integers(0, 2**41),
            st.lists(st.integers(-(2**40), 2**41), min_size=n, max_size=n),
        )
    )
    keys = draw(st.one_of(st.none(), st.lists(st.binary(max_size=20), min_size=n, max_size=n)))
    headers = draw(st.one_of(st.none(), st.lists(header_maps, min_size=n, max_size=n)))
    codec = draw(st.sampled_from(list(Codec)))
    dense = draw(st.booleans())
    return dict(
        data=data,
        seq_nos=None if dense else seqs,
        first_seq_no=first,
        created_at=created,
        keys=keys,
        headers=headers,
        codec=codec,
        producer_id=draw(st.text(max_size=10)),
    )


@settings(max_examples=200, deadline=None)
@given(record_sets())
def test_round_trip(rs: dict) -> None:
    buf = encode_batch(**rs)
    (inc,) = validate_incoming([buf])
    h = inc.header
    n = len(rs["data"])
    assert h.record_count == n
    assert h.producer_id == rs["producer_id"]
    recs = decode_records(buf)
    assert [r.data for r in recs] == rs["data"]
    seqs = rs["seq_nos"] or list(range(rs["first_seq_no"], rs["first_seq_no"] + n))
    assert [r.seq_no for r in recs] == seqs
    assert h.first_seq == seqs[0] and h.last_seq == seqs[-1]
    created = rs["created_at"] if isinstance(rs["created_at"], list) else [rs["created_at"]] * n
    assert [r.created_at for r in recs] == created
    assert [r.key for r in recs] == (rs["keys"] or [b""] * n)
    assert [r.headers for r in recs] == (rs["headers"] or [{}] * n)


def test_stamp_keeps_payload_and_moves_offset() -> None:
    buf = encode_batch([b"a", b"bc"], producer_id="p", first_seq_no=7, created_at=1000)
    h = parse_header(buf)
    stamped = stamp_header(buf, h, base_offset=42, written_at=5000) + buf[h.payload_start :]
    h2 = parse_header(stamped)
    verify_body(stamped, 0, h2)
    assert (h2.base_offset, h2.written_at, h2.record_count, h2.first_seq) == (42, 5000, 2, 7)
    assert [r.offset for r in decode_records(stamped)] == [42, 43]


@settings(max_examples=60, deadline=None)
@given(record_sets(), st.data())
def test_any_flipped_byte_is_detected(rs: dict, data: st.DataObject) -> None:
    buf = bytearray(encode_batch(**rs))
    i = data.draw(st.integers(0, len(buf) - 1))
    bit = data.draw(st.integers(0, 7))
    buf[i] ^= 1 << bit
    with pytest.raises(BatchFormatError):
        validate_incoming([bytes(buf)])


@settings(max_examples=60, deadline=None)
@given(record_sets(), st.data())
def test_truncation_is_detected(rs: dict, data: st.DataObject) -> None:
    buf = encode_batch(**rs)
    cut = data.draw(st.integers(0, len(buf) - 1))
    with pytest.raises(BatchFormatError):
        validate_incoming([buf[:cut]])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_garbage_never_crashes(junk: bytes) -> None:
    for candidate in (junk, b"WEIR\x01" + junk):
        with contextlib.suppress(BatchFormatError):
            validate_incoming([candidate])


def test_crc_valid_but_inconsistent_columns_rejected() -> None:
    # A batch whose CRCs are right but whose data lengths disagree with the payload:
    # the broker must not store what readers cannot decode.
    import struct

    from weir.storage import batch as B

    good = encode_batch([b"abc", b"de"])
    h = parse_header(good)
    payload = bytearray(good[h.payload_start :])
    struct.pack_into("<I", payload, 0, 4)  # first data length 3 -> 4
    head = bytearray(good[: h.payload_start])
    struct.pack_into("<I", head, 32, B.crc32c(bytes(payload)))
    struct.pack_into("<I", head, 12, B._header_crc(head, 0, len(head)))
    bad = bytes(head) + bytes(payload)
    parse_header(bad)
    verify_body(bad, 0, parse_header(bad))
    with pytest.raises(BatchFormatError, match="columns"):
        decode_payload(bad)


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        (dict(data=[]), "at least one"),
        (dict(data=[b"a", b"b"], seq_nos=[2, 2]), "strictly increasing"),
        (dict(data=[b"a"], seq_nos=[1, 2]), "differ in length"),
        (dict(data=["text"]), "bytes"),
        (dict(data=[b"a"], headers=[{"k": 1}]), "must be str"),
        (dict(data=[b"a"], first_seq_no=-1), "out of range"),
    ],
)
def test_bad_arguments_are_clear(kwargs: dict, msg: str) -> None:
    with pytest.raises(BadRequestError, match=msg):
        encode_batch(**kwargs)


def test_unknown_codec_name() -> None:
    with pytest.raises(BadRequestError, match="unknown codec"):
        Codec.parse("snappy")
    assert Codec.parse("gzip") is Codec.GZIP


def test_overhead_is_header_plus_one_length_per_record() -> None:
    # 72-byte header, no producer id, one u32 data length per record: dense seq_nos and
    # one created_at cost nothing per record.
    assert len(encode_batch([b""] * 10)) == HEADER_SIZE + 4 * 10
    assert len(encode_batch([b"x" * 100] * 10, producer_id="p")) == HEADER_SIZE + 1 + 104 * 10
