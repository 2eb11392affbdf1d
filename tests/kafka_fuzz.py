"""Fuzzing the Kafka front from valid input: valid request frames (every served API and
version) and valid record batches (every compression, keys, nulls, headers), then one
mutation each: a bit flip, a truncation, inserted or deleted bytes, a length or count
field set to a boundary value. For record batches the CRC can then be made right again,
so the record parser behind it (the C extension) meets the damage.

A decoder may answer damaged input in two ways only: KafkaCodecError / RecordsError, or
a result. Anything else is a crash."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c
from hypothesis import strategies as st

from weir.protocols.kafka import messages as m
from weir.protocols.kafka.codec import Api, encode_request_frame
from weir.protocols.kafka.records import GZIP, LZ4, NONE, SNAPPY, ZSTD, build_batch


def sample_body(api: Api, version: int) -> dict:
    """A request of ``api`` with a value in every field (arrays of two elements)."""

    def fill(fields: list, depth: int = 0) -> dict:
        out: dict = {}
        for f in fields:
            if version not in f.versions or f.tag is not None:
                continue
            t = f.type
            if t == "[]":
                out[f.name] = [fill(f.fields, depth + 1) for _ in range(2)]
            elif t == "[]string":
                out[f.name] = ["a", "bc"]
            elif t.startswith("[]"):
                out[f.name] = [1, 2]
            elif t == "string":
                out[f.name] = "topic-x"
            elif t == "records":
                out[f.name] = sample_batches()[0]
            elif t == "bytes":
                out[f.name] = b"\x00\x01\x02"
            elif t == "bool":
                out[f.name] = True
            elif t == "uuid":
                out[f.name] = bytes(range(16))
            else:
                out[f.name] = 1
        return out

    return fill(api.request_fields)


def sample_frames() -> list[bytes]:
    """One valid request frame (size prefix removed) per served API and version."""
    out = []
    for api in m.ALL:
        for v in range(api.min_version, api.max_version + 1):
            out.append(encode_request_frame(api, v, 7, sample_body(api, v))[4:])
    return out


def sample_batches() -> list[bytes]:
    out = []
    for codec in (NONE, GZIP, SNAPPY, LZ4, ZSTD):
        out.append(
            build_batch(
                0,
                [1000, 1001, 1500],
                [b"k", None, b""],
                [b"v" * 40, None, b"x"],
                [[("h", b"1"), ("n", None)], [], [("k2", b"\xff")]],
                producer_id=5,
                producer_epoch=0,
                base_sequence=0,
                compression=codec,
            )
        )
    return out


@dataclass(frozen=True)
class Mutation:
    kind: str
    original: bytes
    damaged: bytes


def fix_crc(batch: bytes) -> bytes:
    """The batch with its CRC recomputed (so the structure behind it meets the damage)."""
    if len(batch) < 61:
        return batch
    buf = bytearray(batch)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


@st.composite
def mutated(draw: st.DrawFn, originals: list[bytes], crc: bool = False) -> Mutation:
    data = draw(st.sampled_from(originals))
    kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "boundary"]))
    buf = bytearray(data)
    pos = draw(st.integers(0, max(0, len(buf) - 1)))
    if kind == "flip":
        buf[pos] ^= 1 << draw(st.integers(0, 7))
    elif kind == "truncate":
        del buf[pos:]
    elif kind == "insert":
        buf[pos:pos] = draw(st.binary(min_size=1, max_size=8))
    elif kind == "delete":
        del buf[pos : pos + draw(st.integers(1, 8))]
    else:
        value = draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF, 0x7FFFFFFF, 0xFFFFFFFF]))
        width = draw(st.sampled_from([1, 2, 4]))
        chunk = value.to_bytes(8, "big")[-width:]
        buf[pos : pos + width] = chunk
    damaged = bytes(buf)
    if crc and draw(st.booleans()):
        damaged = fix_crc(damaged)
    return Mutation(kind, data, damaged)
