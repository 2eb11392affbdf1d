"""The reader's Message tuples, built in C (`weir.client._message_rows`): the same messages
the columns say, for any columns (hypothesis), and clear errors for columns that do not
fit, where reading past a list's end would crash the process.

The fuzzing harness (tests/batch_fuzz.py, `decode_or_refuse`) also reads every batch the
broker accepts through the reader's decoding and compares the messages with the stored
records."""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weir.client._message_rows import rows
from weir.client.messages import EMPTY_HEADERS, Message

I64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def columns(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 30))
    col = lambda s: draw(st.one_of(st.none(), st.lists(s, min_size=n, max_size=n + 3)))  # noqa: E731
    return {
        "n": n,
        "first": draw(st.integers(0, 2**62)),
        "seqs": draw(st.one_of(st.integers(0, 2**62), st.lists(I64, min_size=n, max_size=n))),
        "created": draw(st.one_of(I64, st.lists(I64, min_size=n, max_size=n))),
        "keys": col(st.binary(max_size=8)),
        "data": draw(st.lists(st.binary(max_size=20), min_size=n, max_size=n + 2)),
        "headers": col(st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2)),
    }


def reference(c: dict[str, Any], session: object) -> list[Message]:
    """What the columns say, in plain Python: the specification of `rows`."""
    n = c["n"]
    out = []
    for i in range(n):
        seqs, created = c["seqs"], c["created"]
        out.append(
            Message(
                "t",
                3,
                c["first"] + i,
                seqs + i if isinstance(seqs, int) else seqs[i],
                created if isinstance(created, int) else created[i],
                77,
                "p",
                c["keys"][i] if c["keys"] is not None else b"",
                c["data"][i],
                c["headers"][i] if c["headers"] is not None else EMPTY_HEADERS,
                session,
            )
        )
    return out


def built(c: dict[str, Any], session: object) -> Any:
    return rows(
        Message, "t", 3, c["first"], c["n"], c["seqs"], c["created"], 77, "p",
        c["keys"], c["data"], c["headers"], session, b"", EMPTY_HEADERS,
    )  # fmt: skip


@given(columns())
def test_rows_are_the_messages_the_columns_say(c: dict[str, Any]) -> None:
    session = object()
    got = list(built(c, session))
    assert got == reference(c, session)
    assert all(type(m) is Message for m in got)
    assert all(m.session is session for m in got)


def test_messages_are_freed_as_the_loop_drops_them() -> None:
    data = [b"x" * 10 for _ in range(1000)]
    it = rows(Message, "t", 0, 0, 1000, 1, 5, 6, "p", None, data, None, None, b"", EMPTY_HEADERS)
    assert it.__length_hint__() == 1000
    first = next(it)
    assert sys.getrefcount(first) == 2  # the iterator keeps none of them
    del first
    gc.collect()
    assert sum(1 for _ in it) == 999 and it.__length_hint__() == 0


def test_a_column_that_shrank_while_iterating_is_an_error_not_a_crash() -> None:
    data = [b"a", b"b", b"c"]
    it = rows(Message, "t", 0, 0, 3, 1, 5, 6, "p", None, data, None, None, b"", EMPTY_HEADERS)
    assert next(it).data == b"a"
    data.clear()  # e.g. someone cleared Batch.values in the loop
    with pytest.raises(RuntimeError, match="data column changed"):
        next(it)
    assert list(it) == []  # ended


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ({"data": [b"a"]}, ValueError, "data column has 1 items for 2"),
        ({"keys": [b"k"]}, ValueError, "key column has 1 items for 2"),
        ({"data": (b"a", b"b")}, TypeError, "data column must be a list"),
        ({"data": None}, TypeError, "data column must be a list"),
        ({"seqs": None}, TypeError, "seq_no column must be an int or a list"),
        ({"created": "x"}, TypeError, "created_at column must be a list or None"),
        ({"count": -1}, ValueError, "count of at least 0"),
        ({"cls": dict}, TypeError, "builds a NamedTuple"),
        ({"cls": type(sys.flags)}, TypeError, "builds a NamedTuple"),  # hidden fields
        ({"cls": tuple}, TypeError, "builds a NamedTuple"),
        ({"first": 2**64}, OverflowError, "too big"),
        ({"first": 2**63 - 1}, OverflowError, "offsets would pass"),
        ({"seqs": 2**63 - 1}, OverflowError, "seq_nos would pass"),
    ],
)
def test_columns_that_do_not_fit_are_refused(args: dict[str, Any], error: type, match: str) -> None:
    a: dict[str, Any] = {
        "cls": Message, "first": 0, "count": 2, "seqs": 1, "created": 5,
        "keys": None, "data": [b"a", b"b"], "headers": None,
    }  # fmt: skip
    a.update(args)
    with pytest.raises(error, match=match):
        rows(
            a["cls"], "t", 0, a["first"], a["count"], a["seqs"], a["created"], 6, "p",
            a["keys"], a["data"], a["headers"], None, b"", EMPTY_HEADERS,
        )  # fmt: skip
