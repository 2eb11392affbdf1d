"""The broker's retention (a mixin of `Broker`): the background pass that removes
old blobs, never past what important consumers and subscriptions still need unless
the message TTL has passed; then pin expiry."""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import TYPE_CHECKING

from weir.broker.state import now_ms as _now_ms
from weir.broker.tenancy.facade import TenancyFacade
from weir.broker.topics import short_topic
from weir.errors import OffsetOutOfRangeError
from weir.storage.change import PreparedChange

if TYPE_CHECKING:
    from weir.broker.partition_actor import PartitionActor

log = logging.getLogger("weir.broker")


class Retention(TenancyFacade):
    """Retention passes and message-TTL offsets."""

    if TYPE_CHECKING:  # provided by `weir.broker.compaction.facade.Compaction`

        def compaction_hold(self, topic: str, partition: int) -> int | None: ...

        def _note_trim(self, actor: PartitionActor, change: PreparedChange) -> int | None: ...

        def _undo_trim(self, actor: PartitionActor, floor: int, before: int | None) -> None: ...

        async def _raise_trim_floor(self, actor: PartitionActor, floor: int) -> None: ...

    def ttl_offset(self, topic: str, partition: int, now_ms: int | None = None) -> int | None:
        """The first offset younger than the topic's message TTL (None: no TTL): a
        consumer skips what is before it, and retention may remove it."""
        ttl = self.policies_of(topic)["message_ttl_ms"]
        if ttl is None:
            return None
        now = _now_ms() if now_ms is None else now_ms
        return self.actor(topic, partition).log.offset_for_time(now - ttl)

    async def delete_records(self, topic: str, partition: int, before: int) -> int:
        """Delete a partition's records below offset ``before`` (Kafka's DeleteRecords; -1:
        all of them, up to EndOffset). The start offset moves there at once, so readers
        below it are out of range; blobs wholly below it are removed in the same commit,
        the one it falls inside when retention passes its end. Consumers are not asked:
        this is an operator's explicit deletion. The compacted view is trimmed too (its
        records below ``before`` are never served again), also while a compaction run
        goes on. Returns the start offset after it (at least ``before``: a start already
        past it stays)."""
        actor = self.actor(topic, partition)
        end = actor.end_offset
        if before == -1:
            before = end
        if not 0 <= before <= end:
            raise OffsetOutOfRangeError(
                f"cannot delete records before offset {before} of {short_topic(actor.topic)}/"
                f"{partition}: its offsets are {actor.start_offset}..{end}"
            )
        noted: list[tuple[int, int | None]] = []

        def prepare() -> PreparedChange | None:
            change = actor.log.prepare_trim(before)
            if change is not None:  # the compacted view is trimmed in the same commit
                noted.append((change.start_offset, self._note_trim(actor, change)))
            return change

        try:
            trimmed = await actor.run_change(prepare)
        except BaseException:
            for floor, replaced in noted:
                self._undo_trim(actor, floor, replaced)
            raise
        if not trimmed:  # the log starts past it already (retention): the view may not
            await self._raise_trim_floor(actor, before)
        if trimmed:
            log.info(
                "records deleted",
                extra={
                    "topic": short_topic(actor.topic),
                    "partition": partition,
                    "start_offset": actor.start_offset,
                },
            )
        return actor.start_offset

    async def run_retention(self, now_ms: int | None = None) -> int:
        """One retention pass over every partition, then pin expiry; returns blobs removed."""
        removed = 0
        for cfg in list(self._topics.values()):
            if cfg.retention_ms is None and cfg.retention_bytes is None:
                continue
            for p in range(cfg.partitions):
                actor = self._actors.get((cfg.name, p))
                if actor is None:
                    continue
                try:
                    # durable subscriptions and important consumers (subscriptions too)
                    protect = self.subscriptions.protect_from(cfg, p)
                    # (a replicated partition refuses a TTL: its subscriptions hold on)
                    ttl = self.ttl_offset(cfg.name, p, now_ms) if protect is not None else None
                    if protect is not None and ttl is not None:
                        protect = max(protect, ttl)  # past its TTL, nobody's to keep
                    hold = self.compaction_hold(cfg.name, p)
                    if hold is not None:  # a compaction run is reading from there (twice)
                        protect = hold if protect is None else min(protect, hold)
                    removed += await actor.run_retention(now_ms, protect)
                except Exception:  # one partition's trouble must not stop the pass
                    log.exception(
                        "retention failed", extra={"topic": short_topic(cfg.name), "partition": p}
                    )
        by_id = {cfg.topic_id: cfg for cfg in self._topics.values()}
        self.pins.expire(
            lambda tid: self._producer_tables(by_id[tid]) if tid in by_id else None, now_ms
        )
        return removed

    async def _retention_loop(self) -> None:
        for _ in itertools.count():
            await asyncio.sleep(self.config.retention_interval_s)
            if self._closed:
                return
            try:
                n = await self.run_retention()
                if n:
                    log.info("retention removed blobs", extra={"blobs": n})
            except Exception:
                log.exception("retention pass failed")
