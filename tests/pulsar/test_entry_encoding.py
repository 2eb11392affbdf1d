"""The messages part of a batch entry built without protobuf (`records.uniform_messages`
and, for small messages, `records.uniform_layout` with numpy: the consume path's fast
cases) is byte for byte what the protobuf loop writes, for every size, event time and
sequence id, across the varint length boundaries."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from weir.protocols.pulsar import pulsar_api_pb2 as pb
from weir.protocols.pulsar.records import _plain_batch, entry_of, uniform_messages
from weir.storage.batch import parse_header
from weir.storage.batch_encoding import encode_batch

# ids near the varint length steps (2**7, 2**14, ...) and the top of the uint64 range
_EDGES = st.sampled_from([0, 1, 126, 127, 128, 16_383, 16_384, 2**21 - 3, 2**35, 2**63 - 50])
_SEQ = st.one_of(st.integers(0, 2**64 - 1 - 300), _EDGES)


def by_protobuf(data: list[bytes], event_time: int, first_seq: int) -> bytes:
    out = []
    for i, d in enumerate(data):
        smm = pb.SingleMessageMetadata(
            payload_size=len(d), event_time=event_time, sequence_id=first_seq + i
        ).SerializeToString()
        out.append(struct.pack(">I", len(smm)) + smm + d)
    return b"".join(out)


@settings(max_examples=300, deadline=None)
@given(
    size=st.one_of(st.integers(0, 300), st.sampled_from([127, 128, 16_384, 10_240])),
    n=st.integers(1, 300),
    event_time=st.one_of(st.integers(1, 2**64 - 1), st.just(1_795_700_885_087)),
    first_seq=_SEQ,
    fill=st.integers(0, 255),
)
def test_uniform_messages_match_the_protobuf_encoding(
    size: int, n: int, event_time: int, first_seq: int, fill: int
) -> None:
    data = [bytes([(fill + i) % 256]) * size for i in range(n)]
    expected = by_protobuf(data, event_time, first_seq)
    assert uniform_messages([memoryview(d) for d in data], size, event_time, first_seq) == expected
    md = pb.MessageMetadata(producer_name="p", sequence_id=first_seq, publish_time=1)
    meta, payload = _plain_batch(md, data, [event_time] * n, range(first_seq, first_seq + n))
    assert payload == expected
    assert pb.MessageMetadata.FromString(meta).num_messages_in_batch == n


@settings(max_examples=200, deadline=None)
@given(
    size=st.one_of(st.integers(0, 1100), st.sampled_from([1023, 1024, 10_240])),
    n=st.integers(2, 300),
    event_time=st.one_of(st.integers(1, 2**62), st.just(1_795_700_885_087)),
    first_seq=st.one_of(st.integers(0, 2**62), _EDGES),
    producer=st.sampled_from(["", "p-1"]),
    fill=st.integers(0, 255),
)
def test_a_stored_batch_of_one_size_makes_the_protobuf_entry(
    size: int, n: int, event_time: int, first_seq: int, producer: str, fill: int
) -> None:
    """`entry_of` on a stored batch (both fast paths and the seq ids of a batch with or
    without a producer) against metadata and messages written with protobuf."""
    data = [bytes([(fill + i) % 256]) * size for i in range(n)]
    batch = encode_batch(data, producer_id=producer, first_seq_no=first_seq, created_at=event_time)
    h = parse_header(batch, 0)
    first = first_seq if producer else h.base_offset
    meta, payload = entry_of(batch, 0, h)
    assert payload == by_protobuf(data, event_time, first)
    expected = pb.MessageMetadata(
        producer_name=producer,
        sequence_id=first,
        publish_time=max(0, h.written_at),
        num_messages_in_batch=n,
        highest_sequence_id=first + n - 1,
    )
    assert meta == expected.SerializeToString()
