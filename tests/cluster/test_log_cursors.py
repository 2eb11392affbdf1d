"""A subscription's cursor as a position of a replicated partition's log
(`weir.broker.cluster.log_cursors`): the encoding round-trips, keeps only what is not
acknowledged yet (ranges above mark-delete, merged; counts of unacknowledged offsets),
stays small for many acks with few gaps, and refuses bytes that are not a cursor."""

from __future__ import annotations

import contextlib
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weir.broker.cluster.log_cursors import (
    decode_sub_position,
    encode_sub_position,
    position_key,
)
from weir.broker.subscriptions.ranges import RangeSet
from weir.broker.subscriptions.settings import InitialPosition, SubscriptionMeta, SubscriptionType
from weir.errors import CorruptDataError

metas = st.builds(
    SubscriptionMeta,
    st.text(min_size=1, max_size=40).filter(lambda s: "/" not in s),
    st.sampled_from(list(SubscriptionType)),
    st.sampled_from([InitialPosition.EARLIEST, InitialPosition.LATEST]),
    st.integers(0, 2**48),
    st.integers(0, 100),
    st.text(max_size=40),
)
offsets = st.integers(0, 10_000)


def acked_of(ranges: list[tuple[int, int]]) -> set[int]:
    return {o for a, b in ranges for o in range(a, b)}


@given(
    metas,
    offsets,
    st.lists(st.tuples(offsets, st.integers(1, 50)), max_size=30),
    st.dictionaries(offsets, st.integers(0, 20), max_size=30),
)
def test_a_cursor_round_trips_keeping_what_is_not_acknowledged(
    meta: SubscriptionMeta,
    mark: int,
    spans: list[tuple[int, int]],
    counts: dict[int, int],
) -> None:
    acked = RangeSet([(a, a + n) for a, n in spans])
    raw = encode_sub_position(meta, mark, acked, counts)
    got_meta, got_mark, got_acked, got_counts = decode_sub_position(raw)
    assert got_meta == meta
    assert got_mark == mark
    # every offset acknowledged above mark-delete stays acknowledged, nothing else is
    want = {o for o in acked_of(list(acked)) if o >= mark}
    assert acked_of(list(got_acked)) == want
    # compaction: disjoint, sorted, merged ranges, all above mark-delete
    pairs = list(got_acked)
    assert all(a < b for a, b in pairs)
    assert all(b1 < a2 for (_, b1), (a2, _) in itertools.pairwise(pairs))
    assert all(a >= mark for a, _ in pairs)
    # counts kept for what is still to deliver: above mark-delete, not acked, > 0
    assert got_counts == {o: n for o, n in counts.items() if n > 0 and o >= mark and o not in want}
    # a cursor decoded and encoded again is the same bytes
    assert encode_sub_position(got_meta, got_mark, got_acked, got_counts) == raw


def test_many_acks_with_few_gaps_stay_small() -> None:
    meta = SubscriptionMeta("s", SubscriptionType.SHARED, InitialPosition.EARLIEST, 1)
    acked = RangeSet()
    for o in range(100, 1_000_000):
        if o % 250_000:  # a gap every 250 000 acks
            acked.add(o)
    raw = encode_sub_position(meta, 0, acked, {})
    assert len(raw) < 400  # 5 ranges and the metadata, not a million offsets


@given(st.binary(max_size=200))
def test_bytes_that_are_not_a_cursor_are_a_typed_error(raw: bytes) -> None:
    with contextlib.suppress(CorruptDataError):  # or a cursor, by chance
        decode_sub_position(raw)


@pytest.mark.parametrize("cut", [1, 5, 20, -1], ids=["header", "header-2", "in-meta", "in-ranges"])
def test_a_cut_cursor_is_refused(cut: int) -> None:
    meta = SubscriptionMeta("s", SubscriptionType.FAILOVER, InitialPosition.LATEST, 7)
    raw = encode_sub_position(meta, 3, RangeSet([(5, 9), (12, 20)]), {})
    with pytest.raises(CorruptDataError):
        decode_sub_position(raw[:cut])


def test_the_position_names_the_subscription() -> None:
    assert position_key("orders") == "sub:orders"
