"""Parts of stored batches as batches of their own (what a subscription's deliveries
carry): every field of every record survives, the CRCs are right, and only batches that
are mostly not delivered are cut."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from weir.storage.batch import decode_records, iter_batches, parse_header, stamp_header
from weir.storage.batch_encoding import encode_batch
from weir.storage.batch_slices import slice_batch, trim_chunks
from weir.storage.codecs import Codec


def stored(batch: bytes, base: int, written_at: int = 1_700_000_000_123) -> bytes:
    h = parse_header(batch)
    return stamp_header(batch, h, base, written_at) + batch[h.payload_start :]


@st.composite
def batches(draw: st.DrawFn) -> tuple[bytes, int]:
    n = draw(st.integers(1, 40))
    data = [draw(st.binary(max_size=30)) for _ in range(n)]
    keys = draw(st.one_of(st.none(), st.lists(st.binary(max_size=8), min_size=n, max_size=n)))
    headers = draw(
        st.one_of(
            st.none(),
            st.lists(
                st.one_of(st.none(), st.dictionaries(st.text(min_size=1, max_size=4), st.text())),
                min_size=n,
                max_size=n,
            ),
        )
    )
    seqs = sorted(draw(st.sets(st.integers(0, 2**40), min_size=n, max_size=n)))
    created = draw(st.lists(st.integers(0, 2**42), min_size=n, max_size=n))
    codec = draw(st.sampled_from([Codec.RAW, Codec.ZSTD, Codec.LZ4, Codec.GZIP]))
    batch = encode_batch(
        data,
        producer_id="p",
        seq_nos=seqs if draw(st.booleans()) else None,
        first_seq_no=seqs[0],
        created_at=created if draw(st.booleans()) else created[0],
        keys=keys,
        headers=headers,
        codec=codec,
    )
    return stored(batch, draw(st.integers(0, 2**40))), n


@settings(max_examples=100, deadline=None)
@given(batches(), st.data())
def test_a_slice_holds_exactly_those_records_with_every_field(
    b: tuple[bytes, int], data: st.DataObject
) -> None:
    buf, n = b
    lo = data.draw(st.integers(0, n - 1))
    hi = data.draw(st.integers(lo + 1, n))
    h = parse_header(buf)
    part = slice_batch(buf, 0, h, lo, hi)
    ((_, ph),) = iter_batches(part)  # header and payload CRCs check out
    assert (ph.base_offset, ph.record_count, ph.written_at) == (
        h.base_offset + lo,
        hi - lo,
        h.written_at,
    )
    assert ph.producer_id == "p"
    assert decode_records(part) == decode_records(buf)[lo:hi]


def test_trim_cuts_only_the_batches_mostly_not_delivered() -> None:
    small = stored(encode_batch([b"a", b"b"]), 0)  # 0..1
    big = stored(encode_batch([b"%d" % i for i in range(100)], keys=[b"k"] * 100), 2)  # 2..101
    tail = stored(encode_batch([b"z"]), 102)  # 102
    chunk = small + big + tail
    # 1, then 10..19 of the big one: the small batch is kept whole, the big one cut
    out = trim_chunks([chunk], [1, *range(10, 20)])
    parts = [h for c in out for _, h in iter_batches(c)]
    assert [(h.base_offset, h.record_count) for h in parts] == [(0, 2), (2, 18)]
    assert sum(len(c) for c in out) < len(chunk) / 3
    # most of the big one: sent as stored, without the batch after it
    out = trim_chunks([chunk], list(range(5, 95)))
    assert b"".join(bytes(c) for c in out) == big
    assert [r.offset for r in decode_records(out[0])] == list(range(2, 102))
