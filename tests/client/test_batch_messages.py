"""`Batch` builds its `Message` tuples one at a time when iterated (so a loop that drops
each one leaves nothing for the garbage collector), and the whole list for `messages`:
both give the same messages, in order, from any offset into any mix of stored batches."""

from __future__ import annotations

import gc

from hypothesis import given, settings
from hypothesis import strategies as st

from weir.client.messages import Batch, decode_parts
from weir.storage.batch import iter_batches, stamp_header
from weir.storage.batch_encoding import encode_batch

rows = st.lists(
    st.tuples(
        st.binary(max_size=20),
        st.one_of(st.none(), st.binary(min_size=1, max_size=5)),
        st.one_of(st.none(), st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2)),
    ),
    min_size=1,
    max_size=12,
)


def stored(batches: list[list[tuple[bytes, bytes | None, dict[str, str] | None]]]) -> bytes:
    """The batches as the broker stores them: consecutive offsets from 0, stamped."""
    out = bytearray()
    offset = 0
    for i, b in enumerate(batches):
        enc = encode_batch(
            [d for d, _, _ in b],
            producer_id=f"p{i}",
            first_seq_no=offset + 1,
            created_at=[1_700_000_000_000 + j for j in range(len(b))],
            keys=[k or b"" for _, k, _ in b] if any(k for _, k, _ in b) else None,
            headers=[h for _, _, h in b] if any(h for _, _, h in b) else None,
        )
        ((_, h),) = list(iter_batches(enc))
        head = stamp_header(enc, h, offset, 1_700_000_000_999)
        out += head + enc[len(head) :]
        offset += len(b)
    return bytes(out)


@settings(max_examples=60, deadline=None)
@given(st.lists(rows, min_size=1, max_size=4), st.integers(0, 30))
def test_iterating_a_batch_gives_its_messages(
    batches: list[list[tuple[bytes, bytes | None, dict[str, str] | None]]], start: int
) -> None:
    chunk = stored(batches)
    flat = [r for b in batches for r in b]
    start = min(start, len(flat) - 1)
    batch = Batch("t", 3, decode_parts([chunk], start), len(chunk), session="s")
    streamed = list(batch)
    assert list(batch) == streamed  # iterating again builds them again, the same
    assert batch.messages == streamed  # the list
    assert list(batch) == streamed  # and after it, the list's own
    assert [m.offset for m in streamed] == list(range(start, len(flat)))
    assert [(m.data, m.key or None, dict(m.headers) or None) for m in streamed] == [
        (d, k, h or None) for d, k, h in flat[start:]
    ]
    assert all(m.topic == "t" and m.partition == 3 and m.session == "s" for m in streamed)


def test_a_message_loop_leaves_nothing_to_collect() -> None:
    chunk = stored([[(b"x" * 10, None, None)] * 500] * 4)
    batch = Batch("t", 0, decode_parts([chunk], 0), len(chunk), session=object())
    collections: list[int] = []
    gc.collect()
    gc.callbacks.append(lambda phase, info: collections.append(info["generation"]))
    try:
        n = 0
        for m in batch:
            n += len(m.data)
    finally:
        gc.callbacks.pop()
    assert n == 20_000
    # each Message is freed when the loop drops it: 2,000 of them never add up to a
    # young collection (a list of them did: the collector walked the whole batch)
    assert collections == []
