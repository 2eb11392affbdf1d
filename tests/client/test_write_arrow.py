"""write_many of Arrow columns (the Spark sink's path since issue 26): the batches it
sends are byte for byte those of the same messages given as lists, it keeps the order
with messages written one by one, and bad columns get write_many's errors."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import weir
from tests.conftest import ServerProcess
from weir.client.write_batching import WriteBatching
from weir.client.writer_settings import WriterSettings
from weir.client.writer_state import WriterState
from weir.errors import BadRequestError
from weir.storage.batch import decode_records


class Captive(WriteBatching):
    """A writer's buffer and batching, no connection: `drain` takes what it would send."""

    def __init__(self, s: WriterSettings) -> None:
        WriterState.__init__(self, None, "t", s, None)  # type: ignore[arg-type]

    def _wrote_threadsafe(self, wake: bool) -> None:
        pass

    def drain(self) -> list[tuple[bytes, int, int]]:
        out: list[tuple[bytes, int, int]] = []
        while True:
            sent = self._take()
            if not sent:
                return out
            # a request boundary matters too: mark it
            out.extend((b.data, b.count, b.nbytes) for b in sent)
            out.append((b"--request--", 0, 0))


def _settings(batch_bytes: int, batch_msgs: int, request_bytes: int) -> WriterSettings:
    return WriterSettings(
        producer_id="p-1",
        max_batch_bytes=batch_bytes,
        max_batch_messages=batch_msgs,
        max_request_bytes=request_bytes,
        max_message_bytes=1 << 20,
    )


rows = st.lists(
    st.tuples(
        st.binary(max_size=40),
        st.one_of(st.none(), st.just(b""), st.binary(min_size=1, max_size=6)),
        st.integers(1, 3),  # the gap to the previous seq_no
        st.integers(-5, 5),  # created_at offset
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(
    rows,
    st.integers(1, 4),  # how many write_many calls
    st.integers(16, 400),
    st.integers(1, 20),
    st.integers(16, 1200),
    st.booleans(),  # keys as strings
    st.booleans(),  # one created_at for all
    st.booleans(),  # seq_nos: automatic
)
def test_arrow_batches_equal_list_batches(
    rs: list[tuple[bytes, bytes | None, int, int]],
    calls: int,
    batch_bytes: int,
    batch_msgs: int,
    request_bytes: int,
    str_keys: bool,
    one_created: bool,
    auto_seq: bool,
) -> None:
    s = _settings(batch_bytes, batch_msgs, request_bytes)
    by_list, by_arrow = Captive(s), Captive(s)
    seqs = [int(x) for x in np.cumsum([g for _, _, g, _ in rs]) + 7]
    created = [1_700_000_000_000 + c for *_, c in rs]
    keys: list[Any] = [k for _, k, _, _ in rs]
    if str_keys:
        keys = [None if k is None else k.hex() for k in keys]
    cut = sorted({0, len(rs), *(len(rs) * i // calls for i in range(1, calls))})
    for a, b in pairwise(cut):
        vals = [v for v, *_ in rs[a:b]]
        sq = None if auto_seq else seqs[a:b]
        cr: Any = created[a] if one_created else created[a:b]
        by_list.write_many_threadsafe(vals, keys[a:b], None, sq, cr)
        by_arrow.write_many_threadsafe(
            pa.array(vals, pa.binary()),
            pa.array(keys[a:b], pa.string() if str_keys else pa.binary()),
            None,
            None if sq is None else np.asarray(sq),
            cr if one_created else np.asarray(cr),
        )
        assert by_arrow._blocks  # the columns were taken as columns
    assert by_arrow._unacked == by_list._unacked == len(rs)
    assert by_arrow._buf_bytes == by_list._buf_bytes
    assert by_arrow.drain() == by_list.drain()
    assert by_arrow._buf_bytes == by_list._buf_bytes == 0


def _decoded(sent: list[tuple[bytes, int, int]]) -> list[bytes]:
    out: list[bytes] = []
    for data, n, _ in sent:
        if n:
            out.extend(r.data for r in decode_records(data))
    return out


def test_order_kept_with_messages_written_one_by_one() -> None:
    w = Captive(_settings(1 << 20, 1000, 8 << 20))
    w.write_threadsafe(b"a", seq_no=1)
    w.write_many_threadsafe(pa.array([b"b", b"c"]), None, None, np.array([2, 3]), None)
    assert not w._blocks  # behind a buffered message: taken one by one
    w2 = Captive(_settings(1 << 20, 1000, 8 << 20))
    w2.write_many_threadsafe(pa.array([b"a", b"b"]), None, None, np.array([1, 2]), None)
    w2.write_threadsafe(b"c", seq_no=3)
    w2.write_many_threadsafe(pa.array([b"d"]), None, None, range(4, 5), None)
    assert _decoded(w.drain()) == [b"a", b"b", b"c"]
    assert _decoded(w2.drain()) == [b"a", b"b", b"c", b"d"]


@pytest.mark.parametrize(
    ("values", "kw", "error"),
    [
        (pa.array([b"a", None]), {}, "got NoneType"),
        (pa.array([1, 2]), {}, "must be bytes or str"),
        (pa.array([b"a", b"b"]), {"seq_nos": np.array([2, 2])}, "strictly increasing"),
        (pa.array([b"a", b"b"]), {"seq_nos": np.array([-1, 2])}, "non-negative"),
        (pa.array([b"a", b"b"]), {"seq_nos": np.array([0.5, 2.0])}, "non-negative ints"),
        (pa.array([b"a", b"b"]), {"seq_nos": np.array([1])}, "seq_nos has 1 entries"),
        (pa.array([b"a", b"b"]), {"keys": pa.array([b"k"])}, "keys has 1 entries"),
        (pa.array([b"a"]), {"keys": pa.array([3])}, "key must be bytes or str"),
    ],
)
def test_bad_columns_get_write_manys_errors(values: Any, kw: dict[str, Any], error: str) -> None:
    w = Captive(_settings(1 << 20, 1000, 8 << 20))
    with pytest.raises(BadRequestError, match=error):
        w.write_many_threadsafe(
            values, kw.get("keys"), None, kw.get("seq_nos", np.array([1, 2])[: len(values)]), None
        )
    assert w._unacked == 0 and not w._blocks and not w._buf.data  # nothing taken


def test_seq_nos_continue_across_calls() -> None:
    w = Captive(_settings(1 << 20, 1000, 8 << 20))
    w.write_many_threadsafe(pa.array([b"a", b"b"]), None, None, np.array([5, 6]), None)
    with pytest.raises(BadRequestError, match="not above the previous 6"):
        w.write_many_threadsafe(pa.array([b"c"]), None, None, np.array([6]), None)
    with pytest.raises(BadRequestError, match="either give every message a seq_no"):
        w.write_many_threadsafe(pa.array([b"c"]), None, None, None, None)


def test_arrow_columns_through_a_server(shared_server: ServerProcess, topic_name: str) -> None:
    """The sync client's writer (native TCP) sends Arrow columns; a reader gets every
    message with its key, in order; the same seq_nos again are skipped as duplicates."""
    vals = [b"v%d" % i for i in range(5000)]
    keys = [None if i % 7 == 0 else b"k%d" % (i % 13) for i in range(5000)]
    with weir.Client(shared_server.endpoint) as client:
        client.create_topic(topic_name, 1)
        for _ in range(2):  # the second time: all duplicates
            with client.writer(topic_name, producer_id="arrow", partition=0) as w:
                for a in range(0, 5000, 1000):
                    w.write_many(
                        pa.array(vals[a : a + 1000]),
                        keys=pa.array(keys[a : a + 1000]),
                        seq_nos=np.arange(a, a + 1000) * 2 + 1,
                    )
        got = [m for c in client.read_range(topic_name, 0, 0) for m in c.messages()]
    assert [m.data for m in got] == vals
    assert [m.key or None for m in got] == keys
    assert [m.seq_no for m in got] == [i * 2 + 1 for i in range(5000)]
