"""Compaction through a real server: the SDK's compacted reader and range reads, the admin
calls, and kill -9 of the server in the middle of a run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import weir
from tests.conftest import ServerProcess
from weir.broker.compaction.facade import HOLD_ENV
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


def test_kill_9_during_compaction_leaves_a_correct_view_and_loses_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    hold = tmp_path / "held"
    truth: dict[bytes, bytes] = {}
    written: list[tuple[bytes, bytes]] = []
    views_seen_mid_run = 0
    for cycle in range(3):
        hold.unlink(missing_ok=True)
        srv = ServerProcess(data, env={HOLD_ENV: str(hold)})
        srv.start()
        try:
            with weir.Client(srv.endpoint) as c:
                c.create_topic("kv", partitions=2, exist_ok=True)
                before = [p.position for p in c.describe_compaction("kv").partitions]
                with c.writer("kv", producer_id=f"p{cycle}") as w:
                    for i in range(3000):
                        k, v = b"k%d" % (i % 300), b"c%d-%d" % (cycle, i)
                        w.write(v, key=k)
                        written.append((k, v))
                        truth[k] = v
                c.compact("kv")
                deadline = time.monotonic() + 60
                while not hold.exists():  # the run has written blobs of its new view, and waits
                    assert time.monotonic() < deadline, "the compaction never reached its hold"
                    time.sleep(0.05)
                st = c.describe_compaction("kv")
                assert st.running and any(p.phase == "writing" for p in st.partitions)
                views_seen_mid_run += 1
        finally:
            srv.kill()
        srv = ServerProcess(data)
        srv.start()
        try:
            with weir.Client(srv.endpoint) as c:
                # the run was held before it published: the old view is served, whole
                assert [p.position for p in c.describe_compaction("kv").partitions] == before
                assert fold(read_compacted(c, "kv")) == truth
                # no acknowledged message is lost: the log has every one
                raw = [
                    (m.key, m.data)
                    for p in c.describe_topic("kv").partition_info
                    for ch in c.read_range("kv", p.partition, p.start_offset, p.end_offset)
                    for m in ch.messages()
                ]
                assert sorted(raw) == sorted(written)
        finally:
            srv.kill()
    assert views_seen_mid_run == 3
    srv = ServerProcess(data)
    srv.start()
    try:
        with weir.Client(srv.endpoint) as c:
            info = c.compact("kv", wait=True)  # a run that is not cut short finishes
            assert info.keys == 300
            got = read_compacted(c, "kv")
            assert len(got) == 300 and fold(got) == truth
    finally:
        srv.stop()
