"""The segment records' state machine: only COPY_STARTED -> COPY_FINISHED ->
DELETE_STARTED -> DELETE_FINISHED (and an abandoned copy's COPY_STARTED ->
DELETE_STARTED) are legal; records round-trip; two copies of one blob never share a key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weir.errors import InternalError
from weir.storage.tiered.remote_metadata import (
    RemoteSegment,
    SegmentState,
    record_op,
    started,
)

LEGAL = {
    (SegmentState.COPY_STARTED, SegmentState.COPY_FINISHED),
    (SegmentState.COPY_STARTED, SegmentState.DELETE_STARTED),
    (SegmentState.COPY_FINISHED, SegmentState.DELETE_STARTED),
    (SegmentState.DELETE_STARTED, SegmentState.DELETE_FINISHED),
}


def rec(key: str = "segments/a") -> RemoteSegment:
    return started(7 << 32 | 1, 100, 50, key, 4096, 1, 2, 10)


@given(st.lists(st.sampled_from(list(SegmentState)), max_size=6))
def test_only_legal_moves_succeed(moves: list[SegmentState]) -> None:
    r = rec()
    for m in moves:
        if (r.state, m) in LEGAL:
            r = r.moved(m, 20)
            assert r.state == m
        else:
            with pytest.raises(InternalError):
                r.moved(m, 20)


def test_round_trip_and_distinct_keys_per_copy() -> None:
    a = rec("segments/a").moved(SegmentState.COPY_FINISHED, 30, object_size=9, object_crc=5)
    op = record_op(a)
    assert RemoteSegment.unpack(op.key, op.value) == a  # type: ignore[arg-type]
    assert rec("segments/a").key() != rec("segments/b").key()
    gone = record_op(
        a.moved(SegmentState.DELETE_STARTED, 40).moved(SegmentState.DELETE_FINISHED, 50)
    )
    assert gone.value is None and gone.key == a.key()  # the record is removed
