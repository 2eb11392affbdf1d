"""Group commit: many partitions' writes, one transaction, one fsync.

The BookKeeper journal / TubeMQ shared-file idea on top of LMDB: every partition
hands its prepared KV ops to the one `GroupCommitter` of the environment; a
worker thread takes everything pending, applies it in a single transaction and
fsyncs once. While that fsync runs, new work piles up and rides the next commit,
so the number of fsyncs per second stays flat as partitions multiply.

`commit_here` is the other way in: a caller with a short commit and an idle
worker commits in its own thread (the broker's event loop), saving the two
thread hand-offs of a round trip through the worker; at most one commit runs
at a time either way.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from itertools import chain

from weir.errors import ClosedError, CommitFailedError, WeirError
from weir.storage.kv import KV, Op


@dataclass(slots=True)
class CommitStats:
    """Counters since start: a commit is one transaction + fsync, a job is one submitter's ops."""

    commits: int = 0
    jobs: int = 0
    bytes: int = 0
    failed_jobs: int = 0


CommitObserver = Callable[[int, int, float], None]  # (jobs, bytes, seconds) per commit


class _Job:
    __slots__ = ("future", "nbytes", "ops")

    def __init__(self, ops: Sequence[Op], nbytes: int) -> None:
        self.ops = ops
        self.nbytes = nbytes
        self.future: Future[None] = Future()


class GroupCommitter:
    """The single writer of a KV: merges pending jobs into one durable transaction."""

    def __init__(
        self,
        kv: KV,
        *,
        max_txn_bytes: int = 256 << 20,
        observer: CommitObserver | None = None,
        name: str = "weir-group-commit",
    ) -> None:
        self._kv = kv
        self._max_txn_bytes = max_txn_bytes
        self._observer = observer
        self._pending: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._busy = False  # a commit is running (in the worker or in `commit_here`)
        self.stats = CommitStats()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, ops: Sequence[Op], nbytes: int = 0) -> Future[None]:
        """Queue ops for the next group commit; the future resolves once they are durable."""
        job = _Job(ops, nbytes)
        with self._cond:
            if self._closing:
                raise ClosedError("storage is closing; no more writes")
            self._pending.append(job)
            self._cond.notify()
        return job.future

    def commit_here(self, work: Sequence[tuple[Sequence[Op], int]]) -> list[Future[None]] | None:
        """Commit ``work`` (ops, nbytes each) in the calling thread, as one group commit,
        when nothing is pending or committing: the futures are done on return (a failed
        job's holds its error, as with `submit`). None when the worker is busy or has
        work queued: submit instead, and ride its next commit."""
        with self._cond:
            if self._busy or self._pending or self._closing:
                return None
            self._busy = True
        try:
            jobs = [_Job(ops, nbytes) for ops, nbytes in work]
            for job in jobs:
                job.future.set_running_or_notify_cancel()
            self._commit(jobs)
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()
        return [j.future for j in jobs]

    def commit(self, ops: Sequence[Op], nbytes: int = 0) -> None:
        """Submit and wait (for synchronous callers)."""
        self.submit(ops, nbytes).result()

    def close(self, timeout: float | None = None) -> None:
        """Finish everything already submitted, then stop the worker."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout)

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def alive(self) -> bool:
        """False once the worker thread has stopped (closed, or died of a bug): writes would hang."""
        return self._thread.is_alive()

    def _take(self) -> list[_Job] | None:
        with self._cond:
            while not self._pending or self._busy:
                if self._closing and not self._pending:
                    return None
                self._cond.wait()
            jobs: list[_Job] = []
            total = 0
            while self._pending and (
                not jobs or total + self._pending[0].nbytes <= self._max_txn_bytes
            ):
                job = self._pending.popleft()
                # A job whose submitter cancelled it before we took it is dropped; once
                # taken it runs to the end (cancel() then returns False).
                if job.future.set_running_or_notify_cancel():
                    total += job.nbytes
                    jobs.append(job)
            self._busy = bool(jobs)
            return jobs

    def _run(self) -> None:
        while True:
            jobs = self._take()
            if jobs is None:
                return
            if jobs:
                try:
                    self._commit(jobs)
                finally:
                    with self._cond:
                        self._busy = False
                        self._cond.notify_all()

    @staticmethod
    def _ops(jobs: list[_Job]) -> Iterator[Op]:
        return chain.from_iterable(j.ops for j in jobs)

    def _commit(self, jobs: list[_Job]) -> None:
        t0 = time.perf_counter()
        try:
            self._kv.write(self._ops(jobs))
        except Exception as exc:
            if len(jobs) == 1:
                self._fail(jobs[0], exc)
            else:
                # Isolate the failure: one partition's oversized write must not fail the others.
                for job in jobs:
                    self._commit([job])
            return
        dt = time.perf_counter() - t0
        nbytes = sum(j.nbytes for j in jobs)
        s = self.stats
        s.commits += 1
        s.jobs += len(jobs)
        s.bytes += nbytes
        for job in jobs:
            job.future.set_result(None)
        if self._observer is not None:
            self._observer(len(jobs), nbytes, dt)

    def _fail(self, job: _Job, exc: Exception) -> None:
        self.stats.failed_jobs += 1
        if not isinstance(exc, WeirError):
            exc = CommitFailedError(f"commit failed: {exc!r}")
        job.future.set_exception(exc)
