"""Offset-range reads return exactly the range asked for, whatever the stored batch boundaries."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import weir
import weir.aio
from tests.conftest import ServerProcess

TOPIC = "range_reads"
COUNT = 1000


@pytest.fixture(scope="module")
def ranged(shared_server: ServerProcess) -> Iterator[weir.Client]:
    """1,000 messages in stored batches of 1 to 97 messages (offsets 0..999, data = offset)."""
    c = weir.Client(shared_server.endpoint)
    c.create_topic(TOPIC)
    with c.writer(TOPIC, producer_id="ranges") as w:
        n = 0
        size = 1
        while n < COUNT:
            take = min(size, COUNT - n)
            w.write_many([b"%d" % i for i in range(n, n + take)])
            w.flush()  # one request: these messages end up in batches of their own
            n += take
            size = size * 3 % 97 + 1
    yield c
    c.close()


def offsets(client: weir.Client, lo: int, hi: int, **kw: int) -> list[int]:
    got = [
        m.offset
        for chunk in client.read_range(TOPIC, 0, lo, hi, max_bytes=kw.get("max_bytes", 4 << 20))
        for m in chunk.messages(kw.get("skip_to"))
    ]
    return got


def test_one_offset_out_of_a_big_batch(ranged: weir.Client) -> None:
    # the reported defect: read_range(t, 0, 500, 501) gave 1,000 messages, .messages(500) 500
    chunks = list(ranged.read_range(TOPIC, 0, 500, 501))
    assert [m.offset for c in chunks for m in c.messages()] == [500]
    assert [m.offset for c in chunks for m in c.messages(500)] == [500]
    assert [m.data for c in chunks for m in c.messages(0)] == [b"500"]  # never before the range
    assert [m.offset for c in chunks for m in c.messages(501)] == []


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    lo=st.integers(0, COUNT + 5),
    length=st.integers(0, 300),
    skip=st.integers(0, 200),
    max_bytes=st.sampled_from([1, 200, 4096, 4 << 20]),
    open_end=st.booleans(),
)
def test_any_range_reads_exactly_its_messages(
    ranged: weir.Client, lo: int, length: int, skip: int, max_bytes: int, open_end: bool
) -> None:
    hi = -1 if open_end else lo + length
    want_hi = COUNT if open_end else min(lo + length, COUNT)
    assert offsets(ranged, lo, hi, max_bytes=max_bytes) == list(range(lo, want_hi))
    # messages(x) starts at x inside the range, never outside it
    assert offsets(ranged, lo, hi, max_bytes=max_bytes, skip_to=lo + skip) == list(
        range(lo + skip, want_hi)
    )


async def test_asyncio_twin_reads_exactly_its_range(
    ranged: weir.Client, shared_server: ServerProcess
) -> None:
    async with weir.aio.Client(shared_server.endpoint) as c:
        chunks = [ch async for ch in c.read_range(TOPIC, 0, 10, 13)]
    assert [m.data for ch in chunks for m in ch.messages()] == [b"10", b"11", b"12"]
