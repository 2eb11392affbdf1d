"""Fuzzing from valid input: hypothesis strategies that build valid batches (and the wire
messages that carry them) and then damage them the way a bad client or a bad disk would.

Random bytes almost never get past a batch's magic and CRCs, so fuzzing with them tests
only the first check. Here every input starts as a valid `encode_batch` result and gets one
mutation: bit flips, a truncation, a splice with another valid batch, inserted or deleted
bytes, a header field or a column length set to a boundary value. Optionally both CRCs are
then made right again, so the structural checks behind the CRCs (lengths, counts, columns,
codecs, headers) are what meets the damage.

A decoder may answer damaged input in two ways only: a typed refusal (BatchFormatError for
batches, protobuf's DecodeError for wire messages) or a correct result. Any other exception
is a crash, and the tests let it fail them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import providers

from weir.client.messages import decode_chunks
from weir.errors import BatchFormatError
from weir.storage import batch as B
from weir.storage.batch import HEADER_SIZE, Record, decode_records
from weir.storage.batch_encoding import encode_batch
from weir.storage.codecs import Codec
from weir.storage.incoming import validate_incoming

header_maps = st.dictionaries(st.text(max_size=8), st.text(max_size=16), max_size=3)


@st.composite
def record_sets(
    draw: st.DrawFn, producer_id: str | None = None, max_records: int = 40, max_data: int = 300
) -> dict[str, Any]:
    """Keyword arguments of `encode_batch`: every column and codec, dense and sparse seq_nos."""
    n = draw(st.integers(1, max_records))
    data = draw(st.lists(st.binary(max_size=max_data), min_size=n, max_size=n))
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
        producer_id=draw(st.text(max_size=10)) if producer_id is None else producer_id,
    )


def valid_batches(
    producer_id: str | None = None, max_records: int = 40, max_data: int = 300
) -> st.SearchStrategy[bytes]:
    return record_sets(producer_id, max_records, max_data).map(lambda rs: encode_batch(**rs))


def reach_settings(max_examples: int) -> settings:
    """Settings of a "the fuzzing reaches every check" search: the same examples on every
    run (derandomized, see `same_examples_everywhere`), and no deadline or health check that
    a loaded machine could turn into a failure."""
    return settings(
        max_examples=max_examples,
        phases=[Phase.generate],
        database=None,
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )


@contextmanager
def same_examples_everywhere() -> Iterator[None]:
    """Hypothesis draws some values from the constants of every local module imported so
    far, so a derandomized search still got other examples in each xdist worker (it depends
    on what the worker ran before): a reach test passed alone and missed a check in CI.
    Inside this block those constants are left out, so the search is the same everywhere."""
    real = providers._get_local_constants
    providers._get_local_constants = providers.Constants
    providers.CONSTANTS_CACHE.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = real
        providers.CONSTANTS_CACHE.cache.clear()


# ------------------------------------------------------------------ mutations

# header fields a mutation may set: (name, offset, struct format)
HEADER_FIELDS = [
    ("version", 4, "<B"),
    ("codec", 5, "<B"),
    ("flags", 6, "<H"),
    ("length", 8, "<I"),
    ("count", 36, "<I"),
    ("first_seq", 40, "<Q"),
    ("last_seq", 48, "<Q"),
    ("created_base", 56, "<q"),
    ("data_codec", 64, "<B"),
    ("pid_len", 66, "<H"),
    ("raw_len", 68, "<I"),
]


def _boundaries(name: str, fmt: str, current: int) -> list[int]:
    """Values worth trying for a field: its type's limits, its neighbours, and for flags and
    codecs every flag bit toggled and every codec id (3 is an unused one)."""
    bits = struct.calcsize(fmt) * 8
    if fmt[-1].islower():  # signed
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    else:
        lo, hi = 0, (1 << bits) - 1
    cands = [lo, hi, 0, 1, current - 1, current + 1, current * 2, current // 2, current + 4096]
    if name == "flags":
        cands += [current ^ (1 << i) for i in range(7)]
    if name in ("codec", "data_codec"):
        cands += [1, 2, 3, 4, 5]
    return sorted({c for c in cands if lo <= c <= hi and c != current})


def recrc(buf: bytes | bytearray) -> bytes:
    """Both CRCs of a (damaged) batch made right again, as far as its header lets them be."""
    b = bytearray(buf)
    if len(b) < HEADER_SIZE:
        return bytes(b)
    pid_len = struct.unpack_from("<H", b, 66)[0]
    length = struct.unpack_from("<I", b, 8)[0]
    start = min(HEADER_SIZE + pid_len, len(b))
    struct.pack_into("<I", b, 32, B.crc32c(bytes(b[start : min(length, len(b))])))
    struct.pack_into("<I", b, 12, B.header_crc_of(b, 0, start))
    return bytes(b)


@dataclass(frozen=True)
class Mutation:
    """One damaged batch and how it was made (for the failure message)."""

    kind: str
    original: bytes
    damaged: bytes
    crc_fixed: bool

    def __repr__(self) -> str:
        return (
            f"Mutation({self.kind}, crc_fixed={self.crc_fixed}, "
            f"{len(self.original)} -> {len(self.damaged)} bytes, damaged={self.damaged!r})"
        )


@st.composite
def mutate(draw: st.DrawFn, buf: bytes, others: st.SearchStrategy[bytes]) -> tuple[str, bytes]:
    """One mutation of ``buf``: (what it did, the damaged bytes)."""
    b = bytearray(buf)
    n = len(b)
    pid_end = HEADER_SIZE + struct.unpack_from("<H", b, 66)[0]
    # where damage lands: the fixed header, the producer id or the payload (drawn first, as
    # hypothesis favours small positions and would otherwise mostly hit the magic)
    region = draw(st.sampled_from([(pid_end, n), (0, HEADER_SIZE), (HEADER_SIZE, pid_end)]))
    lo, hi = region if region[1] > region[0] else (0, n)

    def pos() -> int:
        return draw(st.integers(lo, hi - 1))

    kind = draw(
        st.sampled_from(
            ["count", "field", "column", "flip", "splice", "truncate", "insert", "delete"]
        )
    )
    if kind == "count":  # another record count, the seq_no range kept consistent with it
        (count, first, last) = struct.unpack_from("<IQQ", b, 36)
        new = draw(st.sampled_from(_boundaries("count", "<I", count)))
        struct.pack_into("<I", b, 36, new)
        if last - first == count - 1:  # dense: the range must match the count
            struct.pack_into("<Q", b, 48, min(first + max(new, 1) - 1, (1 << 64) - 1))
        return kind, bytes(b)
    if kind == "flip":
        for _ in range(draw(st.integers(1, 4))):
            b[pos()] ^= 1 << draw(st.integers(0, 7))
        return kind, bytes(b)
    if kind == "truncate":
        return kind, bytes(b[: pos()])
    if kind == "splice":  # a piece of another valid batch in place of a piece of this one
        other = draw(others)
        a = draw(st.integers(0, n))
        z = draw(st.integers(a, n))
        c = draw(st.integers(0, len(other)))
        d = draw(st.integers(c, len(other)))
        return kind, bytes(b[:a] + other[c:d] + b[z:])
    if kind == "insert":
        at = pos()
        return kind, bytes(b[:at] + draw(st.binary(min_size=1, max_size=16)) + b[at:])
    if kind == "delete":
        a = pos()
        z = draw(st.integers(a + 1, min(n, a + 16)))
        return kind, bytes(b[:a] + b[z:])
    if kind == "field":  # a header field set to a boundary value
        name, off, fmt = draw(st.sampled_from(HEADER_FIELDS))
        (cur,) = struct.unpack_from(fmt, b, off)
        struct.pack_into(fmt, b, off, draw(st.sampled_from(_boundaries(name, fmt, cur))))
        return f"field:{name}", bytes(b)
    # a u32 of the payload (the column lengths come first in it) set to a boundary value
    start = pid_end
    slots = (n - start) // 4
    if slots == 0:
        return "column:none", bytes(b)
    off = start + 4 * draw(st.integers(0, min(slots, 64) - 1))
    (cur,) = struct.unpack_from("<I", b, off)
    struct.pack_into("<I", b, off, draw(st.sampled_from(_boundaries("column", "<I", cur))))
    return "column", bytes(b)


@st.composite
def mutated_batches(
    draw: st.DrawFn, producer_id: str | None = None, fix_crc: bool | None = None
) -> Mutation:
    """A valid batch with one mutation, its CRCs made right again or not (drawn if None)."""
    buf = draw(valid_batches(producer_id, max_records=10, max_data=80))
    kind, damaged = draw(mutate(buf, valid_batches(producer_id, max_records=3, max_data=40)))
    fixed = draw(st.booleans()) if fix_crc is None else fix_crc
    if fixed:
        damaged = recrc(damaged)
    return Mutation(kind, buf, damaged, fixed)


def decode_or_refuse(buf: bytes) -> list[Record] | BatchFormatError:
    """What the broker and a reader make of ``buf``: its records, or the broker's typed refusal.

    Any other exception propagates: that is a crash of the decoder. So does a BatchFormatError
    from decoding a batch the broker accepted: it would store what no reader can read.
    """
    try:
        (inc,) = validate_incoming([buf])
    except BatchFormatError as exc:
        return exc
    records = decode_records(inc.buf)  # what the broker accepts, every reader must decode
    assert len(records) == inc.header.record_count
    # and the SDK's reader builds the same messages from it (weir.client.messages, whose
    # Message tuples are built in C: _message_rows.c)
    if inc.header.data_codec == Codec.RAW:
        got = [
            (m.offset, m.seq_no, m.created_at_ms, m.key, m.data, dict(m.headers))
            for m in decode_chunks("t", 0, [inc.buf], 0)
        ]
        want = [(r.offset, r.seq_no, r.created_at, r.key, r.data, r.headers) for r in records]
        assert got == want, "the reader's messages differ from the stored records"
    return records


# ------------------------------------------------------------------ wire messages


@st.composite
def wire_messages(draw: st.DrawFn) -> bytes:
    """A valid encoded message of the native protocol: the bulk ones weir encodes by hand
    (write batches, read data, range responses) and some that go through protobuf."""
    from weir.protocols.native import weir_pb2 as pb
    from weir.protocols.native import wire

    batches = draw(st.lists(valid_batches(max_records=3, max_data=40), min_size=0, max_size=3))
    off = st.integers(0, 2**62)
    kind = draw(st.sampled_from(["write", "data", "range", "init", "assigned"]))
    if kind == "write":
        return wire.encode_write_request(wire.RawWriteRequest(list(batches)))
    if kind == "data":
        return wire.encode_read_response(
            wire.RawReadData(draw(off), list(batches), draw(off), draw(off), draw(off))
        )
    if kind == "range":
        return wire.encode_range_response(
            wire.RawRangeResponse(list(batches), draw(off), draw(off), draw(off), draw(off))
        )
    if kind == "init":
        init = pb.WriteInit(topic=draw(st.text(max_size=8)), producer_id="p", partition=3)
        return bytes(pb.WriteRequest(init=init).SerializeToString())
    assigned = pb.PartitionAssigned(assignment_id=draw(off), topic="t", read_offset=draw(off))
    return bytes(pb.ReadResponse(assigned=assigned).SerializeToString())


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it); the position passes ``end`` if the varint is cut off."""
    n = shift = 0
    while pos < end:
        byte = buf[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return n, pos
    return n, end + 1


def _varint_spans(buf: bytes) -> list[tuple[int, int, int]]:
    """(start, end, value) of every varint a protobuf walk meets: tags, lengths and int
    values, in the message and in the messages nested in it (as far as the bytes parse)."""
    spans: list[tuple[int, int, int]] = []

    def walk(pos: int, end: int, depth: int) -> None:
        while pos < end:
            tag, after = _read_varint(buf, pos, end)
            if after > end:
                return
            spans.append((pos, after, tag))
            pos = after
            if tag & 7 == 0:
                value, after = _read_varint(buf, pos, end)
                if after > end:
                    return
                spans.append((pos, after, value))
                pos = after
            elif tag & 7 == 2:
                n, after = _read_varint(buf, pos, end)
                if after > end:
                    return
                spans.append((pos, after, n))
                pos = after
                if depth < 2 and pos + n <= end:
                    walk(pos, pos + n, depth + 1)
                pos += n
            else:
                return

    walk(0, len(buf), 0)
    return spans


@st.composite
def mutated_wire_messages(draw: st.DrawFn) -> tuple[str, bytes]:
    """A valid wire message with one mutation; "varint" sets a tag, length or value (found by
    walking the message) to a boundary value, the others are the batch mutations."""
    buf = draw(wire_messages())
    spans = _varint_spans(buf)
    if spans and draw(st.booleans()):
        a, z, cur = draw(st.sampled_from(spans))
        values = [0, 1, 2, cur - 1, cur + 1, cur + 100, 2**31, 2**63, 2**64 - 1, 2**70]
        value = draw(st.sampled_from([v for v in values if v >= 0 and v != cur]))
        return "varint", buf[:a] + _varint(value) + buf[z:]
    b = bytearray(buf)
    kind = draw(st.sampled_from(["flip", "truncate", "splice", "insert", "delete"]))
    n = len(b)
    if n == 0 or kind == "insert":
        at = draw(st.integers(0, n))
        return "insert", bytes(b[:at] + draw(st.binary(min_size=1, max_size=12)) + b[at:])
    if kind == "flip":
        for _ in range(draw(st.integers(1, 3))):
            b[draw(st.integers(0, n - 1))] ^= 1 << draw(st.integers(0, 7))
        return kind, bytes(b)
    if kind == "truncate":
        return kind, bytes(b[: draw(st.integers(0, n - 1))])
    if kind == "delete":
        a = draw(st.integers(0, n - 1))
        return kind, bytes(b[:a] + b[draw(st.integers(a + 1, min(n, a + 12))) :])
    other = draw(wire_messages())
    a = draw(st.integers(0, n))
    c = draw(st.integers(0, len(other)))
    return kind, bytes(b[:a] + other[c:])
