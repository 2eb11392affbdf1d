"""`ManagedLog`: one log as a sequence of ledgers, with a single owner (Pulsar's ManagedLedger).

The owner appends entries to its open ledger; each entry covers ``count``
offsets of the log (0 for entries carrying state), so the log has dense offsets
across ledgers as a weir partition does. Appends pipeline and complete in order.

**Switching ledgers.** The open ledger is closed and the next one created and
recorded (one compare-and-set of the metadata) when it is full (entries, bytes,
age) or when an append fails. Appends arriving meanwhile wait for the new
ledger. An entry is sent to a ledger only once the metadata names that ledger,
so whoever opens the log next finds (and fences) every ledger this owner could
still write to.

**A failed append** (bookies lost, no replacement): the writer's ledger is
closed at its last add confirmed (BookKeeper closes a failed ledger the same
way), so the failed entry and every one after it are known *not* written; only
then do their futures fail, with the retryable `CommitFailedError`, and the
next append goes to a new ledger from the same offset. If that close cannot be
recorded the log fails with `ManagedLogFailedError` (reopen it: the recovery
finds what was written).

**Fencing.** Another owner opening the log recovers this owner's ledger, which
fences its bookies: this owner's next add answer is FENCED, and every append not
yet acknowledged fails with `ManagedLogFencedError`, as does any later change of
the metadata (its CAS names a version the new owner replaced).

**Reads** serve entries up to the last acknowledged one, from a cache of recent
entries (`EntryCache`) or the bookies. **Trim** drops whole ledgers from the
front (retention); **snapshots** store derived state covering the log up to a
position in a ledger of their own, so a new owner replays only what follows.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import enum
import logging
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace

from kazoo.exceptions import KazooException

from weir.errors import BadRequestError, CommitFailedError, WeirError
from weir.replication.errors import (
    LedgerFencedError,
    ManagedLogFailedError,
    ManagedLogFencedError,
    MetadataConflictError,
)
from weir.replication.ledger.client import LedgerClient
from weir.replication.ledger.handle import LedgerHandle, ReadHandle
from weir.replication.ledger.metadata import LedgerState
from weir.replication.managed_log.cache import EntryCache
from weir.replication.managed_log.config import ManagedLogConfig
from weir.replication.managed_log.entry import LogEntry, decode_entry, encode_entry
from weir.replication.managed_log.metadata import (
    LedgerInfo,
    ManagedLogMetadata,
    ManagedLogStore,
    Position,
    SnapshotInfo,
)
from weir.replication.managed_log.open_op import OpenOp, delete_quietly, discard_ledger
from weir.replication.protocol import MAX_ENTRY

log = logging.getLogger("weir.managed_log")


class LogState(enum.Enum):
    OPEN = "open"
    FENCED = "fenced"  # another owner took over
    FAILED = "failed"  # state unknown: open again
    CLOSED = "closed"


@dataclass(slots=True)
class AppendResult:
    position: Position
    first_offset: int
    count: int


@dataclass(slots=True)
class _Append:
    payload: bytes
    first_offset: int
    count: int
    future: asyncio.Future[AppendResult]
    entry: int = -1
    data_size: int = 0
    entry_future: asyncio.Future[int] | None = None
    failed: BaseException | None = None
    done: bool = False


@dataclass(slots=True)
class _Current:
    """The open ledger: its writer and what was sent to it."""

    handle: LedgerHandle
    info: LedgerInfo
    opened_at: float
    sent_bytes: int = 0
    confirmed_bytes: int = 0
    ends: list[int] = field(default_factory=list)  # end offset of each confirmed entry
    pending: deque[_Append] = field(default_factory=deque)


class ManagedLog:
    """Open with `ManagedLog.open`; see the module docstring."""

    def __init__(
        self,
        client: LedgerClient,
        store: ManagedLogStore,
        name: str,
        config: ManagedLogConfig,
        md: ManagedLogMetadata,
        version: int,
        handle: LedgerHandle,
    ) -> None:
        self.client = client
        self.store = store
        self.name = name
        self.config = config
        self.md = md
        self.version = version
        self.cache = EntryCache(config.cache_bytes)
        self.state = LogState.OPEN
        self.error: WeirError | None = None
        self.recovered_ledgers = 0
        self.ledger_switches = 0
        self._closed_ledgers: list[LedgerInfo] = list(md.ledgers[:-1])
        self._cur: _Current | None = _Current(handle, md.ledgers[-1], time.monotonic())
        self._end = md.ledgers[-1].first_offset  # confirmed
        self._next = self._end  # assigned
        self._queued: deque[_Append] = deque()
        self._switch_task: asyncio.Task[None] | None = None
        self._md_lock = asyncio.Lock()
        self._readers: dict[int, ReadHandle] = {}
        self._indexes: dict[int, list[int]] = {}  # ledger -> end offset of each entry
        self._moved = asyncio.Event()
        self._closing = False

    # ------------------------------------------------------------------ open / close

    @classmethod
    async def open(
        cls,
        client: LedgerClient,
        name: str,
        config: ManagedLogConfig | None = None,
        *,
        owner: str = "",
        claim: int | None = None,
    ) -> ManagedLog:
        """Take the log over (fencing any previous owner) and open a new ledger in it.

        ``claim``: the generation of the caller's ownership claim (broker/cluster); the
        open is refused with StaleClaimError if the log was opened under a newer one."""
        cfg = config or ManagedLogConfig()
        store = ManagedLogStore(client.zk, client.root)
        op = OpenOp(client, store, name, cfg, owner, claim)
        md, version, handle = await op.run()
        mlog = cls(client, store, name, cfg, md, version, handle)
        mlog.recovered_ledgers = op.recovered_ledgers
        return mlog

    async def close(self) -> None:
        """Let the appends in flight finish, close the open ledger and record it closed, so
        the next owner opens without a recovery."""
        if self.state is not LogState.OPEN:
            return
        self._closing = True
        await self._wait_switch()
        if self.state is LogState.OPEN and self._cur is not None:
            self._start_switch(new_ledger=False)
            await self._wait_switch()
        if self.state is LogState.OPEN:
            self.state = LogState.CLOSED
            self.error = ManagedLogFailedError(f"managed log {self.name!r} is closed")
        self._fail_all(self.error or ManagedLogFailedError("closed"))
        self._wake()

    async def abandon(self) -> None:
        """Stop using the log without closing anything (a crash, as far as ZooKeeper and the
        bookies can tell): for tests, and for an owner that lost its claim."""
        if self.state is LogState.OPEN:
            self.state = LogState.CLOSED
            self.error = ManagedLogFencedError(f"managed log {self.name!r} was abandoned")
        if self._switch_task is not None:
            self._switch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._switch_task
        self._fail_all(self.error or ManagedLogFencedError("abandoned"))
        self._wake()

    # ------------------------------------------------------------------ queries

    @property
    def generation(self) -> int:
        return self.md.generation

    @property
    def start_offset(self) -> int:
        ledgers = self.ledgers
        return ledgers[0].first_offset if ledgers else self._end

    @property
    def end_offset(self) -> int:
        """One past the last acknowledged offset: what readers may read up to."""
        return self._end

    @property
    def next_offset(self) -> int:
        """The first offset the next append will cover (past appends still in flight)."""
        return self._next

    @property
    def ledgers(self) -> list[LedgerInfo]:
        """Every ledger of the log, the open one last (its entries -1)."""
        out = list(self._closed_ledgers)
        if self._cur is not None:
            out.append(self._cur.info)
        return out

    @property
    def size_bytes(self) -> int:
        cur = self._cur.confirmed_bytes if self._cur is not None else 0
        return sum(li.size for li in self._closed_ledgers) + cur

    @property
    def snapshot(self) -> SnapshotInfo | None:
        return self.md.snapshot

    @property
    def last_position(self) -> Position | None:
        """The position of the last acknowledged entry (None: the log has no entry)."""
        cur = self._cur
        if cur is not None and cur.ends:
            return Position(cur.info.ledger_id, len(cur.ends) - 1)
        for li in reversed(self._closed_ledgers):
            if li.entries > 0:
                return Position(li.ledger_id, li.last_entry)
        return None

    def _check_open(self) -> None:
        if self.state is not LogState.OPEN:
            raise self.error or ManagedLogFailedError(f"managed log {self.name!r} is not open")

    async def wait_for_end(self, offset: int, timeout: float | None) -> bool:
        """Wait until the acknowledged end passes ``offset`` (True) or the timeout ends."""
        while self._end <= offset:
            self._check_open()
            ev = self._moved
            try:
                await asyncio.wait_for(ev.wait(), timeout)
            except TimeoutError:
                return self._end > offset
        return True

    def _wake(self) -> None:
        ev = self._moved
        self._moved = asyncio.Event()
        ev.set()

    # ------------------------------------------------------------------ appends

    async def append(self, payload: bytes, count: int) -> AppendResult:
        return await self.append_async(payload, count)

    def append_async(self, payload: bytes, count: int) -> asyncio.Future[AppendResult]:
        """Append an entry covering ``count`` offsets from `next_offset`; the future resolves
        once it is acknowledged (AQ bookies) and every earlier append is. Appends complete in
        call order; a failed one fails every later one still in flight."""
        self._check_open()
        if self._closing:
            raise ManagedLogFailedError(f"managed log {self.name!r} is closing")
        if count < 0:
            raise BadRequestError(f"an entry covers 0 or more offsets, not {count}")
        if len(payload) + 64 > MAX_ENTRY:
            raise BadRequestError(f"entry of {len(payload)} bytes is over the ledger entry limit")
        fut: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        a = _Append(payload, self._next, count, fut)
        self._next += count
        if self._cur is not None and self._switch_task is None:
            self._send(self._cur, a)
        else:
            self._queued.append(a)
            if self._switch_task is None:
                self._start_switch(new_ledger=True)
        return fut

    def _send(self, cur: _Current, a: _Append) -> None:
        data = encode_entry(a.first_offset, a.count, cur.sent_bytes, a.payload)
        a.data_size = len(data)
        cur.sent_bytes += len(data)
        try:
            entry_future = cur.handle.add_async(data)
        except WeirError as exc:
            a.failed = exc
            cur.pending.append(a)
            self._start_switch(new_ledger=bool(self._queued))
            return
        a.entry_future = entry_future
        cur.pending.append(a)
        entry_future.add_done_callback(lambda f: self._on_added(cur, a, f))
        if self._full(cur):
            self._start_switch(new_ledger=True)

    def _full(self, cur: _Current) -> bool:
        cfg = self.config
        return (
            len(cur.pending) + len(cur.ends) >= cfg.max_entries_per_ledger
            or cur.sent_bytes >= cfg.max_ledger_bytes
            or time.monotonic() - cur.opened_at >= cfg.max_ledger_age_s
        )

    def _on_added(self, cur: _Current, a: _Append, f: asyncio.Future[int]) -> None:
        if f.cancelled():
            a.failed = ManagedLogFailedError("append cancelled")
        elif f.exception() is not None:
            a.failed = f.exception()
        if a.failed is not None:
            if self._switch_task is None and self._cur is cur:
                self._start_switch(new_ledger=bool(self._queued))
            return
        # completions come in entry order: this is the oldest pending append
        head = cur.pending.popleft()
        assert head is a, "ledger adds completed out of order"
        a.entry = f.result()
        a.done = True
        pos = Position(cur.info.ledger_id, a.entry)
        data_before = cur.confirmed_bytes
        cur.confirmed_bytes += a.data_size
        cur.ends.append(a.first_offset + a.count)
        self._end = a.first_offset + a.count
        self.cache.put(LogEntry(pos, a.first_offset, a.count, data_before, a.payload, a.data_size))
        if not a.future.done():
            a.future.set_result(AppendResult(pos, a.first_offset, a.count))
        self._wake()

    # ------------------------------------------------------------------ switching ledgers

    def _start_switch(self, *, new_ledger: bool) -> None:
        if self._switch_task is None and self.state is LogState.OPEN:
            self._switch_task = asyncio.get_running_loop().create_task(
                self._switch(new_ledger), name=f"managed-log-switch-{self.name}"
            )

    async def _wait_switch(self) -> None:
        task = self._switch_task
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task)

    async def _switch(self, new_ledger: bool) -> None:
        try:
            await self._switch_ledgers(new_ledger)
        except (KazooException, WeirError) as exc:
            self._broken(exc)
        finally:
            self._switch_task = None
        if self.state is not LogState.OPEN:
            return
        cur = self._cur
        if cur is None:
            if self._queued and not self._closing:
                self._start_switch(new_ledger=True)  # appends came while it closed the ledger
            return
        while self._queued and self._switch_task is None:
            self._send(cur, self._queued.popleft())

    async def _switch_ledgers(self, new_ledger: bool) -> None:
        """Close the open ledger (at its last add confirmed if an append failed), then, if
        appends wait or a rollover asked for it, create the next ledger and record both in
        one compare-and-set."""
        cur = self._cur
        closed: LedgerInfo | None = None
        if cur is not None:
            closed = await self._close_current(cur)
            if closed is None:
                return  # fenced or failed: everything was failed
        if self.state is not LogState.OPEN:
            return
        if not (new_ledger or self._queued) and closed is not None:
            if await self._record(closed, None):
                self._cur = None
                self._closed_ledgers.append(closed)
            return
        cfg = self.config
        try:
            handle = await self.client.create_ledger(
                cfg.ensemble_size, cfg.write_quorum, cfg.ack_quorum
            )
        except WeirError as exc:
            # no ledger to write to (bookies down): what waits fails, the next append retries
            if closed is not None and await self._record(closed, None):
                self._cur = None
                self._closed_ledgers.append(closed)
            self._fail_queued(CommitFailedError(f"no ledger to append to: {exc.message}"))
            return
        info = LedgerInfo(handle.ledger_id, self._end)
        if not await self._record(closed, info):
            await discard_ledger(self.client, handle)
            return
        if closed is not None and closed.entries > 0:
            self._closed_ledgers.append(closed)
        self._cur = _Current(handle, info, time.monotonic())
        self.ledger_switches += 1

    async def _close_current(self, cur: _Current) -> LedgerInfo | None:
        """Wait for the open ledger's appends, then close it: normally, or at its last add
        confirmed when one failed. The closed ledger's info, or None when the log is done for
        (fenced or failed: every append in flight was failed)."""
        handle = cur.handle
        sent = [a.entry_future for a in cur.pending if a.entry_future is not None]
        # the completion callbacks (_on_added) run before this wait returns
        await asyncio.gather(*sent, return_exceptions=True)
        failures = [a.failed for a in cur.pending if a.failed is not None]
        if any(isinstance(e, LedgerFencedError) for e in failures):
            self._fenced(f"ledger {handle.ledger_id} was fenced by a new owner")
            return None
        entries = len(cur.ends)
        if failures:
            if not await self._seal(handle):
                return None
            first = cur.pending[0] if cur.pending else None
            err = CommitFailedError(
                f"append at offset {first.first_offset if first else self._end} not written: "
                f"{_message(failures[0])}; ledger {handle.ledger_id} closed before it"
            )
            for a in cur.pending:
                _fail(a.future, err)
            cur.pending.clear()
            self._fail_queued(err)
        else:
            try:
                await handle.close()
            except LedgerFencedError:
                self._fenced(f"ledger {handle.ledger_id} was taken over before it closed")
                return None
        return cur.info.closed(entries, self._end, cur.confirmed_bytes)

    async def _seal(self, handle: LedgerHandle) -> bool:
        """Close a failed writer's ledger at its last add confirmed: what follows is then
        never readable, so the failed appends are known not written."""
        lac = handle.last_add_confirmed
        closed = handle.metadata.with_state(LedgerState.CLOSED, lac)
        try:
            handle.version = await handle.store.write(handle.ledger_id, closed, handle.version)
            handle.metadata = closed
            return True
        except MetadataConflictError:
            current, _ = await handle.store.read(handle.ledger_id)
            if current.state == LedgerState.CLOSED and current.last_entry_id == lac:
                return True  # an ensemble change or our own close got there: same end
            self._fenced(f"ledger {handle.ledger_id} was recovered by a new owner")
            return False

    async def _record(self, closed: LedgerInfo | None, opened: LedgerInfo | None) -> bool:
        """CAS the metadata: ``closed`` replaces the open ledger's entry, ``opened`` follows.
        An empty closed ledger is dropped when a new one follows (it starts at the same
        offset); alone, it stays, so the metadata still says where the log ends."""
        drop = closed is not None and closed.entries == 0 and opened is not None
        async with self._md_lock:
            ledgers = list(self.md.ledgers)
            if closed is not None:
                assert ledgers and ledgers[-1].ledger_id == closed.ledger_id
                if drop:
                    ledgers.pop()
                else:
                    ledgers[-1] = closed
            if opened is not None:
                ledgers.append(opened)
            if not await self._cas(replace(self.md, ledgers=tuple(ledgers))):
                return False
        if drop and closed is not None:
            await delete_quietly(self.client, closed.ledger_id)
        return True

    async def _cas(self, md: ManagedLogMetadata) -> bool:
        """Write the metadata if it is still the version this owner holds; False (and the log
        fenced) if another owner changed it."""
        try:
            self.version = await self.store.write(self.name, md, self.version)
        except MetadataConflictError:
            self._fenced("the metadata was changed by a new owner")
            return False
        self.md = md
        return True

    # ------------------------------------------------------------------ failure

    def _fenced(self, why: str) -> None:
        if self.state is LogState.OPEN:
            self.state = LogState.FENCED
            self.error = ManagedLogFencedError(f"managed log {self.name!r}: {why}")
            log.warning("managed log fenced", extra={"log": self.name, "why": why})
        self._fail_all(self.error or ManagedLogFencedError(why))
        self._wake()

    def _broken(self, exc: BaseException) -> None:
        if self.state is LogState.OPEN:
            self.state = LogState.FAILED
            self.error = ManagedLogFailedError(
                f"managed log {self.name!r} lost track of its ledgers ({_message(exc)}); open it again"
            )
            log.warning("managed log failed", extra={"log": self.name, "error": repr(exc)})
        self._fail_all(self.error or ManagedLogFailedError(_message(exc)))
        self._wake()

    def _fail_all(self, exc: WeirError) -> None:
        if self._cur is not None:
            for a in self._cur.pending:
                _fail(a.future, exc)
            self._cur.pending.clear()
        self._fail_queued(exc)

    def _fail_queued(self, exc: WeirError) -> None:
        while self._queued:
            _fail(self._queued.popleft().future, exc)
        self._next = self._end

    # ------------------------------------------------------------------ reads

    async def read(
        self, from_offset: int, max_bytes: int = 1 << 20, to_offset: int | None = None
    ) -> list[LogEntry]:
        """Entries holding offsets from ``from_offset`` on (entries of count 0 skipped), up to
        about ``max_bytes`` (at least one entry), never past ``to_offset`` or the end."""
        start = max(from_offset, self.start_offset)
        stop = self._end if to_offset is None else min(to_offset, self._end)
        out: list[LogEntry] = []
        if start >= stop:
            return out
        total = 0
        ledgers = self.ledgers
        firsts = [li.first_offset for li in ledgers]
        i = max(0, bisect.bisect_right(firsts, start) - 1)
        while i < len(ledgers) and start < stop and total < max_bytes:
            li = ledgers[i]
            last = self._last_entry(li)
            entry = await self._locate(li, start, last)
            while entry <= last and start < stop and total < max_bytes:
                e = await self._read_entry(li.ledger_id, entry)
                entry += 1
                if e.count == 0 or e.end_offset <= start:
                    continue
                out.append(e)
                total += e.size
                start = e.end_offset
            i += 1
        return out

    async def scan(self, after: Position | None = None) -> AsyncIterator[LogEntry]:
        """Every acknowledged entry after ``after`` (from the first one with None), in order,
        state entries included: how a new owner replays what its snapshot does not cover."""
        for li in self.ledgers:
            if after is not None and li.ledger_id < after.ledger:
                continue
            first = after.entry + 1 if after is not None and li.ledger_id == after.ledger else 0
            for entry in range(first, self._last_entry(li) + 1):
                yield await self._read_entry(li.ledger_id, entry)

    def _last_entry(self, li: LedgerInfo) -> int:
        cur = self._cur
        if cur is not None and li.ledger_id == cur.info.ledger_id:
            return len(cur.ends) - 1
        return li.last_entry

    async def _locate(self, li: LedgerInfo, offset: int, last: int) -> int:
        """The first entry of ledger ``li`` that ends past ``offset``."""
        cur = self._cur
        if cur is not None and li.ledger_id == cur.info.ledger_id:
            return bisect.bisect_right(cur.ends, offset)
        ends = self._indexes.get(li.ledger_id)
        if ends is not None:
            return bisect.bisect_right(ends, offset)
        lo, hi = 0, last + 1  # binary search on the entries' headers
        while lo < hi:
            mid = (lo + hi) // 2
            if (await self._read_entry(li.ledger_id, mid)).end_offset <= offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    async def _read_entry(self, ledger_id: int, entry: int) -> LogEntry:
        pos = Position(ledger_id, entry)
        cached = self.cache.get(pos)
        if cached is not None:
            return cached
        cur = self._cur
        reader: ReadHandle
        if cur is not None and ledger_id == cur.info.ledger_id:
            reader = cur.handle
        else:
            reader = self._readers.get(ledger_id) or await self._open_reader(ledger_id)
        try:
            data = await reader.read(entry)
        except WeirError:
            if reader is not self._readers.get(ledger_id):
                raise
            # the auditor may have moved copies since: read the ledger's metadata again
            self._readers.pop(ledger_id, None)
            data = await (await self._open_reader(ledger_id)).read(entry)
        e = decode_entry(pos, data)
        self.cache.put(e)
        return e

    async def _open_reader(self, ledger_id: int) -> ReadHandle:
        reader = await self.client.open_ledger(ledger_id)
        if len(self._readers) >= 64:
            self._readers.pop(next(iter(self._readers)))
        self._readers[ledger_id] = reader
        return reader

    # ------------------------------------------------------------------ retention

    async def trim(self, before_offset: int) -> int:
        """Drop the closed ledgers whose offsets all lie below ``before_offset``; how many went.
        Never the last ledger (the metadata says where the log ends), nor one holding entries
        after the snapshot (a new owner replays them): take a snapshot first."""
        self._check_open()
        async with self._md_lock:
            ledgers = list(self.md.ledgers)
            snap = self.md.snapshot
            n = 0
            for li in ledgers[:-1]:
                if li.is_open or li.end_offset > before_offset:
                    break
                if snap is not None and (
                    li.ledger_id > snap.covers.ledger
                    or (li.ledger_id == snap.covers.ledger and li.last_entry > snap.covers.entry)
                ):
                    break
                n += 1
            if n == 0:
                return 0
            gone = ledgers[:n]
            if not await self._cas(replace(self.md, ledgers=tuple(ledgers[n:]))):
                raise self.error or ManagedLogFencedError("fenced")
            ids = {li.ledger_id for li in gone}
            self._closed_ledgers = [li for li in self._closed_ledgers if li.ledger_id not in ids]
        for li in gone:
            self.cache.drop_ledger(li.ledger_id)
            self._readers.pop(li.ledger_id, None)
            self._indexes.pop(li.ledger_id, None)
            await delete_quietly(self.client, li.ledger_id)
        return n

    # ------------------------------------------------------------------ snapshots

    async def save_snapshot(self, data: bytes, covers: Position) -> SnapshotInfo:
        """Store ``data`` (derived state after every entry up to ``covers``) in a ledger of its
        own and point the metadata at it; the previous snapshot's ledger is deleted."""
        self._check_open()
        cfg = self.config
        handle = await self.client.create_ledger(
            cfg.ensemble_size, cfg.write_quorum, cfg.ack_quorum
        )
        try:
            step = cfg.snapshot_chunk_bytes
            chunks = [data[i : i + step] for i in range(0, len(data), step)] or [b""]
            await asyncio.gather(*(handle.add_async(c) for c in chunks))
            await handle.close()
        except BaseException:
            await discard_ledger(self.client, handle)
            raise
        info = SnapshotInfo(handle.ledger_id, covers, len(data), len(chunks))
        async with self._md_lock:
            old = self.md.snapshot
            if not await self._cas(replace(self.md, snapshot=info)):
                await discard_ledger(self.client, handle)
                raise self.error or ManagedLogFencedError("fenced")
        if old is not None:
            await delete_quietly(self.client, old.ledger_id)
        return info

    async def load_snapshot(self) -> tuple[SnapshotInfo, bytes] | None:
        """The snapshot the metadata points at, and its bytes (None: no snapshot yet)."""
        snap = self.md.snapshot
        if snap is None:
            return None
        reader = await self.client.open_ledger(snap.ledger_id)
        parts = await reader.read_range(0, snap.entries - 1)
        data = b"".join(parts)
        if len(data) != snap.size:
            raise ManagedLogFailedError(
                f"snapshot ledger {snap.ledger_id} holds {len(data)} bytes, expected {snap.size}"
            )
        return snap, data


def _message(exc: BaseException | None) -> str:
    return exc.message if isinstance(exc, WeirError) else repr(exc)


def _fail(fut: asyncio.Future[AppendResult], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
        fut.exception()  # retrieved: a caller that went away must not log a warning
