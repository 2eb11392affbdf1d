"""`ReplicatedPartitionLog`: one partition whose log is a managed log on bookies.

The embedded `PartitionLog` keeps a partition in LMDB; this one keeps it in a
`ManagedLog` (ledgers listed in ZooKeeper) so that any broker can take the
partition over. It has the same change protocol: ``prepare_*`` computes a change
without touching the state, ``commit`` appends it to the managed log (one entry,
acknowledged by AQ bookies), ``apply`` makes it visible, ``abort`` forgets a
change whose commit failed (the managed log guarantees a failed append was not
written, or fails the whole log). One change is in flight at a time.

What the embedded log keeps in tables (producer table, end offset, consumer
positions) is a `PartitionState` derived from the entries. It is snapshotted
into the managed log every ``snapshot_every`` entries and at close, so a new
owner loads the snapshot and replays only the entries after it; since the owner
and the replay change the state through the same `PartitionState.apply_entry`
rules, the state after a handover is the state before it.

Retention drops whole ledgers (after a snapshot covering them): a ledger is
past ``retention_ms`` once the ledger after it was created that long ago (every
entry of a ledger was written before the next one was created), and past
``retention_bytes`` while the ledgers after it hold enough.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from weir.errors import BadRequestError, CorruptDataError, PartitionOverflowError, WeirError
from weir.replication.errors import ManagedLogFailedError, ManagedLogFencedError
from weir.replication.ledger.client import LedgerClient
from weir.replication.managed_log import LogEntry, ManagedLog, ManagedLogConfig, Position
from weir.replication.partition_log.lacks import EmbeddedOnly
from weir.replication.partition_log.records import DATA, encode_data, encode_state
from weir.replication.partition_log.stamping import stamp_batches
from weir.replication.partition_log.state import PartitionState
from weir.storage.batch import iter_batches
from weir.storage.incoming import IncomingBatch
from weir.storage.log_interface import PartitionLogLike
from weir.storage.partition import BatchResult, PartitionConfig, ReadResult
from weir.storage.producers import ProducerState

log = logging.getLogger("weir.replicated_partition")


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """How a replicated partition uses its managed log."""

    managed_log: ManagedLogConfig = field(default_factory=ManagedLogConfig)
    snapshot_every: int = 1000  # entries between snapshots (and one at close)


@dataclass(slots=True)
class ReplicatedChange:
    """One entry about to be appended, and the state after it."""

    payload: bytes
    count: int
    first_offset: int
    nbytes: int
    results: list[BatchResult] = field(default_factory=list)
    producers: dict[str, ProducerState] = field(default_factory=dict)
    positions: dict[str, bytes | None] = field(default_factory=dict)
    drop_producers: list[str] = field(default_factory=list)
    last_written: int = 0
    position: Position | None = None  # set by commit
    drop_front: int = 0  # the PartitionActor's retention count (always 0 here)

    @property
    def end_offset(self) -> int:
        return self.first_offset + self.count


class ReplicatedPartitionLog(EmbeddedOnly):
    """Open with `ReplicatedPartitionLog.open`; see the module docstring."""

    def __init__(
        self,
        mlog: ManagedLog,
        state: PartitionState,
        config: PartitionConfig,
        replication: ReplicationConfig,
        label: str,
    ) -> None:
        self.mlog = mlog
        self.state = state
        self.config = config
        self.replication = replication
        self.label = label
        self.damage: CorruptDataError | None = None
        self.replayed_entries = 0
        # what a change on a log that is no longer this owner's (fenced, or failed: it
        # must be opened again) raises instead of the managed log's error: the broker
        # gives the partition up there and answers a retryable not-owner error
        self.lost: Callable[[WeirError], WeirError] | None = None
        self._pending: ReplicatedChange | None = None
        self._since_snapshot = 0
        self._snapshot_task: asyncio.Task[None] | None = None
        self._snapshot_lock = asyncio.Lock()

    @classmethod
    async def open(
        cls,
        client: LedgerClient,
        name: str,
        config: PartitionConfig | None = None,
        replication: ReplicationConfig | None = None,
        *,
        owner: str = "",
        claim: int | None = None,
        label: str = "",
    ) -> ReplicatedPartitionLog:
        """Take the partition over: open its managed log (fencing the previous owner), load
        the latest snapshot and replay the entries after it."""
        rep = replication or ReplicationConfig()
        mlog = await ManagedLog.open(client, name, rep.managed_log, owner=owner, claim=claim)
        try:
            loaded = await mlog.load_snapshot()
            state = PartitionState() if loaded is None else PartitionState.decode(loaded[1])
            after = None if loaded is None else loaded[0].covers
            replayed = 0
            async for entry in mlog.scan(after):
                state.apply_entry(entry)
                replayed += 1
            if state.end_offset != mlog.end_offset:
                raise CorruptDataError(
                    f"replicated partition {name}: replay ends at {state.end_offset}, its log "
                    f"at {mlog.end_offset}",
                    partition=label or name,
                    offset=state.end_offset,
                )
        except BaseException:
            await mlog.abandon()
            raise
        plog = cls(mlog, state, config or PartitionConfig(), rep, label or name)
        plog.replayed_entries = replayed
        plog._since_snapshot = replayed
        return plog

    async def close(self) -> None:
        """Snapshot (the next owner then replays nothing) and close the managed log."""
        await self._wait_snapshot()
        with contextlib.suppress(WeirError):
            if self._since_snapshot and self._pending is None:
                await self.snapshot()
        await self.mlog.close()

    async def abandon(self) -> None:
        """Stop without closing (a crash, as far as the next owner can tell)."""
        if self._snapshot_task is not None:
            self._snapshot_task.cancel()
            with contextlib.suppress(BaseException):
                await self._snapshot_task
        await self.mlog.abandon()

    # ------------------------------------------------------------------ queries

    @property
    def generation(self) -> int:
        return self.mlog.generation

    @property
    def start_offset(self) -> int:
        return self.mlog.start_offset

    @property
    def end_offset(self) -> int:
        return self.state.end_offset

    @property
    def stable_offset(self) -> int:
        """No transactions here (they are refused): every message is stable."""
        return self.state.end_offset

    @property
    def message_count(self) -> int:
        return self.end_offset - self.start_offset

    @property
    def size_bytes(self) -> int:
        return self.mlog.size_bytes

    @property
    def producers(self) -> dict[str, ProducerState]:
        return self.state.producers

    @property
    def positions(self) -> dict[str, bytes]:
        return self.state.positions

    def last_seq_no(self, producer_id: str, txn_id: int = 0) -> int | None:
        """The producer's highest stored seq_no (``txn_id``: no transaction is ever open)."""
        st = self.state.producers.get(producer_id)
        return None if st is None else st.max_seq_no

    # ------------------------------------------------------------------ changes

    def _begin(self) -> None:
        if self._pending is not None:
            raise RuntimeError(f"partition {self.label}: a change is already in flight")
        try:
            self.mlog._check_open()
        except (ManagedLogFencedError, ManagedLogFailedError) as exc:
            if self.lost is None:
                raise
            raise self.lost(exc) from exc

    def prepare_write(
        self,
        batches: Sequence[IncomingBatch],
        now_ms: int | None = None,
        txn_ids: Sequence[int] | None = None,
    ) -> ReplicatedChange:
        """Dedup and stamp (as the embedded log does); the change to commit. Writes in a
        transaction (``txn_ids`` not all 0) are refused: not supported here yet."""
        if txn_ids is not None and any(txn_ids):
            raise BadRequestError(
                f"partition {self.label}: transactions are not supported on replicated storage"
            )
        self._begin()
        cfg = self.config
        incoming = sum(len(b.buf) for b in batches)
        if cfg.max_bytes is not None and self.size_bytes + incoming > cfg.max_bytes:
            raise PartitionOverflowError(
                f"partition {self.label} holds {self.size_bytes} bytes, limit {cfg.max_bytes}; "
                "writes resume when retention frees space"
            )
        if cfg.max_messages is not None:
            n = sum(b.header.record_count for b in batches)
            if self.message_count + n > cfg.max_messages:
                raise PartitionOverflowError(
                    f"partition {self.label} holds {self.message_count} messages, limit "
                    f"{cfg.max_messages}; writes resume when retention frees space"
                )
        now = int(time.time() * 1000) if now_ms is None else now_ms
        now = max(now, self.state.last_written_ms)
        st = stamp_batches(
            batches, self.state.producers, self.end_offset, now, deduplicate=cfg.deduplicate
        )
        change = ReplicatedChange(
            payload=encode_data(st.chunks) if st.chunks else b"",
            count=st.end_offset - self.end_offset,
            first_offset=self.end_offset,
            nbytes=st.nbytes,
            results=st.results,
            producers=st.producers,
            last_written=now if st.chunks else self.state.last_written_ms,
        )
        self._pending = change
        return change

    def prepare_positions(
        self, positions: Mapping[str, bytes | None], drop_producers: Sequence[str] = ()
    ) -> ReplicatedChange:
        """Set (or delete, with None) named positions; forget producers' dedup state."""
        self._begin()
        payload = encode_state(positions, drop_producers)
        change = ReplicatedChange(
            payload=payload,
            count=0,
            first_offset=self.end_offset,
            nbytes=len(payload),
            positions=dict(positions),
            drop_producers=list(drop_producers),
            last_written=self.state.last_written_ms,
        )
        self._pending = change
        return change

    async def commit(self, change: ReplicatedChange) -> None:
        """Append the change's entry; returns once AQ bookies have it. A change with nothing
        to store (every batch a duplicate) appends nothing."""
        if not change.payload:
            return
        res = await self.mlog.append(change.payload, change.count)
        if res.first_offset != change.first_offset:
            raise CorruptDataError(
                f"partition {self.label}: entry appended at offset {res.first_offset}, the "
                f"change was stamped for {change.first_offset}",
                partition=self.label,
                offset=change.first_offset,
            )
        change.position = res.position

    def apply(self, change: ReplicatedChange) -> None:
        """Make a committed change visible (the same fold a replay does)."""
        st = self.state
        st.producers.update(change.producers)
        st.set_positions(change.positions, change.drop_producers)
        st.end_offset = change.end_offset
        st.last_written_ms = change.last_written
        if change.position is not None:
            st.position = change.position
            self._since_snapshot += 1
        self._pending = None
        if self._since_snapshot >= self.replication.snapshot_every and self._snapshot_task is None:
            self._snapshot_task = asyncio.get_running_loop().create_task(
                self._background_snapshot()
            )

    def abort(self, change: ReplicatedChange) -> None:
        """Forget a change whose commit failed: the state stays as before it."""
        self._pending = None

    async def write(
        self, batches: Sequence[IncomingBatch], now_ms: int | None = None
    ) -> list[BatchResult]:
        """Prepare, commit and apply one write (tests, tools)."""
        change = self.prepare_write(batches, now_ms)
        await self._run(change)
        return change.results

    async def set_positions(
        self, positions: Mapping[str, bytes | None], drop_producers: Sequence[str] = ()
    ) -> None:
        await self._run(self.prepare_positions(positions, drop_producers))

    async def _run(self, change: ReplicatedChange) -> None:
        try:
            await self.commit(change)
        except BaseException:
            self.abort(change)
            raise
        self.apply(change)

    # ------------------------------------------------------------------ snapshots

    async def snapshot(self) -> None:
        """Store the state as of the last applied entry; the next owner replays from there."""
        async with self._snapshot_lock:
            if self.state.position is None:
                return  # nothing written yet: an empty log replays in no time
            data = self.state.encode()
            covers = self.state.position
            done = self._since_snapshot
            await self.mlog.save_snapshot(data, covers)
            self._since_snapshot -= done

    async def _background_snapshot(self) -> None:
        try:
            await self.snapshot()
        except WeirError as exc:
            log.warning("snapshot failed", extra={"partition": self.label, "error": exc.message})
        finally:
            self._snapshot_task = None

    async def _wait_snapshot(self) -> None:
        task = self._snapshot_task
        if task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.shield(task)

    # ------------------------------------------------------------------ retention

    async def retain(self, now_ms: int | None = None, protect_from: int | None = None) -> int:
        """Drop whole ledgers past retention (age or size), never at or past
        ``protect_from``; a snapshot covering them is stored first. Ledgers dropped."""
        cfg = self.config
        if cfg.retention_ms is None and cfg.retention_bytes is None:
            return 0
        now = int(time.time() * 1000) if now_ms is None else now_ms
        ledgers = self.mlog.ledgers
        remaining = self.mlog.size_bytes
        before = None
        for li, nxt in itertools.pairwise(ledgers):
            if li.is_open or (protect_from is not None and li.end_offset > protect_from):
                break
            expired = cfg.retention_ms is not None and nxt.ctime_ms < now - cfg.retention_ms
            oversize = (
                cfg.retention_bytes is not None and remaining - li.size >= cfg.retention_bytes
            )
            if not (expired or oversize):
                break
            remaining -= li.size
            before = li.end_offset
        if before is None:
            return 0
        snap = self.mlog.snapshot
        last = self.state.position
        if last is not None and (snap is None or snap.covers < last):
            await self.snapshot()
        return await self.mlog.trim(before)

    # ------------------------------------------------------------------ reads

    async def read(
        self, from_offset: int, max_bytes: int = 1 << 20, to_offset: int | None = None
    ) -> ReadResult:
        """Whole batches from the one holding ``from_offset`` on, up to about ``max_bytes``
        (at least one batch), never past ``to_offset`` or the end: as the embedded log."""
        start = max(from_offset, self.start_offset)
        stop = self.end_offset if to_offset is None else min(to_offset, self.end_offset)
        result = ReadResult([], start, start, self.start_offset, self.end_offset)
        if start >= stop:
            return result
        entries = await self.mlog.read(start, max_bytes, stop)
        return batches_of(entries, result, start, stop, max_bytes, self.label)


def batches_of(
    entries: Sequence[LogEntry],
    result: ReadResult,
    start: int,
    stop: int,
    max_bytes: int,
    label: str,
) -> ReadResult:
    """Fill ``result`` with the batches of DATA entries from the one holding ``start``."""
    total = 0
    first: int | None = None
    for e in entries:
        if e.payload[0] != DATA:
            continue
        body = memoryview(e.payload)[1:]
        for pos, h in iter_batches(body):
            end = h.base_offset + h.record_count
            if end <= start:
                continue
            if h.base_offset >= stop or (total >= max_bytes and result.chunks):
                break
            result.chunks.append(body[pos : pos + h.length])
            total += h.length
            if first is None:
                first = h.base_offset
            start = result.next_offset = end
        if start >= stop or total >= max_bytes:
            break
    if first is None:
        raise CorruptDataError("no stored batch holds this offset", partition=label, offset=start)
    result.first_offset = first
    return result


def _conforms(log: ReplicatedPartitionLog) -> PartitionLogLike[ReplicatedChange]:
    return log  # mypy checks here that the replicated log satisfies the broker's Protocol
