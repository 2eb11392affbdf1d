"""The partition actor: one asyncio owner per partition (the PQ tablet's partition actor).

Writes join an incoming queue. When the actor is Idle it switches to Writing,
takes everything queued (up to `max_commit_bytes`), prepares one storage change,
hands its ops to the commit (`weir.broker.loop_commits`: a short one is committed in
the event loop when the committer thread is idle, otherwise the group committer's
thread takes it; either way one fsync shared with other partitions) and waits. On success it applies the change, so EndOffset moves and waiting
readers wake; then it answers every write. On failure it rolls the change back
and fails the whole queue: a later write of the same producer must never
overtake a failed one, or the failed one could never be written (dedup would
skip it). One commit is in flight per partition; work arriving meanwhile rides
the next one.

A transaction's end is a queue item too: the actor prepares its marker (see
`weir.storage.txn_state`) and hands the change to the transaction's
`CommitGroup`, which commits the markers of every partition of the
transaction in one KV transaction and applies them all at once; the actor waits
for that before it takes its next item. Markers of different transactions are
queued on all their partitions in one step, so every actor meets them in the
same order and no two ends can wait for each other.

How a prepared change becomes durable is chosen when the actor is built: by
default the LMDB group committer takes its KV ops (the embedded mode); a
replicated partition passes ``commit`` (its log appends the change as one entry
acknowledged by the bookies). Everything else, prepare, apply, abort, the queue,
is the same path for both. The actor is generic in its log (`PartitionActor` alone
is the embedded one); a replicated partition also passes ``read`` (its log reads
entries off the bookies or its cache, asynchronously) and ``retain`` (its log drops
whole ledgers, in the actor's turn like any change). What only the embedded log
has (transactions, the tier, synchronous reads) is refused on a replicated one.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, cast

from typing_extensions import TypeVar

from weir.broker.observer import NULL_OBSERVER, BrokerObserver
from weir.broker.transactions.commit_group import CommitGroup
from weir.errors import (
    BadRequestError,
    ClosedError,
    InternalError,
    OverloadedError,
    UnavailableError,
    WeirError,
)
from weir.storage.committer import GroupCommitter
from weir.storage.incoming import IncomingBatch
from weir.storage.log_interface import PartitionLogLike
from weir.storage.partition import BatchResult, PartitionLog, PreparedChange, ReadResult

log = logging.getLogger("weir.partition")

# the log an actor drives: the embedded PartitionLog unless said otherwise
LogT = TypeVar("LogT", bound=PartitionLogLike[Any], default=PartitionLog)
# a replicated log's read: (from_offset, max_bytes, to_offset) -> whole batches
AsyncRead = Callable[[int, int, int | None], Awaitable[ReadResult]]
# a replicated log's retention: (now_ms, protect_from) -> what it dropped (whole ledgers)
AsyncRetain = Callable[[int, int | None], Awaitable[int]]


class ActorState(enum.Enum):
    IDLE = "idle"
    WRITING = "writing"


@dataclass(slots=True)
class _Write:
    batches: Sequence[IncomingBatch]
    nbytes: int
    future: asyncio.Future[list[BatchResult]]
    txn: int = 0  # the open transaction the batches belong to, 0 for none
    # large payloads being stored as objects: the batches to commit once they are
    ready: asyncio.Future[Sequence[IncomingBatch]] | None = None
    # called in the actor's turn right after the future resolved (see `submit`)
    on_done: Callable[[], None] | None = None


@dataclass(slots=True)
class _TxnEnd:
    txn_id: int
    committed: bool
    group: CommitGroup


@dataclass(slots=True)
class _Retention:
    now_ms: int
    protect_from: int | None
    future: asyncio.Future[int]


@dataclass(slots=True)
class _Change:
    """A change other than a write or a retention step (a trim; the tier's: a finished
    copy, a freed local blob), prepared when its turn comes."""

    prepare: Callable[[], Any]  # the log's change (PreparedChange, ReplicatedChange) or None
    future: asyncio.Future[bool]


class PartitionActor(Generic[LogT]):
    """Owns one partition log inside the event loop; see the module docstring."""

    def __init__(
        self,
        log: LogT,
        committer: GroupCommitter | None,
        *,
        topic: str,
        partition: int,
        generation: int,
        max_queue_bytes: int,
        max_commit_bytes: int,
        observer: BrokerObserver = NULL_OBSERVER,
        commit: Callable[[Any], Awaitable[None]] | None = None,
        read: AsyncRead | None = None,
        retain: AsyncRetain | None = None,
    ) -> None:
        self.log = log
        self.committer = committer
        # how a prepared change is made durable (see the module docstring): embedded,
        # `LoopCommits.commit_change` (short ones inline in the loop) or the committer
        # thread; replicated, the log's own commit
        self._commit: Callable[[Any], Awaitable[None]] = commit or self._commit_kv
        self._read = read  # None: the embedded log's reads
        self._retain_log = retain  # None: the embedded log's retention steps
        self.topic = topic
        self.partition = partition
        self.generation = generation
        self.max_queue_bytes = max_queue_bytes
        self.max_commit_bytes = max_commit_bytes
        self.state = ActorState.IDLE
        self._queue: deque[_Write | _Retention | _Change | _TxnEnd] = deque()
        self._queued_bytes = 0
        self._task: asyncio.Task[None] | None = None
        self._moved = asyncio.Event()
        self._closed = False
        self.observer = observer
        self.overload_refusals = 0

    # ----------------------------------------------------------------- queries

    @property
    def start_offset(self) -> int:
        return self.log.start_offset

    @property
    def end_offset(self) -> int:
        return self.log.end_offset

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    @property
    def stable_offset(self) -> int:
        """The last stable offset: where read-committed readers stop."""
        return self.log.stable_offset

    def read(
        self,
        from_offset: int,
        max_bytes: int,
        to_offset: int | None = None,
        *,
        committed: bool = False,
        control: bool = False,
        fill_cache: bool = True,
    ) -> ReadResult:
        """Read now (see `PartitionLog.read`: ``committed`` for a read-committed reader,
        ``control`` to get transaction markers too, for the Kafka front, ``fill_cache``
        False for a scan that must not evict what readers share). An offloaded blob not in
        the tier's cache is fetched, blocking; prefer `read_async` in the event loop."""
        plog = self._embedded("synchronous reads")
        return plog.fill_payloads(
            plog.read(
                from_offset,
                max_bytes,
                to_offset,
                committed=committed,
                control=control,
                fill_cache=fill_cache,
            )
        )

    async def read_async(
        self,
        from_offset: int,
        max_bytes: int,
        to_offset: int | None = None,
        *,
        committed: bool = False,
        control: bool = False,
        fill_cache: bool = True,
    ) -> ReadResult:
        """`read`, with an offloaded blob at ``from_offset`` fetched into the tier's cache
        off the event loop first (one object request); the read itself is the same one
        path. TierUnavailableError (retryable) while the object store is unreachable.
        A replicated partition reads through its log (no transactions there: every
        message is committed, there are no markers)."""
        if self._read is not None:
            return await self._read(from_offset, max_bytes, to_offset)
        plog = self._embedded("reads")
        rec = plog.remote_at(from_offset)
        scan = None
        if rec is not None and fill_cache:
            await asyncio.wrap_future(plog.tier.prefetch(plog.cache_owner, rec, plog.label))
        elif rec is not None:  # a scan: loaded for this read only, the tier's cache untouched
            blob = await asyncio.to_thread(plog.tier.load, rec, plog.label)
            scan = (rec.first_offset, blob)
        res = plog.read(
            from_offset,
            max_bytes,
            to_offset,
            committed=committed,
            control=control,
            fill_cache=fill_cache,
            scan=scan,
        )
        if res.refs:  # large payloads: fetched back from their objects, off the event loop
            res = await asyncio.to_thread(plog.fill_payloads, res)
        return res

    def _embedded(self, what: str) -> PartitionLog:
        """The embedded log, for what only it has; BadRequestError on a replicated one."""
        plog = self.log
        if not isinstance(plog, PartitionLog):
            raise BadRequestError(
                f"partition {self.topic}/{self.partition}: {what} are not supported on "
                "replicated storage yet"
            )
        return plog

    async def wait_for_data(
        self, offset: int, timeout: float | None, *, committed: bool = False
    ) -> bool:
        """Wait until EndOffset (``committed``: the last stable offset) passes ``offset``
        (True) or the timeout ends (False)."""
        log = self.log
        while (log.stable_offset if committed else log.end_offset) <= offset:
            if self._closed:
                raise UnavailableError(f"partition {self.topic}/{self.partition} is closed")
            ev = self._moved
            try:
                await asyncio.wait_for(ev.wait(), timeout)
            except TimeoutError:
                return (log.stable_offset if committed else log.end_offset) > offset
        return True

    # ----------------------------------------------------------------- writes

    async def write(self, batches: Sequence[IncomingBatch], nbytes: int) -> list[BatchResult]:
        """Queue batches for the next commit; returns once they are durable (or raises)."""
        return await self.submit(batches, nbytes)

    def submit(
        self,
        batches: Sequence[IncomingBatch],
        nbytes: int,
        ready: asyncio.Future[Sequence[IncomingBatch]] | None = None,
        txn: int = 0,
        on_done: Callable[[], None] | None = None,
    ) -> asyncio.Future[list[BatchResult]]:
        """Queue batches now (order of calls is commit order); the future resolves when durable.

        With ``ready`` (large payloads being stored as objects), the batches committed are
        what it resolves to; writes queued behind wait for it, so order holds. Raises
        OverloadedError at once when the queue is over its byte bound. ``on_done`` is
        called right after the future got its result, in the actor's turn, before it
        prepares the next write: a session sends the ack from there (a task awaiting the
        future runs only after that next write is prepared and handed to the commit).
        """
        if self._closed:
            raise UnavailableError(f"partition {self.topic}/{self.partition} is shutting down")
        if self._queue and self._queued_bytes + nbytes > self.max_queue_bytes:
            # One write larger than the bound is let through when the queue is empty,
            # so progress never stalls; otherwise refuse instead of growing memory.
            self.overload_refusals += 1
            self.observer.on_refused(self.topic, self.partition, "overloaded")
            raise OverloadedError(
                f"partition {self.topic}/{self.partition} has {self._queued_bytes} bytes waiting "
                f"for commit (limit {self.max_queue_bytes}); retry shortly"
            )
        fut: asyncio.Future[list[BatchResult]] = asyncio.get_running_loop().create_future()
        self._queue.append(_Write(batches, nbytes, fut, txn, ready, on_done))
        self._queued_bytes += nbytes
        self._kick()
        return fut

    def end_txn(self, txn_id: int, committed: bool, group: CommitGroup) -> None:
        """Queue the end of transaction ``txn_id`` here (see the module docstring)."""
        if self._closed:
            group.failed(UnavailableError(f"partition {self.topic}/{self.partition} is closed"))
            return
        self._queue.append(_TxnEnd(txn_id, committed, group))
        self._kick()

    async def run_retention(self, now_ms: int | None, protect_from: int | None) -> int:
        """One retention step, ordered with the writes; returns blobs removed."""
        if self._closed:
            return 0
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        now = int(time.time() * 1000) if now_ms is None else now_ms
        self._queue.append(_Retention(now, protect_from, fut))
        self._kick()
        return await fut

    async def run_change(self, prepare: Callable[[], Any]) -> bool:
        """Prepare, commit and apply one change in its turn among the writes; False when
        ``prepare`` found nothing to do (returned None)."""
        if self._closed:
            raise UnavailableError(f"partition {self.topic}/{self.partition} is shutting down")
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queue.append(_Change(prepare, fut))
        self._kick()
        return await fut

    def _commit_kv(self, change: PreparedChange) -> asyncio.Future[None]:
        """The embedded mode's commit: the change's KV ops join the next group commit."""
        assert self.committer is not None, "an embedded partition needs the group committer"
        return asyncio.wrap_future(self.committer.submit(change.ops, change.nbytes))

    def _kick(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"partition-{self.topic}/{self.partition}"
            )

    def _take_writes(self) -> list[_Write]:
        items: list[_Write] = []
        total = 0
        while self._queue and isinstance(self._queue[0], _Write):
            item = self._queue[0]
            assert isinstance(item, _Write)
            if items and (item.ready is not None or total + item.nbytes > self.max_commit_bytes):
                break
            self._queue.popleft()
            self._queued_bytes -= item.nbytes
            total += item.nbytes
            if not item.future.done():  # a cancelled caller drops out here
                items.append(item)
        return items

    async def _run(self) -> None:
        try:
            while self._queue:
                self.state = ActorState.WRITING
                head = self._queue[0]
                if isinstance(head, _Retention):
                    self._queue.popleft()
                    await self._retain(head)
                    continue
                if isinstance(head, _TxnEnd):
                    self._queue.popleft()
                    await self._end_txn(head)
                    continue
                if isinstance(head, _Change):
                    self._queue.popleft()
                    await self._change(head)
                    continue
                if head.ready is not None:
                    try:
                        head.batches = await head.ready
                    except Exception as exc:
                        # the payload objects could not be stored: nothing was committed
                        self._queue.popleft()
                        self._queued_bytes -= head.nbytes
                        _fail(head.future, exc)
                        self._fail_queue(exc)
                        continue
                    head.ready = None
                items = self._take_writes()
                if items:
                    await self._write(items)
        finally:
            self.state = ActorState.IDLE
            self._task = None
            if self._queue and not self._closed:
                self._kick()

    async def _write(self, items: list[_Write]) -> None:
        batches = [b for it in items for b in it.batches]
        txn_ids = None
        for it in items:
            if it.txn:
                txn_ids = [i.txn for i in items for _ in i.batches]
                break
        try:
            change = self.log.prepare_write(batches, None, txn_ids)
        except WeirError as exc:
            reason = {"PARTITION_OVERFLOW": "overflow", "STORAGE_FULL": "storage_full"}.get(
                exc.code
            )
            if reason:
                self.observer.on_refused(self.topic, self.partition, reason)
            # Refused before anything was committed (overflow, disk full): nothing was
            # stored, and the queue behind fails too so no later write overtakes these.
            for it in items:
                _fail(it.future, exc)
            self._fail_queue(exc)
            return
        except Exception as exc:  # a bug must fail these writes, not leave them hanging
            log.exception(
                "prepare_write failed", extra={"topic": self.topic, "partition": self.partition}
            )
            bug = InternalError(f"write failed on the server: {exc!r}")
            for it in items:
                _fail(it.future, bug)
            self._fail_queue(bug)
            return
        try:
            await self._commit(change)
        except BaseException as exc:
            self.log.abort(change)
            err = (
                exc
                if isinstance(exc, WeirError)
                else UnavailableError(f"commit interrupted: {exc!r}")
            )
            for it in items:
                _fail(it.future, err)
            self._fail_queue(err)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        self.log.apply(change)
        self._notify()
        results = change.results
        pos = 0
        written = skipped = 0
        for it in items:
            n = len(it.batches)
            mine = results[pos : pos + n]
            pos += n
            for r in mine:
                written += r.written
                skipped += r.skipped
            if not it.future.done():
                it.future.set_result(mine)
                if it.on_done is not None:
                    try:
                        it.on_done()
                    except Exception:  # the session's: its ack task acks instead
                        log.exception("a write's on_done failed")
        self.observer.on_write(self.topic, self.partition, written, change.nbytes, skipped)

    async def _retain(self, item: _Retention) -> None:
        if self._retain_log is not None:  # a replicated log: it drops whole ledgers itself
            try:
                _resolve(item.future, await self._retain_log(item.now_ms, item.protect_from))
            except Exception as exc:
                _fail(item.future, exc)
            return
        try:
            change = self._embedded("retention steps").prepare_retention(
                item.now_ms, item.protect_from
            )
            if change is None:
                _resolve(item.future, 0)
                return
            try:
                await self._commit_kv(change)  # deletes: to the thread, never inline
            except BaseException:
                self.log.abort(change)
                raise
            self.log.apply(change)
            _resolve(item.future, change.drop_front)
        except Exception as exc:
            _fail(item.future, exc)

    async def _end_txn(self, item: _TxnEnd) -> None:
        try:
            change = self._embedded("transactions").prepare_marker(item.txn_id, item.committed)
        except Exception as exc:
            item.group.failed(exc)
            return
        # only an embedded actor gets here (_embedded above): its group commits KV ops
        me = cast("PartitionActor[PartitionLog]", self)
        if change is None:  # the transaction wrote nothing here
            item.group.prepared(me, None)
            return
        item.group.prepared(me, change)
        # the group commits every partition's marker in one KV transaction and applies
        # (or aborts) this change with the others; nothing else of this partition may be
        # prepared meanwhile
        await item.group.finished()

    async def _change(self, item: _Change) -> None:
        try:
            change = item.prepare()
            if change is None:
                if not item.future.done():
                    item.future.set_result(False)
                return
            try:
                await self._commit(change)
            except BaseException:
                self.log.abort(change)
                raise
            self.log.apply(change)
            if not item.future.done():
                item.future.set_result(True)
        except Exception as exc:
            _fail(item.future, exc)

    def _fail_queue(self, exc: BaseException) -> None:
        while self._queue:
            item = self._queue.popleft()
            if isinstance(item, _TxnEnd):
                item.group.failed(exc)
                continue
            if isinstance(item, _Write):
                self._queued_bytes -= item.nbytes
            _fail(item.future, exc)

    def notify_readers(self) -> None:
        """Wake readers waiting for data: the transaction coordinator applied a change."""
        self._notify()

    def _notify(self) -> None:
        ev = self._moved
        self._moved = asyncio.Event()
        ev.set()

    async def close(self) -> None:
        """Stop taking writes, let the in-flight commit finish, fail what is still queued."""
        self._closed = True
        task = self._task
        if task is not None:
            # finish the commit in flight; fail the rest of the queue
            pending = list(self._queue)
            self._queue.clear()
            self._queued_bytes = 0
            for item in pending:
                if isinstance(item, _TxnEnd):
                    item.group.failed(UnavailableError("server is shutting down"))
                else:
                    _fail(item.future, UnavailableError("server is shutting down"))
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), 30)
        self._fail_queue(ClosedError("partition closed"))
        self._notify()


def write_failed(future: asyncio.Future[Any] | None) -> bool:
    """Whether ``future`` (a write `PartitionActor.submit` returned) failed. The actor fails a
    write, and every write queued behind it, in its own turn, before any task awaiting them
    runs: a front that looks at its producer's newest pending write before it submits the
    next never has a write stored after a failed one of that producer (the client's resend
    of the failed one would then be skipped as a duplicate, never stored)."""
    return (
        future is not None
        and future.done()
        and (future.cancelled() or future.exception() is not None)
    )


def _fail(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
        # Mark retrieved: a caller that went away must not produce "exception never retrieved".
        fut.exception()


def _resolve(fut: asyncio.Future[int], value: int) -> None:
    if not fut.done():
        fut.set_result(value)
