"""Non-persistent topics through a real server: messages reach the readers and subscribers
connected now, a slow one's are dropped and counted, nothing is stored, bad input."""

from __future__ import annotations

import json
import struct
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import lmdb
import pytest
from prometheus_client.parser import text_string_to_metric_families

import weir
from tests.cli.conftest import metrics_url
from tests.conftest import ServerProcess
from weir.errors import AlreadyExistsError, BadRequestError, UnknownSubscriptionError


def until(what: str, cond: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def attached(c: weir.Client, topic: str, name: str) -> bool:
    try:
        return len(c.describe_subscription(topic, name).consumers) == 1
    except UnknownSubscriptionError:
        return False  # its consumer has not connected yet


def test_connected_readers_and_subscribers_get_what_is_written_from_now_on(
    shared_server: ServerProcess, topic_name: str
) -> None:
    with weir.Client(shared_server.endpoint) as c:
        info = c.create_topic(topic_name, partitions=2, kind="non-persistent")
        assert info.kind == "non-persistent"
        with c.writer(topic_name) as w:
            w.write(b"before anyone listens", key=b"k")  # acknowledged, and gone
        reader = c.reader(topic_name)
        sub = c.subscribe(topic_name, "live", type="shared")
        try:
            until("the reader has both partitions", lambda: len(reader.partitions) == 2)
            until(
                "the subscriber is attached",
                lambda: attached(c, topic_name, "live"),
            )
            with c.writer(topic_name) as w:
                results = [w.write_with_result(b"m%d" % i, key=b"k%d" % i) for i in range(50)]
            assert {r.partition for r in results} == {0, 1}  # keys spread, acks came back
            got: list[weir.Message] = []
            while len(got) < 50:
                b = reader.receive_batch(timeout=30)
                assert b is not None, f"the reader got {len(got)} of 50"
                got.extend(b)
            assert sorted(m.data for m in got) == sorted(b"m%d" % i for i in range(50))
            received = [sub.receive(timeout=30) for _ in range(50)]
            assert all(m is not None for m in received)
            assert sorted(m.data for m in received if m is not None) == sorted(
                b"m%d" % i for i in range(50)
            )
            sub.acknowledge([m for m in received if m is not None])  # accepted, nothing kept
        finally:
            reader.close()
            sub.close()
        assert c.describe_topic(topic_name).dropped_messages == 0


def scraped(srv: ServerProcess, name: str, topic: str) -> float:
    """A counter of ``topic`` as the server's /metrics endpoint reports it now."""
    with urllib.request.urlopen(metrics_url(srv) + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    found = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and s.labels.get("topic") == topic
    ]
    assert found, f"no {name} series for {topic}"
    return sum(found)


def test_a_slow_subscribers_messages_are_dropped_and_counted(tmp_path: Path) -> None:
    """Drops are counted exactly: the metric scraped from /metrics, the topic's
    ``dropped_messages`` and the messages the subscriber never received are the same."""
    srv = ServerProcess(
        tmp_path / "data",
        "--metrics-listen",
        "127.0.0.1:0",
        env={"WEIR_TOPICS_NON_PERSISTENT_QUEUE_BYTES": "4096"},
    )
    srv.start()
    try:
        with weir.Client(srv.endpoint) as c:
            c.create_topic("ticks", partitions=1, kind="non-persistent")
            slow = c.subscribe("ticks", "slow", receiver_queue_size=1)
            until(
                "the subscriber is attached",
                lambda: attached(c, "ticks", "slow"),
            )
            with c.writer("ticks", max_batch_messages=1) as w:
                for i in range(200):
                    w.write(b"%05d" % i + b"x" * 200)  # every write is acknowledged
            info = c.describe_topic("ticks")
            assert info.dropped_messages > 0
            kept = info.partition_info[0].delivered_messages
            assert kept + info.dropped_messages == 200
            assert kept * 200 < 4096 * 2  # bounded by the queue, not by what was written
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(got) < kept:  # everything queued for it arrives, nothing more
                assert time.monotonic() < deadline, f"received {len(got)} of {kept} queued"
                m = slow.receive(timeout=1)
                if m is not None:
                    got.append(m.data[:5])
                    slow.acknowledge(m)
            assert slow.receive(timeout=0.5) is None  # no more than was queued
            assert got == sorted(got) and len(set(got)) == len(got)  # in order, once each
            never = {b"%05d" % i for i in range(200)} - set(got)
            assert len(never) == info.dropped_messages == c.describe_topic("ticks").dropped_messages
            dropped = "weir_non_persistent_dropped_messages_total"
            delivered = "weir_non_persistent_delivered_messages_total"
            assert scraped(srv, dropped, "ticks") == len(never)
            assert scraped(srv, delivered, "ticks") == len(got) == kept
            slow.close()
    finally:
        srv.stop()


def test_nothing_of_a_non_persistent_topic_is_stored(server: ServerProcess) -> None:
    with weir.Client(server.endpoint) as c:
        c.create_topic("ephemeral", partitions=2, kind="non-persistent")
        reader = c.reader("ephemeral")
        until("the reader has both partitions", lambda: len(reader.partitions) == 2)
        with c.writer("ephemeral", producer_id="p") as w:
            for i in range(100):
                w.write(b"x" * 100, key=b"%d" % i)
        n = 0
        while n < 100:
            b = reader.receive_batch(timeout=30)
            assert b is not None
            n += len(b)
        reader.close()
    server.stop()
    env = lmdb.open(str(server.data_dir / "kv"), readonly=True, lock=False, max_dbs=64)
    try:
        with env.begin() as txn:
            topics = txn.cursor(db=env.open_db(b"topics", txn=txn))
            ids = {
                json.loads(v)["name"]: json.loads(v)["topic_id"]
                for k, v in topics
                if not k.startswith(b"\x00")
            }
            prefix = struct.pack(">I", ids["public/default/ephemeral"])  # high half of log ids
            for table in (b"blobs", b"blob_index", b"partitions", b"producers", b"compacted"):
                keys = [bytes(k) for k, _ in txn.cursor(db=env.open_db(table, txn=txn))]
                assert not [k for k in keys if k.startswith(prefix)], table
    finally:
        env.close()
    server.start()


def test_bad_requests_are_refused(shared_server: ServerProcess, topic_name: str) -> None:
    with weir.Client(shared_server.endpoint) as c:
        with pytest.raises(BadRequestError, match="kind"):
            c.create_topic(topic_name, kind="sometimes")
        c.create_topic(topic_name, kind="non-persistent")
        with pytest.raises(BadRequestError, match="non-persistent"):
            c.compact(topic_name)
        with pytest.raises(BadRequestError, match="non-persistent"):
            list(c.read_range(topic_name, 0, 0))
        with pytest.raises(BadRequestError, match="non-persistent"):
            c.create_subscription(topic_name, "s")
        with pytest.raises(AlreadyExistsError, match="kind"):
            c.create_topic(topic_name, exist_ok=True)  # a persistent one was asked for
