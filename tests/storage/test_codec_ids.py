"""Per-message codec ids in the batch header: weir's own, and the ones it only records
(LZOP, the YDB API's custom ids 10000-19999), which must survive storage unchanged."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weir.errors import BadRequestError, BatchFormatError
from weir.storage.batch import HEADER_SIZE, decode_records, header_crc_of, parse_header
from weir.storage.batch_encoding import encode_batch, reencode_from
from weir.storage.codecs import CUSTOM_CODECS, LZOP, Codec, codec_id, codec_name, is_opaque

recorded = st.one_of(st.sampled_from([*Codec, LZOP]), st.integers(10000, 19999))
not_codecs = st.one_of(st.integers(0, 0), st.integers(6, 9999), st.integers(20000, 65535))


@given(recorded, st.lists(st.binary(max_size=50), min_size=1, max_size=20))
def test_a_recorded_codec_id_and_the_data_survive_encode_and_parse(
    data_codec: int, data: list[bytes]
) -> None:
    buf = encode_batch(data, producer_id="p", data_codec=data_codec)
    h = parse_header(buf)
    assert h.data_codec == data_codec
    assert [r.data for r in decode_records(buf)] == data  # stored as written
    if len(data) > 1:  # dedup cuts a batch without touching the codec
        assert parse_header(reencode_from(buf, h, 1)).data_codec == data_codec


@given(not_codecs)
def test_an_id_that_is_no_codec_is_refused_on_encode_and_on_parse(codec: int) -> None:
    with pytest.raises(BadRequestError):
        encode_batch([b"x"], data_codec=codec)
    buf = bytearray(encode_batch([b"x"], data_codec=Codec.RAW))  # no producer id
    buf[64:66] = codec.to_bytes(2, "little")
    buf[12:16] = header_crc_of(buf, 0, HEADER_SIZE).to_bytes(4, "little")  # a valid header CRC
    with pytest.raises(BatchFormatError, match="unknown codec"):
        parse_header(bytes(buf))


def test_a_batch_written_before_the_field_was_16_bits_reads_the_same() -> None:
    """The field was a u8 codec and a zero reserved byte: the same little-endian u16."""
    buf = encode_batch([b"gz"], data_codec=Codec.GZIP)
    assert buf[64:66] == bytes([Codec.GZIP, 0])
    assert parse_header(buf).data_codec == Codec.GZIP


@given(recorded)
def test_codec_names_round_trip(codec: int) -> None:
    assert codec_id(codec_name(codec)) == codec
    assert codec_id(codec) == codec
    assert is_opaque(codec) == (codec == LZOP or codec in CUSTOM_CODECS)


@pytest.mark.parametrize("name", ["custom-9999", "custom-20000", "custom-", "custom-x", "lz5", 7])
def test_unknown_codec_names_are_bad_requests(name: str | int) -> None:
    with pytest.raises(BadRequestError, match="unknown codec"):
        codec_id(name)
