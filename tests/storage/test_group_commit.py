"""Group commit: many partitions, few fsyncs; a failing job fails alone."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.storage.conftest import make_batch
from weir.errors import StorageFullError
from weir.storage import keys
from weir.storage.kv import put
from weir.storage.partition import PartitionConfig
from weir.storage.store import Store


def test_100_partitions_share_commits(store: Store) -> None:
    logs = [store.open_partition(i, PartitionConfig()) for i in range(100)]
    rounds = 20
    barrier = threading.Barrier(len(logs))

    def writer(i: int) -> None:
        log = logs[i]
        barrier.wait()
        for r in range(rounds):
            log.write(make_batch(5, producer=f"p{i}", first_seq=r * 5 + 1))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(len(logs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    st = store.committer.stats
    writes = len(logs) * rounds
    assert st.jobs == writes
    assert all(lg.end_offset == rounds * 5 for lg in logs)
    # every write was durable when acknowledged, yet fsyncs were shared by many writes
    assert st.commits * 5 < writes, f"{st.commits} commits for {writes} writes"


def test_a_job_that_cannot_commit_fails_alone(tmp_path: Path) -> None:
    s = Store(tmp_path / "d", map_size=1 << 20, min_disk_free=0)
    big = put(keys.BLOBS, b"\xff" * 8 + b"big", b"x" * (4 << 20))  # can never fit the map
    # hold the worker so both jobs land in one group
    gate = threading.Event()
    s.committer.submit([]).add_done_callback(lambda _: gate.wait(5))
    f_big = s.committer.submit([big], len(big.value or b""))
    f_small = s.committer.submit([put(keys.BLOBS, b"\xff" * 8 + b"small", b"y")], 1)
    gate.set()
    with pytest.raises(StorageFullError):
        f_big.result(10)
    f_small.result(10)
    assert s.kv.get(keys.BLOBS, b"\xff" * 8 + b"small") == b"y"
    assert s.kv.get(keys.BLOBS, b"\xff" * 8 + b"big") is None
    s.close()


def test_close_finishes_pending_and_refuses_new(store: Store) -> None:
    from weir.errors import ClosedError

    futs = [store.committer.submit([put(keys.BLOBS, bytes([i]) * 9, b"v")]) for i in range(50)]
    store.committer.close()
    assert all(f.done() and f.exception() is None for f in futs)
    with pytest.raises(ClosedError):
        store.committer.submit([])


def test_a_cancelled_job_does_not_stop_the_committer(store: Store) -> None:
    gate = threading.Event()
    store.committer.submit([]).add_done_callback(lambda _: gate.wait(5))
    a = store.committer.submit([put(keys.BLOBS, b"\xfe" * 8 + b"a", b"1")])
    b = store.committer.submit([put(keys.BLOBS, b"\xfe" * 8 + b"b", b"2")])
    assert b.cancel()  # its submitter went away before the commit
    gate.set()
    a.result(10)
    store.committer.submit([put(keys.BLOBS, b"\xfe" * 8 + b"c", b"3")]).result(10)
    assert store.kv.get(keys.BLOBS, b"\xfe" * 8 + b"b") is None
    assert store.kv.get(keys.BLOBS, b"\xfe" * 8 + b"c") == b"3"
