"""Commits inline in the event loop (issue 26): short ones while the committer thread is
idle, gathered per loop turn into one transaction; to the thread otherwise; never a
cancelled one; a failing job fails alone. Real LMDB throughout."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.storage.conftest import hold
from weir.broker.loop_commits import LoopCommits
from weir.errors import ClosedError, CommitFailedError
from weir.storage.kv import put
from weir.storage.store import Store

T = "x"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "data", extra_tables=(T,))
    yield s
    s.close()


async def _until(ok: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.001)


def test_short_commits_of_one_loop_turn_are_one_durable_transaction_in_the_loop(
    store: Store,
) -> None:
    commits = LoopCommits(store.committer, 64 << 10)
    before = store.committer.stats.commits

    async def go() -> None:
        await asyncio.gather(
            commits.commit([put(T, b"a", b"1")], 1), commits.commit([put(T, b"b", b"2")], 1)
        )

    asyncio.run(go())
    assert commits.inline_commits == 1
    assert store.committer.stats.commits == before + 1  # one transaction, one fsync
    assert (store.kv.get(T, b"a"), store.kv.get(T, b"b")) == (b"1", b"2")


def test_a_commit_over_the_inline_size_goes_to_the_thread(store: Store) -> None:
    commits = LoopCommits(store.committer, 16)

    async def go() -> None:
        await commits.commit([put(T, b"big", bytes(100))], 100)

    asyncio.run(go())
    assert commits.inline_commits == 0
    assert store.kv.get(T, b"big") == bytes(100)


def test_while_the_thread_commits_short_commits_ride_its_next_group(store: Store) -> None:
    commits = LoopCommits(store.committer, 64 << 10)
    seen: list[int] = []
    store.committer._observer = lambda jobs, _b, _s: seen.append(jobs)

    async def go() -> None:
        gate = await asyncio.to_thread(hold, store.committer)  # the thread is mid-commit
        a = asyncio.ensure_future(commits.commit([put(T, b"a", b"1")], 1))
        b = asyncio.ensure_future(commits.commit([put(T, b"b", b"2")], 1))
        await _until(lambda: store.committer.pending == 2, "both wait for the thread")
        assert not a.done() and not b.done()  # no ack while the commit has not happened
        gate.set()
        await asyncio.gather(a, b)
        # the committer reports a group after resolving its futures: wait for the report
        # of the held job and of the group after it
        await _until(lambda: sum(seen) >= 3, "the thread reported its commits")

    asyncio.run(go())
    assert commits.inline_commits == 0
    assert seen[-1] == 2  # both in the thread's next group commit
    assert (store.kv.get(T, b"a"), store.kv.get(T, b"b")) == (b"1", b"2")


def test_a_commit_cancelled_before_its_turn_never_reaches_the_disk(store: Store) -> None:
    commits = LoopCommits(store.committer, 64 << 10)

    async def go() -> None:
        gone = commits.commit([put(T, b"gone", b"1")], 1)
        assert isinstance(gone, asyncio.Future)
        gone.cancel()
        await commits.commit([put(T, b"kept", b"2")], 1)

    asyncio.run(go())
    assert store.kv.get(T, b"gone") is None
    assert store.kv.get(T, b"kept") == b"2"


def test_a_failing_commit_fails_alone_and_the_others_of_its_turn_are_durable(
    store: Store,
) -> None:
    commits = LoopCommits(store.committer, 64 << 10)

    async def go() -> list[BaseException | None]:
        return await asyncio.gather(
            commits.commit([put(T, b"ok", b"1")], 1),
            commits.commit([put(T, b"k" * 1000, b"2")], 1),  # over LMDB's key size
            return_exceptions=True,
        )

    ok, bad = asyncio.run(go())
    assert ok is None
    assert isinstance(bad, CommitFailedError)
    assert store.kv.get(T, b"ok") == b"1"


def test_a_commit_after_the_committer_closed_fails_instead_of_hanging(store: Store) -> None:
    commits = LoopCommits(store.committer, 64 << 10)
    store.committer.close()

    async def go() -> None:
        with pytest.raises(ClosedError):
            await asyncio.wait_for(commits.commit([put(T, b"late", b"1")], 1), 30)

    asyncio.run(go())
