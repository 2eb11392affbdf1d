"""The batch format: round trips, and every kind of damage gives BatchFormatError."""

from __future__ import annotations

import pytest
from hypothesis import event, find, given, settings
from hypothesis.errors import NoSuchExample

from tests.batch_fuzz import (
    Mutation,
    decode_or_refuse,
    mutated_batches,
    reach_settings,
    record_sets,
    same_examples_everywhere,
)
from weir.errors import BadRequestError, BatchFormatError
from weir.storage.batch import (
    HEADER_SIZE,
    decode_payload,
    decode_records,
    parse_header,
    stamp_header,
    verify_body,
)
from weir.storage.batch_encoding import encode_batch
from weir.storage.codecs import Codec
from weir.storage.incoming import validate_incoming


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


@settings(max_examples=100, deadline=None)
@given(record_sets())
def test_a_batch_built_in_place_is_the_same_bytes(rs: dict) -> None:
    """``view=True`` (the SDK writers' way: the header written in front of the records'
    one buffer) gives the same batch, byte for byte, as the joined one."""
    # the YDB front's per-message codecs too, known and opaque; the batch itself
    # uncompressed (the only kind built in place) and as drawn
    for data_codec in (*Codec, 10_000):
        for codec in {Codec.RAW, rs["codec"]}:
            kw = {**rs, "codec": codec, "data_codec": data_codec}
            joined = encode_batch(**kw)
            in_place = encode_batch(**kw, view=True)
            assert bytes(in_place) == joined
            assert isinstance(in_place, memoryview) == (codec == Codec.RAW)


def test_stamp_keeps_payload_and_moves_offset() -> None:
    buf = encode_batch([b"a", b"bc"], producer_id="p", first_seq_no=7, created_at=1000)
    h = parse_header(buf)
    stamped = stamp_header(buf, h, base_offset=42, written_at=5000) + buf[h.payload_start :]
    h2 = parse_header(stamped)
    verify_body(stamped, 0, h2)
    assert (h2.base_offset, h2.written_at, h2.record_count, h2.first_seq) == (42, 5000, 2, 7)
    assert [r.offset for r in decode_records(stamped)] == [42, 43]


@settings(max_examples=300, deadline=None)
@given(mutated_batches())
def test_a_damaged_batch_is_refused_with_batch_format_error_or_decoded_consistently(
    m: Mutation,
) -> None:
    """Damage with and without CRCs made right again: a typed refusal or records that encode
    back to the same records; any other exception (a crash) fails the test."""
    event(m.kind)
    event(_reason(m))
    got = decode_or_refuse(m.damaged)
    if isinstance(got, BatchFormatError):
        return
    h = parse_header(m.damaged)
    again = encode_batch(
        [r.data for r in got],
        producer_id=h.producer_id,
        seq_nos=[r.seq_no for r in got],
        created_at=[r.created_at for r in got],
        keys=[r.key for r in got],
        headers=[r.headers for r in got],
        codec=Codec(h.codec),
        data_codec=h.data_codec,  # an opaque codec (3, 6..) is no Codec member
    )
    assert [(r.seq_no, r.created_at, r.key, r.data, r.headers) for r in decode_records(again)] == [
        (r.seq_no, r.created_at, r.key, r.data, r.headers) for r in got
    ]


@settings(max_examples=200, deadline=None)
@given(mutated_batches(fix_crc=False))
def test_damage_that_keeps_the_crcs_wrong_is_always_detected(m: Mutation) -> None:
    got = decode_or_refuse(m.damaged)
    if m.damaged == m.original or (m.kind == "splice" and not isinstance(got, BatchFormatError)):
        return  # no change, or a splice that made another valid batch
    assert isinstance(got, BatchFormatError), f"{m!r} was not detected"


# Checks behind the magic, the lengths and the CRCs that damage from valid batches reaches:
# random bytes never got this far (they never even made a 72-byte header).
REACHED = {
    "shorter than its columns",
    "its columns describe",
    "seq_no column disagrees",
    "cannot decompress",
    "record header",
    "(decoded)",  # damage with the CRCs made right that is still a valid batch
}
OTHER_REASONS = [
    "bad batch magic",
    "unsupported batch version",
    "truncated batch",
    "CRC mismatch",
    "shorter than its header",
    "unknown batch flags",
    "seq_no range",
    "unknown codec",
    "header says",
]


def _reason(m: Mutation) -> str:
    got = decode_or_refuse(m.damaged)
    if not isinstance(got, BatchFormatError):
        return "(decoded)" if m.damaged != m.original else ""
    return next((r for r in [*REACHED, *OTHER_REASONS] if r in str(got)), str(got))


def test_the_fuzzing_reaches_every_check_of_the_decoder() -> None:
    seen: set[str] = set()

    def all_seen(m: Mutation) -> bool:
        seen.add(_reason(m))
        return seen >= REACHED

    try:
        with same_examples_everywhere():
            find(mutated_batches(), all_seen, settings=reach_settings(1500))
    except NoSuchExample:
        pytest.fail(f"1500 damaged batches never reached: {sorted(REACHED - seen)}")


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
    struct.pack_into("<I", head, 12, B.header_crc_of(head, 0, len(head)))
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


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.ZSTD, Codec.LZ4])
def test_per_message_data_that_does_not_decompress_is_refused(codec: Codec) -> None:
    """A batch whose data_codec says each message is compressed, but whose messages are
    not (the fuzzer's `field:data_codec` mutation): the broker stored it, and every reader
    then failed on it. It is refused, naming the record; well-formed ones are accepted."""
    from weir.storage.codecs import compress
    from weir.storage.incoming import validate_incoming

    bad = encode_batch([b"plain", b"text"], data_codec=codec)
    with pytest.raises(BatchFormatError, match="record 0"):
        validate_incoming([bad])
    if codec != Codec.LZ4:  # LZ4 is a batch codec only: no YDB writer sends it per message
        good = encode_batch([compress(codec, b"plain"), compress(codec, b"text")], data_codec=codec)
        (inc,) = validate_incoming([good])
        assert inc.header.data_codec == codec
