"""The broker's compaction calls (a mixin of `Broker`): start a run, report its status,
read a partition compacted, and the background trigger of the compaction threshold.

A run goes over a topic's partitions one after the other; each is compacted by
`weir.storage.compaction.compact_partition` in a worker thread, up to the partition's
*last stable offset* (never into an open transaction; what it reads is read committed,
so aborted messages are gone from the view), its blobs committed through the group committer
like any other job: writers never wait for it. The worker reads the log through the
partition actor's ``read_async`` on the event loop (offloaded blobs and large payloads
read as for any reader), and retention holds back the offsets a run reads
(`compaction_hold`). Once a partition's new view is published the broker makes it live
(on the event loop, between reads) and only then deletes the old view's blobs.

A trim (`delete_records`, Kafka's DeleteRecords) deletes the view's records below it too:
its *trim floor* is committed with the trim and hidden from compacted reads at once. A
trim during a run is not held back (it is an operator's explicit deletion): the run's
reads start at the log's new start, it leaves out what is below the floor it finds after
its first pass, and compacted reads apply the floor to whatever view is live.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable

from weir.broker.compaction.job import CompactionJob, CompactionStatus, PartitionCompactionStatus
from weir.broker.partition_actor import PartitionActor
from weir.broker.state import now_ms as _now_ms
from weir.broker.topic_admin import TopicAdmin
from weir.broker.topics import TopicConfig, short_topic
from weir.errors import BadRequestError, ClosedError, InternalError, WeirError
from weir.storage.change import PreparedChange
from weir.storage.compaction import (
    CompactionSettings,
    Hook,
    LogRead,
    Progress,
    compact_partition,
    load_trim_floor,
    load_view,
    trim_floor_op,
)
from weir.storage.kv import Op
from weir.storage.partition import ReadResult

log = logging.getLogger("weir.compaction")

# Test-only: a path. A compaction run creates this file once it reaches a step (by
# default the first "blob-batch": it has written blobs of a new view), and then waits for
# ever (so that a test can kill -9 the server mid-run). HOLD_AT_ENV names the step and
# which time it is reached in this server's life: "scanned:2" is the second partition's
# first pass done, "blob-batch:3" the third job of view blobs durable, "published:1" the
# first partition's new view published (before the broker makes it live and drops the old).
HOLD_ENV = "WEIR_TEST_COMPACTION_HOLD"
HOLD_AT_ENV = "WEIR_TEST_COMPACTION_HOLD_AT"


def _env_hold_hook() -> Hook | None:
    path = os.environ.get(HOLD_ENV)
    if not path:
        return None
    step_at, _, nth = (os.environ.get(HOLD_AT_ENV) or "blob-batch:1").partition(":")
    target = int(nth or 1)
    seen = 0

    def hold(step: str) -> None:
        nonlocal seen
        if step != step_at:
            return
        seen += 1
        if seen == target:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
            while True:
                time.sleep(3600)

    return hold


class Compaction(TopicAdmin):
    """Compaction runs, their status, compacted reads, the threshold trigger."""

    # ---------------------------------------------------------------- views

    def _load_views(self) -> list[Op]:
        """Every stored view (after the partitions are open); returns the clean-up of blobs
        no view names (a run cut short by a crash)."""
        self._compaction_test_hook = _env_hold_hook()
        cleanup: list[Op] = []
        with self.store.kv.snapshot() as kv:
            for cfg in self._topics.values():
                for p in range(cfg.partitions):
                    view, stray = load_view(kv, cfg.log_id(p), f"{short_topic(cfg.name)}/{p}")
                    cleanup.extend(stray)
                    if view is not None:
                        self._views[(cfg.name, p)] = view
                    floor = load_trim_floor(kv, cfg.log_id(p))
                    if floor:
                        self._trim_floors[(cfg.name, p)] = floor
        return cleanup

    def trim_floor(self, topic: str, partition: int) -> int:
        """The offset below which a trim deleted a partition's records (0: none)."""
        return self._trim_floors.get((self.topic(topic).name, partition), 0)

    def compacted_start(self, topic: str, partition: int) -> int:
        """Where a compacted read of a partition starts from its beginning: the view's
        first offset not trimmed away (retention leaves the view alone), else the log's."""
        actor = self.actor(topic, partition)
        key = (actor.topic, partition)
        view = self._views.get(key)
        floor = self._trim_floors.get(key, 0)
        if view is not None and floor < view.position:
            return floor
        return actor.start_offset

    def _note_trim(self, actor: PartitionActor, change: PreparedChange) -> int | None:
        """Make a trim the view's too (called as the trim is prepared): its floor goes into
        the trim's commit and compacted reads stop serving below it at once, as the log's
        reads do. Returns the floor it replaced, to put back if the commit fails."""
        key = (actor.topic, actor.partition)
        before = self._trim_floors.get(key)
        floor = change.start_offset
        change.ops.append(trim_floor_op(actor.log.log_id, floor))
        self._trim_floors[key] = floor
        return before

    async def _raise_trim_floor(self, actor: PartitionActor, floor: int) -> None:
        """A trim below the log's start (retention went past it) still trims the view."""
        key = (actor.topic, actor.partition)
        if self._trim_floors.get(key, 0) >= floor or key not in self._views:
            return
        await self._commit([trim_floor_op(actor.log.log_id, floor)])
        self._trim_floors[key] = max(floor, self._trim_floors.get(key, 0))

    def _undo_trim(self, actor: PartitionActor, floor: int, before: int | None) -> None:
        """The trim's commit failed: its floor goes, unless a later trim has moved it."""
        key = (actor.topic, actor.partition)
        if self._trim_floors.get(key) != floor:
            return
        if before is None:
            self._trim_floors.pop(key, None)
        else:
            self._trim_floors[key] = before

    async def read_compacted(
        self,
        topic: str,
        partition: int,
        from_offset: int,
        max_bytes: int = 1 << 20,
        to_offset: int | None = None,
        *,
        committed: bool = False,
        control: bool = False,
    ) -> ReadResult:
        """A read of the partition as compacted: below the compacted view's position, the
        latest message of each key at its own offset (offsets are skipped, never
        renumbered), then every message of the live tail (``committed``: read committed;
        ``control``: the tail's transaction markers too, for the Kafka front).
        Same shape as a plain read (whole stored batches; ``next_offset`` is where to read
        on). The view holds committed messages only; nothing below the trim floor is
        returned (a read from below it starts there)."""
        actor = self.actor(topic, partition)
        key = (actor.topic, partition)
        view = self._views.get(key)
        floor = self._trim_floors.get(key, 0)
        from_offset = max(from_offset, floor)
        if view is not None and from_offset < view.position:
            with self.store.kv.snapshot() as kv:
                chunks, first, nxt = view.read(kv, from_offset, max_bytes, floor)
            if chunks:
                return ReadResult(chunks, first, nxt, actor.start_offset, actor.end_offset)
            from_offset = view.position
        return await actor.read_async(
            from_offset, max_bytes, to_offset, committed=committed, control=control
        )

    # ---------------------------------------------------------------- runs

    def compaction_status(self, topic: str) -> CompactionStatus:
        cfg = self.topic(topic)
        job = self._compactions.get(cfg.name)
        parts = [
            PartitionCompactionStatus.of(
                p,
                v.meta if (v := self._views.get((cfg.name, p))) is not None else None,
                job.progress.get(p) if job is not None and job.running else None,
            )
            for p in range(cfg.partitions)
        ]
        return CompactionStatus(
            short_topic(cfg.name),
            job is not None and job.running,
            job.started_ms if job is not None else 0,
            job.error if job is not None else "",
            parts,
        )

    async def compact(self, topic: str, *, wait: bool = False) -> CompactionStatus:
        """Start compacting every partition of ``topic`` (a run already going on is not
        started twice); with ``wait``, return once the run has ended. A run that failed
        says why in the status (``last_error``); ``wait`` raises it."""
        self._check_open()
        cfg = self.topic(topic)
        if cfg.kind != "persistent":
            raise BadRequestError(
                f"topic {short_topic(cfg.name)!r} is non-persistent: it stores nothing to compact"
            )
        job = self._compactions.get(cfg.name)
        if job is None or not job.running:
            job = CompactionJob(cfg.name, _now_ms())
            job.task = asyncio.get_running_loop().create_task(
                self._run_compaction(cfg, job), name=f"compaction-{cfg.name}"
            )
            self._compactions[cfg.name] = job
        if wait:
            await job.wait()
            if job.failure is not None:
                raise job.failure
        return self.compaction_status(cfg.name)

    def _compaction_settings(self, cfg: TopicConfig) -> CompactionSettings:
        c = self.config
        return CompactionSettings(
            delete_retention_ms=self.topic_policies(cfg)["compaction_delete_retention_ms"],
            retain_keyless=c.compaction_retain_keyless,
            blob_bytes=c.compaction_blob_bytes,
            # a job of view blobs: up to eight blobs, at most 8 MiB
            commit_bytes=min(8 << 20, 8 * c.compaction_blob_bytes),
        )

    def _compaction_hook(self, topic: str, partition: int) -> Hook | None:
        hooks = [h for h in (self.compaction_hook, self._compaction_test_hook) if h is not None]
        if not hooks:
            return None

        def hook(step: str) -> None:
            for h in hooks:
                if h is self.compaction_hook:
                    h(f"{step}:{short_topic(topic)}/{partition}")
                else:
                    h(step)

        return hook

    async def _run_compaction(self, cfg: TopicConfig, job: CompactionJob) -> None:
        for p in range(cfg.partitions):
            job.progress[p] = Progress(phase="waiting")
        try:
            for p in range(cfg.partitions):
                if job.cancelled or self._closed:
                    return
                actor = self._actors.get((cfg.name, p))
                if actor is None:
                    return  # the topic was dropped
                key = (cfg.name, p)
                old = self._views.get(key)
                position = actor.stable_offset  # never past an open transaction
                if old is None and position == 0:
                    continue  # nothing written yet
                if (
                    old is not None
                    and position == old.position
                    and not old.meta.tombstones
                    and self._trim_floors.get(key, 0) <= old.meta.floor
                ):
                    continue  # nothing new, no tombstone that might now expire, no trim
                job.reading = (p, old.position if old is not None else 0)
                try:
                    new = await asyncio.to_thread(
                        compact_partition,
                        self.store.kv,
                        self.store.committer,
                        cfg.log_id(p),
                        old,
                        position,
                        self._compaction_settings(cfg),
                        read=self._read_for_thread(actor, job),
                        label=f"{short_topic(cfg.name)}/{p}",
                        progress=job.progress[p],
                        hook=self._compaction_hook(cfg.name, p),
                        cancelled=lambda: job.cancelled or self._closed,
                        floor=self._floor_of(key),
                    )
                finally:
                    job.reading = None
                # live from here (reads run on this loop: none is between the two lines)
                self._views[key] = new
                if old is not None:
                    await self._commit(old.drop_ops())
                self.observer.on_compaction(
                    cfg.name, p, new.meta.messages_before, new.meta.messages_after
                )
                log.info(
                    "partition compacted",
                    extra={
                        "topic": short_topic(cfg.name),
                        "partition": p,
                        "position": new.position,
                        "keys": new.meta.keys,
                        "messages_before": new.meta.messages_before,
                        "messages_after": new.meta.messages_after,
                    },
                )
        except Exception as exc:
            if job.cancelled or self._closed:
                return
            job.failure = (
                exc
                if isinstance(exc, WeirError)
                else InternalError(f"compaction of {short_topic(cfg.name)!r} failed: {exc!r}")
            )
            job.error = job.failure.message
            if not isinstance(exc, WeirError):
                log.exception("compaction failed", extra={"topic": short_topic(cfg.name)})
            else:
                log.error(
                    "compaction failed: %s", job.error, extra={"topic": short_topic(cfg.name)}
                )

    def _floor_of(self, key: tuple[str, int]) -> Callable[[], int]:
        """The trim floor of a partition as a run's worker thread asks for it."""
        return lambda: self._trim_floors.get(key, 0)

    def _read_for_thread(self, actor: PartitionActor, job: CompactionJob) -> LogRead:
        """A `LogRead` for the run's worker thread: each read is the actor's ``read_async``
        on the event loop (between its other reads and writes), the thread waiting. It
        does not fill the shared read cache: a scan of the whole partition would evict
        the blobs consumers of the tail read again and again."""
        loop = asyncio.get_running_loop()

        def read(from_offset: int, max_bytes: int, to_offset: int) -> ReadResult:
            if job.cancelled or self._closed:
                raise ClosedError(f"compaction of {actor.topic}/{actor.partition} cancelled")
            coro = actor.read_async(
                from_offset, max_bytes, to_offset, committed=True, fill_cache=False
            )
            return asyncio.run_coroutine_threadsafe(coro, loop).result()

        return read

    def compaction_hold(self, topic: str, partition: int) -> int | None:
        """The lowest offset of ``partition`` a run is reading now (retention keeps it and
        what follows until the run has read it twice), None when no run reads it."""
        job = self._compactions.get(topic)
        if job is None or not job.running or job.reading is None:
            return None
        p, lo = job.reading
        return lo if p == partition else None

    async def _stop_compaction(self, topic: str) -> None:
        """Cancel a run on ``topic`` and wait until it has stopped (before a drop)."""
        job = self._compactions.pop(topic, None)
        if job is not None and job.running:
            job.cancel()
            with contextlib.suppress(Exception):
                await job.wait()

    # ---------------------------------------------------------------- the threshold

    def due_for_compaction(self, cfg: TopicConfig) -> bool:
        """Whether a partition has more bytes past its view than the topic's
        compaction_threshold_bytes policy (Pulsar's compaction threshold)."""
        threshold = self.topic_policies(cfg)["compaction_threshold_bytes"]
        if threshold is None or cfg.kind != "persistent":
            return False
        for p in range(cfg.partitions):
            actor = self._actors.get((cfg.name, p))
            if actor is None:
                continue
            view = self._views.get((cfg.name, p))
            since = view.position if view is not None else 0
            if actor.log.bytes_from(since, threshold) > threshold:
                return True
        return False

    async def run_compaction_checks(self) -> list[str]:
        """Start a run on every topic over its threshold; returns their names."""
        started = []
        for cfg in list(self._topics.values()):
            job = self._compactions.get(cfg.name)
            if (job is None or not job.running) and self.due_for_compaction(cfg):
                await self.compact(cfg.name)
                started.append(cfg.name)
        return started

    async def _compaction_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.config.compaction_interval_s)
            try:
                await self.run_compaction_checks()
            except Exception:
                log.exception("compaction check failed")

    async def _close_compaction(self) -> None:
        for name in list(self._compactions):
            await self._stop_compaction(name)
