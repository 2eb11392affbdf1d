"""write_many's column checks (done by column, in C, since issue 26): any seq_nos column is
taken exactly when every value is a non-negative int and they strictly increase, and keys
of every accepted type come out as bytes; anything else is a BadRequestError."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weir.client.write_batching import WriteBatching
from weir.errors import BadRequestError


class Columns(WriteBatching):
    """Only the column checks (no connection, no buffer)."""

    def __init__(self) -> None:
        pass


seq_values = st.one_of(st.integers(-3, 40), st.booleans(), st.floats(0, 5), st.none(), st.just("1"))


@given(st.lists(seq_values, min_size=1, max_size=8))
def test_seq_nos_are_taken_exactly_when_valid(seqs: list[Any]) -> None:
    valid = all(isinstance(s, int) and s >= 0 for s in seqs) and all(
        a < b for a, b in pairwise(seqs)
    )
    values = [b"v"] * len(seqs)
    if valid:
        Columns()._prepare_many(values, None, None, seqs, None)
    else:
        with pytest.raises(BadRequestError):
            Columns()._prepare_many(values, None, None, seqs, None)


@given(
    st.lists(
        st.one_of(st.none(), st.binary(max_size=4), st.text(max_size=4), st.integers()),
        min_size=1,
        max_size=8,
    )
)
def test_keys_of_every_type(keys: list[Any]) -> None:
    values = [b"v"] * len(keys)
    if any(isinstance(k, int) for k in keys):
        with pytest.raises(BadRequestError):
            Columns()._prepare_many(values, keys, None, None, None)
        return
    _, ks, sizes, _ = Columns()._prepare_many(values, keys, None, None, None)
    want = [b"" if k is None else k.encode() if isinstance(k, str) else k for k in keys]
    assert ks == want
    assert sizes == [1 + len(k) for k in want]
