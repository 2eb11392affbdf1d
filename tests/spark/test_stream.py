"""Streaming: topic -> transformation -> topic, exactly once across restarts, replays and kills."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

import weir
from tests.conftest import ROOT, ServerProcess
from tests.spark.stream_job import BLOCKED_LINE, start_query
from tests.spark.topics import Rec, produce, read_topic

QUERY_TIMEOUT_S = 180


def _feed(client: weir.Client, topic: str, counts: dict[int, int], tag: str, pad: int = 0) -> None:
    """Append ``counts[p]`` keyed records to each partition p (three keys per partition)."""
    produce(
        client,
        topic,
        {
            p: [
                Rec(f"{tag}-{i}-".encode() + b"x" * pad, key=f"p{p}-k{i % 3}".encode())
                for i in range(n)
            ]
            for p, n in counts.items()
        },
    )


def _run(spark: Any, server: ServerProcess, source: str, sink: str, ckpt: str, **kw: Any) -> Any:
    q = start_query(
        spark, server.endpoint, source, sink, ckpt, kw.pop("max_per_trigger", None), **kw
    )
    assert q.awaitTermination(QUERY_TIMEOUT_S), "availableNow query did not finish"
    return q


def _assert_exactly_once(
    client: weir.Client, source: str, sink: str, read_committed: bool = False
) -> int:
    """The sink holds every source record exactly once, and each key's records in source order."""
    expected = [
        f"{m.partition}:{m.offset}:{m.data.decode()}"
        for msgs in read_topic(client, source).values()
        for m in msgs
    ]
    out = read_topic(client, sink, read_committed=read_committed)
    got = [m.data.decode() for msgs in out.values() for m in msgs]
    dups = sorted({v for v in got if got.count(v) > 1})
    assert not dups, f"duplicates in the sink: {[d[:24] for d in dups[:10]]}"
    missing = sorted(set(expected) - set(got))
    assert not missing, f"records missing from the sink: {[m[:24] for m in missing[:10]]}"
    assert sorted(got) == sorted(expected)
    for msgs in out.values():
        by_key: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
        for m in msgs:
            part, off, _ = m.data.decode().split(":", 2)
            by_key[m.key].append((int(part), int(off)))
        for key, positions in by_key.items():
            assert positions == sorted(positions), f"key {key!r} out of order in the sink"
    return len(got)


@pytest.fixture
def topics(client: weir.Client, topic_name: str) -> tuple[str, str]:
    source, sink = topic_name + "_in", topic_name + "_out"
    client.create_topic(source, partitions=4)
    client.create_topic(sink, partitions=3)
    return source, sink


def test_stop_restart_and_replay_produce_every_record_exactly_once(
    spark: Any,
    weir_server: ServerProcess,
    client: weir.Client,
    topics: tuple[str, str],
    checkpoint: str,
) -> None:
    source, sink = topics
    _feed(client, source, {0: 20, 1: 7, 2: 0, 3: 13}, "a")
    q1 = _run(spark, weir_server, source, sink, checkpoint)
    assert _assert_exactly_once(client, source, sink) == 40

    # stopped (availableNow ended); new input; restart from the checkpoint
    _feed(client, source, {0: 5, 2: 9}, "b")
    q2 = _run(spark, weir_server, source, sink, checkpoint)
    assert q2.id == q1.id  # same query: its sink producers continue
    assert _assert_exactly_once(client, source, sink) == 54

    # a crash after the sink wrote batch N but before Spark logged it as done: Spark replays
    # batch N with the same offsets and batch id, and the broker skips every row it has
    commits = Path(checkpoint) / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    _feed(client, source, {1: 4}, "c")
    q3 = _run(spark, weir_server, source, sink, checkpoint)
    replayed = [p for p in q3.recentProgress if p["batchId"] == last]
    assert replayed and replayed[0]["numInputRows"] > 0, "batch was not replayed"
    assert _assert_exactly_once(client, source, sink) == 58
    # the batch's transaction had committed before the "crash": the replay's transaction
    # adds nothing a read-committed reader could see twice
    assert _assert_exactly_once(client, source, sink, read_committed=True) == 58


def test_max_offsets_per_trigger_caps_every_micro_batch(
    spark: Any,
    weir_server: ServerProcess,
    client: weir.Client,
    topics: tuple[str, str],
    checkpoint: str,
) -> None:
    source, sink = topics
    _feed(client, source, {0: 30, 1: 5, 3: 12}, "m")
    q = _run(spark, weir_server, source, sink, checkpoint, max_per_trigger=7, consumer="lag-watch")
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sizes == [7] * 6 + [5]  # 47 records, the whole budget used in every batch
    assert _assert_exactly_once(client, source, sink) == 47
    # the option consumer makes the query's position visible to weir tools
    info = client.describe_consumer(source, "lag-watch")
    assert info.lag == 0
    assert [p.committed_offset for p in info.partitions] == [30, 5, 0, 12]


def test_retention_past_the_checkpoint_fails_clearly_unless_told_to_skip(
    spark: Any,
    weir_server: ServerProcess,
    client: weir.Client,
    topic_name: str,
    checkpoint: str,
) -> None:
    source, sink = topic_name + "_in", topic_name + "_out"
    client.create_topic(source, partitions=1, retention_bytes=2000)
    client.create_topic(sink, partitions=1)
    _feed(client, source, {0: 10}, "a")
    _run(spark, weir_server, source, sink, checkpoint)
    assert _assert_exactly_once(client, source, sink) == 10

    # while the query is stopped, 10 more records come and go: a larger write pushes them
    # (and the ones already read) out of the retention by size
    _feed(client, source, {0: 10}, "b")
    produce(client, source, {0: [Rec(b"c" * 90) for _ in range(30)]})
    deadline = time.monotonic() + 30
    while client.describe_topic(source).partition_info[0].start_offset < 20:
        assert time.monotonic() < deadline, "retention did not run"
        time.sleep(0.05)

    with pytest.raises(StreamingQueryException) as err:
        _run(spark, weir_server, source, sink, checkpoint)
    msg = str(err.value)
    # retention drops whole batches: the larger write's first record went alone when the
    # writer had nothing in flight, so under load it may go too (start 21 or later, not 20)
    m = re.search(r"offsets 10\.\.(\d+) .*start to (\d+)\).*: (\d+) records lost", msg)
    assert m is not None, msg
    last, start, lost = map(int, m.groups())
    assert 20 <= start < 50 and last == start - 1 and lost == start - 10, msg
    assert "failOnDataLoss=false" in msg

    q = _run(spark, weir_server, source, sink, checkpoint, failOnDataLoss="false")
    assert q.exception() is None
    got = [m.data for m in read_topic(client, sink)[0]]
    assert len(got) == 10 + (50 - start)  # the 10 read before, what is left after the gap
    assert not any(b":b-" in v for v in got)  # the lost ones


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), children first."""
    children: dict[int, list[int]] = defaultdict(list)
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children[int(fields[1])].append(int(d.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


PER_PARTITION_PER_BATCH = 50
BLOCK_BATCH = 1


def _rows_of_blocked_task(client: weir.Client, sink: str) -> list[str]:
    """Sink records of source partition 0 in the blocked batch: the blocked task's."""
    lo, hi = BLOCK_BATCH * PER_PARTITION_PER_BATCH, (BLOCK_BATCH + 1) * PER_PARTITION_PER_BATCH
    out = []
    for msgs in read_topic(client, sink).values():
        for m in msgs:
            part, off, _ = m.data.decode().split(":", 2)
            if part == "0" and lo <= int(off) < hi:
                out.append(m.data.decode())
    return out


@pytest.mark.timeout(900)  # a Spark of its own (up to 180 s to block), then a 180 s query
def test_query_killed_mid_batch_and_restarted_has_no_duplicate_and_no_gap(
    spark: Any,
    spark_work: Path,
    weir_server: ServerProcess,
    client: weir.Client,
    topics: tuple[str, str],
    tmp_path: Path,
) -> None:
    source, sink = topics
    per_batch = 4 * PER_PARTITION_PER_BATCH
    # 600 records, 3 batches of 200; big enough that the rows the blocked task hands on
    # fill the pipes between Spark's processes and reach the sink before the kill
    _feed(client, source, {p: 3 * PER_PARTITION_PER_BATCH for p in range(4)}, "k", pad=4000)
    ckpt = str(tmp_path / "checkpoint")
    work = tmp_path / "child"
    cmd = [sys.executable, "-m", "tests.spark.stream_job", str(work), weir_server.endpoint]
    cmd += [source, sink, ckpt, str(per_batch), str(BLOCK_BATCH)]
    child = subprocess.Popen(
        cmd, cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    blocked = threading.Event()
    log: list[str] = []

    def pump() -> None:
        assert child.stderr is not None
        for line in child.stderr:
            log.append(line)
            if BLOCKED_LINE in line:
                blocked.set()
        blocked.set()  # the child ended: do not wait any longer

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert blocked.wait(QUERY_TIMEOUT_S) and child.poll() is None, "".join(log[-40:])
        # wait until the blocked task's first rows are stored
        deadline = time.monotonic() + 60
        seen = 0
        while True:
            n = client.describe_topic(sink).messages
            if n != seen and _rows_of_blocked_task(client, sink):
                break
            seen = n
            assert time.monotonic() < deadline, "the blocked task wrote nothing"
            time.sleep(0.02)
        for pid in [child.pid, *_descendants(child.pid)]:  # the whole Spark, at once
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)
    written = _rows_of_blocked_task(client, sink)
    assert 0 < len(written) < PER_PARTITION_PER_BATCH, "the kill did not land mid-task"
    offsets_log = {int(p.name) for p in (Path(ckpt) / "offsets").iterdir() if p.name.isdigit()}
    commit_log = {int(p.name) for p in (Path(ckpt) / "commits").iterdir() if p.name.isdigit()}
    assert BLOCK_BATCH in offsets_log and BLOCK_BATCH not in commit_log  # cut short
    # each micro-batch is one transaction: a read-committed reader sees the batches
    # before the killed one, whole, and nothing of the killed one
    visible = [m.data.decode() for ms in read_topic(client, sink, read_committed=True).values()
               for m in ms]  # fmt: skip
    batches = {int(v.split(":")[1]) // PER_PARTITION_PER_BATCH for v in visible}
    assert batches == set(range(BLOCK_BATCH)) and len(visible) == BLOCK_BATCH * per_batch

    # restart from the same checkpoint (in this process's Spark): the batch is replayed
    _run(spark, weir_server, source, sink, ckpt, max_per_trigger=per_batch)
    assert _assert_exactly_once(client, source, sink, read_committed=True) == 600
    # the replay joined the killed batch's transaction: read uncommitted, nothing twice either
    assert _assert_exactly_once(client, source, sink) == 600
    shutil.rmtree(work, ignore_errors=True)
