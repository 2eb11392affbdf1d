"""Compaction through a real server: the SDK's compacted reader and range reads, the admin
calls, and kill -9 of the server at random points of runs (judged by the reliability
suite's history checker)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import weir
from tests.client.compaction_kills import KillSettings, run_compaction_kills
from tests.conftest import CHAOS_SEED_ENV, ServerProcess
from weir.errors import BadRequestError, UnknownTopicError


def fold(msgs: list[weir.Message]) -> dict[bytes, bytes]:
    d: dict[bytes, bytes] = {}
    for m in msgs:
        if m.data:
            d[m.key] = m.data
        else:
            d.pop(m.key, None)
    return d


def read_compacted(c: weir.Client, topic: str) -> list[weir.Message]:
    """Every partition's compacted range read, from offset 0 to the end."""
    out = []
    for p in c.describe_topic(topic).partition_info:
        for ch in c.read_range(topic, p.partition, 0, p.end_offset, compacted=True):
            out.extend(ch.messages())
    return out


SEED = int(os.environ[CHAOS_SEED_ENV])  # printed at the end of the run; replay with it


def test_100000_messages_over_1000_keys_leave_the_latest_of_each(
    shared_server: ServerProcess, topic_name: str
) -> None:
    with weir.Client(shared_server.endpoint) as c:
        c.create_topic(topic_name, partitions=2)
        truth: dict[bytes, bytes] = {}
        with c.writer(topic_name, max_batch_messages=5000) as w:
            for r in range(100):
                keys = [b"key-%d" % i for i in range(1000)]
                values = [b"r%d-%d" % (r, i) for i in range(1000)]
                w.write_many(values, keys=keys)
                truth.update(zip(keys, values, strict=True))
        info = c.compact(topic_name, wait=True)
        assert not info.running and info.last_error == ""
        assert info.keys == 1000
        assert sum(p.messages_before for p in info.partitions) == 100_000
        got = read_compacted(c, topic_name)
        assert len(got) == 1000 and fold(got) == truth  # exactly the latest of each key
        # a compacted reader: the view, then the live tail written after the run
        with c.writer(topic_name) as w:
            w.write(b"after", key=b"key-7")
        with c.reader(topic_name, compacted=True) as r:
            seen: list[weir.Message] = []
            while len(seen) < 1001:
                b = r.receive_batch(timeout=30)
                assert b is not None, f"got {len(seen)} of 1001 messages"
                seen.extend(b)
        assert fold(seen) == {**truth, b"key-7": b"after"}


def test_tombstones_and_bad_requests(shared_server: ServerProcess, topic_name: str) -> None:
    with weir.Client(shared_server.endpoint) as c:
        c.create_topic(topic_name, partitions=1)
        with c.writer(topic_name) as w:
            for k, v in [(b"a", b"1"), (b"b", b"1"), (b"a", b""), (b"", b"keyless")]:
                w.write(v, key=k or None)
        c.compact(topic_name, wait=True)
        got = [(m.key, m.data) for m in read_compacted(c, topic_name)]
        assert got == [(b"b", b"1"), (b"a", b"")]  # the delete is kept for readers behind
        with pytest.raises(UnknownTopicError):
            c.compact("no-such-topic")
        with pytest.raises(BadRequestError, match="compaction_threshold_bytes"):
            c.alter_topic(topic_name, policies={"compaction_threshold_bytes": -5})
        assert c.describe_compaction(topic_name).partitions[0].keys == 1  # unchanged


def test_kill_9_at_random_points_of_compaction_runs(tmp_path: Path) -> None:
    """kill -9 at three points of compaction runs drawn from the chaos seed (one at least
    with blobs of an unpublished view durable), writers writing throughout: judged by the history checker and a dict model
    of the acknowledged writes (`tests.client.compaction_kills`)."""
    run_compaction_kills(tmp_path, KillSettings(kills=3, seed=SEED))


@pytest.mark.slow
def test_kill_9_at_many_points_of_compaction_runs(tmp_path: Path) -> None:
    run_compaction_kills(
        tmp_path, KillSettings(kills=16, acks_before_run=2000, max_seconds=900, seed=SEED)
    )
