"""Group commit: many partitions, few fsyncs; a failing job fails alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from tests.storage.conftest import hold, make_batch
from weir.errors import StorageFullError
from weir.storage import keys
from weir.storage.committer import GroupCommitter
from weir.storage.kv import LmdbKV, Op, put
from weir.storage.partition import PartitionConfig
from weir.storage.store import Store


class RecordingKV(LmdbKV):
    """The real LMDB store, noting the keys of every transaction it is asked to commit."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tried: list[list[bytes]] = []

    def write(self, ops: Iterable[Op]) -> None:
        ops = list(ops)
        self.tried.append([op.key for op in ops])
        super().write(ops)


def until(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.001)


def test_writes_of_100_partitions_waiting_together_share_one_commit(tmp_path: Path) -> None:
    commits: list[int] = []  # jobs per durable transaction (one fsync each), from the observer
    store = Store(tmp_path / "d", observer=lambda jobs, _bytes, _s: commits.append(jobs))
    logs = [store.open_partition(i, PartitionConfig()) for i in range(100)]
    gate = hold(store.committer)
    threads = [
        threading.Thread(target=lg.write, args=(make_batch(5, producer=f"p{i}"),))
        for i, lg in enumerate(logs)
    ]
    for t in threads:
        t.start()
    until(lambda: store.committer.pending == 100, "every write waits for the committer")
    before = len(commits)
    gate.set()
    for t in threads:
        t.join()
    # the held commit, then one transaction and one fsync for all 100 partitions' writes
    assert commits[before:] == [1, 100]
    assert all(lg.end_offset == 5 for lg in logs)
    store.close()


def test_many_writers_at_once_are_all_durable_in_order(store: Store) -> None:
    logs = [store.open_partition(i, PartitionConfig()) for i in range(20)]
    rounds = 20
    barrier = threading.Barrier(len(logs))

    def writer(i: int) -> None:
        barrier.wait()
        for r in range(rounds):
            logs[i].write(make_batch(5, producer=f"p{i}", first_seq=r * 5 + 1))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(len(logs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.committer.stats.jobs == len(logs) * rounds
    assert all(lg.end_offset == rounds * 5 for lg in logs)


def test_a_job_that_cannot_commit_fails_alone(tmp_path: Path) -> None:
    kv = RecordingKV(tmp_path / "d", keys.STORAGE_TABLES, map_size=1 << 20)
    committer = GroupCommitter(kv)
    big = put(keys.BLOBS, b"\xff" * 8 + b"big", b"x" * (4 << 20))  # can never fit the map
    small = put(keys.BLOBS, b"\xff" * 8 + b"small", b"y")
    gate = hold(committer)
    f_big = committer.submit([big], len(big.value or b""))
    f_small = committer.submit([small], 1)
    gate.set()
    with pytest.raises(StorageFullError):
        f_big.result(10)
    f_small.result(10)
    # both were tried in one transaction; it failed, so each was tried alone
    assert kv.tried[-3:] == [[big.key, small.key], [big.key], [small.key]]
    assert (committer.stats.failed_jobs, committer.stats.commits) == (1, 2)  # held one + small
    assert kv.get(keys.BLOBS, small.key) == b"y"
    assert kv.get(keys.BLOBS, big.key) is None
    committer.close()
    kv.close()


def test_close_finishes_pending_and_refuses_new(store: Store) -> None:
    from weir.errors import ClosedError

    futs = [store.committer.submit([put(keys.BLOBS, bytes([i]) * 9, b"v")]) for i in range(50)]
    store.committer.close()
    assert all(f.done() and f.exception() is None for f in futs)
    with pytest.raises(ClosedError):
        store.committer.submit([])


def test_a_cancelled_job_does_not_stop_the_committer(store: Store) -> None:
    gate = hold(store.committer)
    a = store.committer.submit([put(keys.BLOBS, b"\xfe" * 8 + b"a", b"1")])
    b = store.committer.submit([put(keys.BLOBS, b"\xfe" * 8 + b"b", b"2")])
    assert b.cancel()  # its submitter went away before the commit
    gate.set()
    a.result(10)
    store.committer.submit([put(keys.BLOBS, b"\xfe" * 8 + b"c", b"3")]).result(10)
    assert store.kv.get(keys.BLOBS, b"\xfe" * 8 + b"b") is None
    assert store.kv.get(keys.BLOBS, b"\xfe" * 8 + b"c") == b"3"
