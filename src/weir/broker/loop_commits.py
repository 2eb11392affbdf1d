"""How the partition actors' commits reach the disk: inline in the event loop when short.

Handing a commit to the committer thread and waking the loop when it is durable costs
two thread hand-offs per ack (measured: about 0.1-0.2 ms each on this project's 2-core
machine, a third of a small write's server time; bench/latency_breakdown.py). A short
commit, up to ``inline_bytes``, is therefore committed in the event loop itself when
the committer thread is idle: the commits asked for in one turn of the loop are
gathered (`loop.call_soon`) and committed together, one transaction and one fsync, so
partitions written in the same turn still share it. While the thread is committing, or
for a larger change, the commit goes to the thread as before and rides its next group
commit: under load the loop keeps serving while the disk works.

Either way the caller's future resolves only once the commit is durable; a caller
cancelled before its turn is dropped without committing (as the thread drops a
cancelled job), so an aborted change never reaches the disk.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence

from weir.storage.committer import GroupCommitter
from weir.storage.kv import Op
from weir.storage.partition import PreparedChange


class LoopCommits:
    """The commit path of one event loop's partition actors (see the module docstring)."""

    def __init__(self, committer: GroupCommitter, inline_bytes: int) -> None:
        self.committer = committer
        self.inline_bytes = inline_bytes
        self._turn: list[tuple[Sequence[Op], int, asyncio.Future[None]]] = []
        self.inline_commits = 0  # commits made in the loop (the rest went to the thread)

    def commit(self, ops: Sequence[Op], nbytes: int) -> Awaitable[None]:
        """Commit ``ops``; the awaitable ends once they are durable (or raises)."""
        if nbytes > self.inline_bytes or self.inline_bytes <= 0:
            return asyncio.wrap_future(self.committer.submit(ops, nbytes))
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        if not self._turn:
            loop.call_soon(self._flush)
        self._turn.append((ops, nbytes, fut))
        return fut

    def commit_change(self, change: PreparedChange) -> Awaitable[None]:
        """A partition actor's commit (``PartitionActor(commit=...)``): its KV ops."""
        return self.commit(change.ops, change.nbytes)

    def _flush(self) -> None:
        turn = [w for w in self._turn if not w[2].done()]  # cancelled: never committed
        self._turn = []
        if not turn:
            return
        done = self.committer.commit_here([(ops, nbytes) for ops, nbytes, _ in turn])
        if done is None:  # the thread is busy: join its next group commit
            for ops, nbytes, fut in turn:
                try:
                    cf = self.committer.submit(ops, nbytes)
                except Exception as refused:  # closing: the writer gets the error, not a hang
                    fut.set_exception(refused)
                    continue
                _follow(asyncio.wrap_future(cf), fut)
            return
        self.inline_commits += 1
        for (_, _, fut), cf in zip(turn, done, strict=True):
            if fut.done():
                continue
            exc = cf.exception()
            if exc is None:
                fut.set_result(None)
            else:
                fut.set_exception(exc)


def _follow(src: asyncio.Future[None], dst: asyncio.Future[None]) -> None:
    """``dst`` ends as ``src`` does; cancelling ``dst`` cancels ``src`` (the thread then
    drops the job if it has not taken it yet)."""

    def copy(f: asyncio.Future[None]) -> None:
        if dst.done():
            return
        if f.cancelled():
            dst.cancel()
        elif (exc := f.exception()) is not None:
            dst.set_exception(exc)
        else:
            dst.set_result(None)

    src.add_done_callback(copy)
    dst.add_done_callback(lambda d: src.cancel() if d.cancelled() else None)
