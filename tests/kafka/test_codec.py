"""The Kafka codec: golden bytes, every served API and version round-trips, bad bytes
raise KafkaCodecError (and nothing else)."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.protocols.kafka import messages as m
from weir.protocols.kafka.codec import (
    KafkaCodecError,
    UnsupportedVersionError,
    decode_request,
    decode_response_frame,
    encode_request_frame,
    encode_response,
)


def test_api_versions_v3_request_golden_bytes() -> None:
    # what librdkafka sends first: flexible header v2 (client id as int16 string + no tags)
    frame = bytes.fromhex(
        "00120003"  # api key 18, version 3
        "00000001"  # correlation id
        "0004"
        + b"kcat".hex()  # client id
        + "00"  # header tagged fields
        "0b"
        + b"librdkafka".hex()  # compact string: length + 1
        + "07"
        + b"2.16.0".hex()
        + "00"  # body tagged fields
    )
    header, api, body = decode_request(m.BY_KEY, frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (18, 3, 1)
    assert header.client_id == "kcat"
    assert api is m.API_VERSIONS
    assert body == {"client_software_name": "librdkafka", "client_software_version": "2.16.0"}


def test_api_versions_response_header_is_v0_even_when_flexible() -> None:
    out = encode_response(
        m.API_VERSIONS, 3, 9, {"api_keys": [{"api_key": 0, "min_version": 3, "max_version": 9}]}
    )
    assert out == bytes.fromhex(
        "00000013"  # size
        "00000009"  # correlation id, no header tags
        "0000"  # error code
        "02"
        "0000"
        "0003"
        "0009"
        "00"  # one api key (compact array), its tags
        "00000000"  # throttle
        "00"  # tags
    )


def test_metadata_v12_response_golden_bytes() -> None:
    body = {
        "brokers": [{"node_id": 0, "host": "h", "port": 9092}],
        "cluster_id": "c",
        "controller_id": 0,
        "topics": [],
    }
    out = encode_response(m.METADATA, 12, 1, body)
    assert out[4:] == bytes.fromhex(
        "00000001"
        "00"  # correlation id, header tags (flexible)
        "00000000"  # throttle
        "02"
        "00000000"
        "0268"
        "00002384"
        "00"
        "00"  # brokers: id, host "h", port, rack null, tags
        "0263"  # cluster id "c"
        "00000000"  # controller
        "01"  # no topics (cluster authorized operations: v8-10 only)
        "00"
    )


def _sample(api_fields: list, version: int) -> dict:
    """A message with a value in every field the version has (arrays of one element)."""
    out: dict = {}
    for f in api_fields:
        if version not in f.versions or f.tag is not None:
            continue
        t = f.type
        if t == "[]":
            out[f.name] = [_sample(f.fields, version)]
        elif t.startswith("[]"):
            out[f.name] = [1] if t != "[]string" else ["s"]
        elif t == "string":
            out[f.name] = "name"
        elif t in ("bytes", "records"):
            out[f.name] = b"\x01\x02"
        elif t == "bool":
            out[f.name] = True
        elif t == "uuid":
            out[f.name] = bytes(range(16))
        else:
            out[f.name] = 7
    return out


def _same(sent: object, got: object) -> bool:
    """``got`` holds everything ``sent`` has (decoders add the absent fields' defaults)."""
    if isinstance(sent, dict):
        return isinstance(got, dict) and all(_same(v, got.get(k)) for k, v in sent.items())
    if isinstance(sent, list):
        return isinstance(got, list) and len(sent) == len(got) and all(map(_same, sent, got))
    return sent == got


@pytest.mark.parametrize("api", m.ALL, ids=lambda a: a.name)
def test_every_served_version_round_trips(api: m.Api) -> None:
    for v in range(api.min_version, api.max_version + 1):
        body = _sample(api.request_fields, v)
        frame = encode_request_frame(api, v, 42, body)
        header, got_api, decoded = decode_request(m.BY_KEY, frame[4:])
        assert got_api is api and header.correlation_id == 42
        assert _same(body, decoded), (api.name, v)
        resp = _sample(api.response_fields, v)
        wire = encode_response(api, v, 43, resp)
        assert struct.unpack(">i", wire[:4])[0] == len(wire) - 4
        corr, back = decode_response_frame(api, v, wire[4:])
        assert corr == 43
        assert _same(resp, back), (api.name, v)


def test_unknown_tagged_fields_are_skipped() -> None:
    frame = encode_request_frame(m.HEARTBEAT, 4, 1, {"group_id": "g", "member_id": "x"})
    # replace the body's empty tag section with one unknown tag (tag 9, 3 bytes)
    tampered = frame[4:-1] + bytes([1, 9, 3, 0xAA, 0xBB, 0xCC])
    _, _, body = decode_request(m.BY_KEY, tampered)
    assert body["group_id"] == "g"


def test_bytes_after_the_message_are_ignored_as_kafka_does() -> None:
    # librdkafka 2.16's Metadata v12 for all topics: an i32 placeholder for the topic count
    # left as four zero bytes (a null compact array and three bytes more)
    frame = bytes.fromhex("0003000c00000005000772646b61666b610000000000010000")
    _, _, body = decode_request(m.BY_KEY, frame)
    assert body["topics"] is None


def test_unsupported_version_is_typed() -> None:
    frame = encode_request_frame(m.PRODUCE, 9, 5, {"topic_data": []})[4:]
    bad = frame[:2] + struct.pack(">h", 99) + frame[4:]
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(m.BY_KEY, bad)
    assert info.value.correlation_id == 5 and info.value.api_version == 99


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x00\x03",
        bytes.fromhex("0003000c00000001ffff00") + b"\xff\xff\xff\xff\x0f",  # varint too long
        bytes.fromhex("0003000100000001ffff") + b"\x7f\xff\xff\xff",  # array claims 2**31 topics
    ],
)
def test_bad_frames_raise_codec_errors(frame: bytes) -> None:
    with pytest.raises(KafkaCodecError):
        decode_request(m.BY_KEY, frame)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(m.ALL))
def test_random_bodies_decode_or_raise_codec_errors(tail: bytes, api: m.Api) -> None:
    for v in (api.min_version, api.max_version):
        head = struct.pack(">hhih", api.key, v, 1, -1) + (b"\x00" if api.flexible(v) else b"")
        with contextlib.suppress(KafkaCodecError):
            decode_request(m.BY_KEY, head + tail)
