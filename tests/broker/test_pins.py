"""Producer pins: one pin per producer under concurrency, derived from producer state,
gone with that state (retention) or no longer binding after the idle timeout."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.storage.conftest import make_batch
from weir.broker.broker import PINS, Broker
from weir.broker.config import BrokerConfig
from weir.errors import BadRequestError
from weir.storage.kv import put

HOUR_MS = 3_600_000


async def open_broker(path: Path, **kw: object) -> Broker:
    return await Broker.open(BrokerConfig(data_dir=path, retention_interval_s=3600, **kw))  # type: ignore[arg-type]


async def test_concurrent_first_sessions_of_a_producer_get_exactly_one_pin(
    tmp_path: Path,
) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=2)
    results = await asyncio.gather(
        b.resolve_partition("t", "p", partition=0),
        b.resolve_partition("t", "p", partition=1),
        return_exceptions=True,
    )
    won = [r for r in results if isinstance(r, int)]
    lost = [r for r in results if isinstance(r, BaseException)]
    assert len(won) == 1 and len(lost) == 1, results
    pinned = won[0]
    assert results.index(pinned) == pinned  # the winner got the partition it asked for
    assert isinstance(lost[0], BadRequestError)
    assert f"pinned to partition {pinned} of 't', not {1 - pinned}" in lost[0].message
    # the winner writes; its pin is the same after a restart, for either kind of session
    await b.write("t", pinned, make_batch(3, producer="p"))
    await b.close()
    b = await open_broker(tmp_path)
    assert await b.resolve_partition("t", "p") == pinned
    with pytest.raises(BadRequestError, match=f"pinned to partition {pinned}"):
        await b.resolve_partition("t", "p", partition=1 - pinned)
    assert b.last_seq_no("t", pinned, "p") == 3
    await b.close()


async def test_a_new_producer_costs_no_commit_and_no_stored_row(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=4)
    commits = b.store.committer.stats.commits
    parts = [await b.resolve_partition("t", f"anon-{i}") for i in range(20)]
    parts += [await b.resolve_partition("t", f"fixed-{i}", partition=i % 4) for i in range(20)]
    assert b.store.committer.stats.commits == commits  # no fsync to open a session
    assert list(b.store.kv.scan(PINS)) == []
    assert len(b.pins) == 40
    assert parts[20:] == [i % 4 for i in range(20)]
    await b.close()


async def test_pins_go_when_retention_removes_the_producers_messages(tmp_path: Path) -> None:
    # a producer's state outlives its messages until it has been idle this long
    b = await open_broker(tmp_path, producer_idle_timeout_ms=HOUR_MS)
    await b.create_topic("t", partitions=2, retention_ms=HOUR_MS)
    for i in range(5):
        p = await b.resolve_partition("t", f"p{i}", partition=1)
        await b.write("t", p, make_batch(5, producer=f"p{i}"))
    assert len(b.pins) == 5
    assert await b.run_retention() == 0  # nothing is due yet: the pins stay
    assert len(b.pins) == 5
    later = int(time.time() * 1000) + 2 * HOUR_MS
    assert await b.run_retention(now_ms=later) > 0
    assert b.actor("t", 1).log.producers == {}
    assert len(b.pins) == 0
    # p0 comes back: it has no state anywhere, so it may be pinned afresh...
    assert await b.resolve_partition("t", "p0", partition=0) == 0
    assert b.last_seq_no("t", 0, "p0") is None
    res = await b.write("t", 0, make_batch(3, producer="p0"))
    assert (res[0].written, res[0].skipped) == (3, 0)
    # ...and p1, back on its old partition, finds no dedup state there either
    assert await b.resolve_partition("t", "p1", partition=1) == 1
    assert b.last_seq_no("t", 1, "p1") is None
    res = await b.write("t", 1, make_batch(5, producer="p1"))
    assert (res[0].written, res[0].skipped) == (5, 0)
    await b.close()


async def test_an_idle_producer_is_no_longer_bound_to_its_partition(tmp_path: Path) -> None:
    b = await open_broker(tmp_path, producer_idle_timeout_ms=HOUR_MS)
    await b.create_topic("t", partitions=2, retention_ms=None)
    for pid in ("mover", "stayer"):
        assert await b.resolve_partition("t", pid, partition=1) == 1
        await b.write("t", 1, make_batch(5, producer=pid))
    with pytest.raises(BadRequestError, match="pinned to partition 1"):
        await b.resolve_partition("t", "mover", partition=0)
    await b.run_retention()
    assert len(b.pins) == 2  # not idle yet

    now = int(time.time() * 1000)
    b.pins.clock = lambda: now + 2 * HOUR_MS
    await b.run_retention()
    assert len(b.pins) == 0
    # state is kept (no retention), but no longer binds: "mover" is pinned afresh to 0,
    # whose dedup state for it is empty
    assert await b.resolve_partition("t", "mover", partition=0) == 0
    assert b.last_seq_no("t", 0, "mover") is None
    # a producer that asks for no partition stays where its state is, dedup intact
    assert await b.resolve_partition("t", "stayer") == 1
    assert b.last_seq_no("t", 1, "stayer") == 5
    res = await b.write("t", 1, make_batch(7, producer="stayer"))
    assert (res[0].written, res[0].skipped) == (2, 5)
    await b.close()


async def test_a_pin_without_state_lasts_while_its_session_is_open(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=2)
    assert await b.resolve_partition("t", "p", partition=1) == 1
    token = b.register_writer(b.topic("t").name, "p", lambda: None)
    far = int(time.time() * 1000) + 30 * 24 * HOUR_MS
    await b.run_retention(now_ms=far)
    assert b.pins.pins(b.topic("t").topic_id) == {"p": 1}  # open session: kept
    b.unregister_writer(token)
    await b.run_retention(now_ms=far)
    assert len(b.pins) == 0  # closed, never wrote: nothing to keep
    await b.close()


async def test_pins_stored_by_an_older_version_are_dropped_at_open(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    cfg = await b.create_topic("t", partitions=2)
    await b.write("t", 0, make_batch(2, producer="p"))
    # an older version stored pin rows; this one points away from p's messages
    legacy = cfg.topic_id.to_bytes(4, "big") + b"p"
    b.store.committer.commit([put(PINS, legacy, (1).to_bytes(4, "big"))])
    await b.close()
    b = await open_broker(tmp_path)
    assert list(b.store.kv.scan(PINS)) == []
    assert await b.resolve_partition("t", "p") == 0  # where its messages and dedup state are
    await b.close()
