"""Record batch v2: what weir builds the real clients' record code reads (CRC, varints,
headers, compression), what they build weir parses, and damaged batches are refused."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from weir.protocols.kafka.mapping import NULL_VALUE_HEADER, to_kafka, to_weir
from weir.protocols.kafka.records import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    RecordsError,
    build_batch,
    parse_batch,
    parse_batches,
)
from weir.storage.batch import decode_records, parse_header, stamp_header

CODECS = [NONE, GZIP, LZ4, ZSTD]  # kafka-python reads snappy only with python-snappy


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_what_weir_builds(codec: int) -> None:
    b = build_batch(
        40,
        [1000, 1005],
        [None, b"k"],
        [b"v", None],
        [[("a", b"1"), ("b", None)], []],
        compression=codec,
    )
    batch = DefaultRecordBatch(b)
    assert batch.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]
    assert got == [(40, 1000, None, b"v", [("a", b"1"), ("b", None)]), (41, 1005, b"k", None, [])]


@pytest.mark.parametrize("codec", [*CODECS, SNAPPY])
def test_weir_parses_what_kafka_python_builds(codec: int) -> None:
    if codec == SNAPPY:  # kafka-python has no snappy here: weir builds it, weir parses it
        raw = build_batch(
            0, [5, 6, 7], [b"a", None, b""], [b"x" * 300, b"", None], compression=SNAPPY
        )
    else:
        builder = DefaultRecordBatchBuilder(2, codec, False, 77, 3, 10, batch_size=1 << 20)
        builder.append(0, 5, b"a", b"x" * 300, [("h", b"v")])
        builder.append(1, 6, None, b"", [])
        builder.append(2, 7, b"", None, [])
        raw = bytes(builder.build())
    (batch,) = parse_batches(raw)
    assert batch.keys == [b"a", None, None]  # weir has no empty key: it reads back as null
    assert batch.values == [b"x" * 300, b"", None]
    assert batch.timestamps == [5, 6, 7]
    if codec != SNAPPY:
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 3, 10)
        assert batch.headers[0] == {"h": "v"}


def test_a_message_crosses_to_weir_and_back_intact() -> None:
    raw = build_batch(
        0,
        [100, 200],
        [b"key", None],
        [None, b"\xff\x00bin"],
        [[("trace", b"\xfe\xff")], [("x", b"")]],
    )
    stored = to_weir(parse_batch(raw))
    recs = decode_records(stored)
    assert recs[0].headers[NULL_VALUE_HEADER] == "true" and recs[0].data == b""
    assert recs[1].key == b"" and recs[1].data == b"\xff\x00bin"
    back = DefaultRecordBatch(to_kafka([stored])[0])
    assert [(r.key, r.value, r.timestamp, r.headers) for r in back] == [
        (b"key", None, 100, [("trace", b"\xfe\xff")]),
        (None, b"\xff\x00bin", 200, [("x", b"")]),
    ]


def _corrupt(raw: bytes, pos: int) -> bytes:
    return raw[:pos] + bytes([raw[pos] ^ 0x40]) + raw[pos + 1 :]


def test_damaged_batches_are_refused() -> None:
    raw = build_batch(0, [1, 2], [b"k", b"k"], [b"v1", b"v2"])
    with pytest.raises(RecordsError, match="CRC"):
        parse_batch(_corrupt(raw, len(raw) - 1))
    with pytest.raises(RecordsError, match="magic"):
        parse_batch(raw[:16] + b"\x01" + raw[17:])
    with pytest.raises(RecordsError, match="length"):
        parse_batch(raw[:8] + struct.pack(">i", 10_000) + raw[12:])
    with pytest.raises(RecordsError):
        parse_batches(raw + raw[:30])  # a truncated second batch
    with pytest.raises(RecordsError):
        parse_batches(b"")


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=21, max_value=200), st.integers(min_value=0, max_value=255))
def test_flipped_bytes_under_a_good_crc_raise_records_errors(pos: int, value: int) -> None:
    """Bytes changed *and* the CRC recomputed: the structure checks still hold."""
    import crc32c

    raw = bytearray(
        build_batch(
            0, [1, 2, 3], [b"k", None, b"kk"], [b"v" * 20, None, b"w"], [[("h", b"1")], [], []]
        )
    )
    pos = min(pos, len(raw) - 1)
    raw[pos] = value
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    with contextlib.suppress(RecordsError):
        parse_batch(bytes(raw))


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
_record = st.tuples(
    st.integers(0, 10**13),  # timestamp
    st.one_of(st.none(), st.binary(max_size=20)),  # key
    st.one_of(st.none(), st.binary(max_size=300)),  # value
    st.lists(st.tuples(_text, st.one_of(st.none(), st.binary(max_size=10))), max_size=3),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_record, min_size=1, max_size=30), st.integers(0, 2**40))
def test_records_cross_to_weir_and_back_as_kafka_clients_read_them(
    records: list, base_offset: int
) -> None:
    """Kafka records -> weir (C parser) -> stored -> Kafka (C builder): what kafka-python
    reads back is what was sent, as weir maps it (no empty keys, null header values read
    back empty), and the built batch is byte for byte the Python reference's."""
    ts, keys, values, headers = (list(x) for x in zip(*records, strict=True))
    raw = build_batch(0, ts, keys, values, headers)
    sent = bytes(to_weir(parse_batch(raw)))
    h = parse_header(sent)
    stored = stamp_header(sent, h, base_offset, 0) + sent[h.payload_start :]  # as the broker does
    (built,) = to_kafka([stored])
    expect_headers = [[(k, v or b"") for k, v in hs] for hs in headers]
    expect = build_batch(base_offset, ts, [k or None for k in keys], values, expect_headers)
    assert bytes(built) == expect
    back = DefaultRecordBatch(bytes(built))
    assert back.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in back] == [
        (base_offset + i, t, k or None, v, h)
        for i, (t, k, v, h) in enumerate(zip(ts, keys, values, expect_headers, strict=True))
    ]


def test_the_builder_refuses_payloads_that_do_not_fit() -> None:
    from weir.protocols.kafka._records import build_records

    stored = to_weir(parse_batch(build_batch(0, [1, 2], [b"k", None], [b"v", b"w"])))
    payload = bytes(stored[72:])
    with pytest.raises(ValueError):
        build_records(payload[:-1], 0x04, 2, 0, b"x")
    with pytest.raises(ValueError):
        build_records(payload, 0x04 | 0x08, 2, 0, b"x")  # header lengths it does not have
    with pytest.raises(ValueError):
        build_records(payload, 0x04, 10**6, 0, b"x")
