"""The broker's tiered storage (a mixin of `Broker`): the copy and expiration tasks over
every partition, run in the background and on demand (`weir topic offload`), and the
status each partition's tier is in.

The storage side (copy, verify, records, reads, sweeper) is `weir.storage.tiered`;
here the copy runs in a worker thread and its COPY_FINISHED change goes through the
partition actor, in its turn among the writes. A copy covers only blobs that end at
or below the partition's last stable offset (`offload_limit`: no open transaction is
ever offloaded), and the object store
being unreachable only delays offload: the pass backs off and tries again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import logging
import time
from dataclasses import dataclass
from typing import Any

from weir.broker.partition_actor import PartitionActor
from weir.broker.state import now_ms as _now_ms
from weir.broker.tenancy.facade import TenancyFacade
from weir.broker.topics import PERSISTENT, TopicConfig, short_topic
from weir.errors import BadRequestError, TierUnavailableError, UnavailableError
from weir.storage.tiered.manager import OffloadPolicy, TierManager
from weir.storage.tiered.partition_tier import is_remote

log = logging.getLogger("weir.tier")

MAX_BACKOFF_S = 300.0


@dataclass(frozen=True, slots=True)
class PartitionTierStatus:
    """Where one partition's data is: bytes and blobs local and offloaded."""

    partition: int
    start_offset: int
    end_offset: int
    local_bytes: int
    remote_bytes: int
    remote_segments: int
    first_local_offset: int  # offsets below it are only in the tier
    # (first offset, end offset, object key, object size, object CRC32C, transactional:
    # it holds transaction markers or aborted messages, so only the broker reads it right;
    # the offsets the whole object holds, first and end: more than the blob's when packed)
    segments: tuple[tuple[int, int, str, int, int, bool, int, int], ...]


class Tiering(TenancyFacade):
    """Offload passes, object expiry, the sweeper, and tier status."""

    _tier_task: asyncio.Task[None] | None
    _offload_locks: dict[tuple[str, int], asyncio.Lock]
    _tier_backoff_s: float
    _tier_last_error: str

    @property
    def tier(self) -> TierManager | None:
        return self.store.tier

    def offload_policy(self, cfg: TopicConfig) -> OffloadPolicy:
        p = self.topic_policies(cfg)
        return OffloadPolicy(
            p["offload_threshold_bytes"],
            p["offload_threshold_ms"],
            p["offload_deletion_lag_ms"] or 0,
            object_bytes=self.config.tier_object_bytes,
            object_wait_ms=int(self.config.tier_object_wait_s * 1000),
        )

    def offload_limit(self, actor: PartitionActor) -> int:
        """The offset below which data may be offloaded: the last stable offset (EndOffset
        when no transaction is open there)."""
        return actor.stable_offset

    async def offload_partition(
        self, cfg: TopicConfig, partition: int, policy: OffloadPolicy | None = None
    ) -> int:
        """One copy pass over one partition; returns blobs copied. TierUnavailableError
        when the store cannot be reached (the blobs stay local)."""
        tier = self.tier
        actor = self._actors.get((cfg.name, partition))
        if tier is None or actor is None:
            return 0
        policy = policy or self.offload_policy(cfg)
        # one copy pass per partition at a time (the background task, `weir topic offload`)
        lock = self._offload_locks.setdefault((cfg.name, partition), asyncio.Lock())
        async with lock:
            return await self._offload_locked(tier, actor, policy)

    async def _offload_locked(
        self, tier: TierManager, actor: PartitionActor, policy: OffloadPolicy
    ) -> int:
        plog = actor.log
        now = _now_ms()
        copied = 0
        lag = policy.deletion_lag_ms
        for group in tier.groups(plog, policy, now, self.offload_limit(actor)):
            if self._closed:
                break
            recs = await asyncio.to_thread(
                tier.copy_blobs, plog, group, policy.object_bytes > 0, now
            )
            # one blob's record at a time: a crash between them leaves the others
            # COPY_STARTED, abandoned at the next start (the shared object stays for the
            # finished ones: `TierManager.expire`)
            for i, rec in enumerate(recs):
                try:
                    done = await actor.run_change(
                        functools.partial(plog.prepare_copy_finished, rec, lag == 0, now)
                    )
                except BaseException:
                    for r in recs[i:]:
                        await asyncio.to_thread(tier.abandon, r)
                    raise
                if not done:  # retention removed the blob while it was being copied
                    await asyncio.to_thread(tier.abandon, rec)
                    continue
                copied += 1
        for first in tier.lagging(plog, policy, now):
            await actor.run_change(functools.partial(plog.prepare_free_local, first))
        return copied

    async def offload_topic(self, name: str, *, force: bool = False) -> dict[int, int]:
        """Offload a topic now (`weir topic offload`): by its policy, or with ``force``
        every sealed blob below the last stable offset. Returns blobs copied by partition."""
        cfg = self.topic(name)
        if self.tier is None:
            raise UnavailableError("no tier is configured on this server ([tier] backend)")
        if cfg.kind != PERSISTENT:
            raise BadRequestError(
                f"topic {short_topic(cfg.name)!r} is non-persistent: it stores nothing to offload"
            )
        policy = self.offload_policy(cfg)
        if force or not policy.enabled:
            policy = dataclasses.replace(policy, threshold_bytes=0)
        # asked for now: a last object under the packing target is written too
        policy = dataclasses.replace(policy, flush=True)
        out = {}
        for p in range(cfg.partitions):
            out[p] = await self.offload_partition(cfg, p, policy)
        return out

    def tier_status(self, name: str) -> list[PartitionTierStatus]:
        """Each partition's local and offloaded bytes (`weir topic offload-status`)."""
        cfg = self.topic(name)
        out = []
        for p in range(cfg.partitions):
            plog = self.actor(cfg.name, p).log  # a non-persistent topic: BAD_REQUEST
            first_local = plog.end_offset
            for b in plog.blobs:
                if not is_remote(b):
                    first_local = b.first_offset
                    break
            segs = tuple(
                (
                    r.first_offset,
                    r.end_offset,
                    r.object_key,
                    r.object_size,
                    r.object_crc,
                    plog.txns.hides(r.first_offset, r.end_offset),
                    *r.object_offsets,
                )
                for _, r in sorted(plog.remote.items())
            )
            out.append(
                PartitionTierStatus(
                    p,
                    plog.start_offset,
                    plog.end_offset,
                    plog.local_bytes,
                    plog.remote_bytes,
                    len(plog.remote),
                    max(first_local, plog.start_offset),
                    segs,
                )
            )
        return out

    @property
    def tier_last_error(self) -> str:
        """The object store's last error seen by a pass or a read ("" when none)."""
        if self.tier is None:
            return ""
        return self._tier_last_error or self.tier.stats.last_error

    def tier_description(self) -> dict[str, str]:
        """Where the objects are, for readers that go to the store themselves (Spark)."""
        return {} if self.tier is None else self.tier.storage.describe()

    async def run_tier_pass(self, *, sweep: bool = False) -> dict[str, Any]:
        """One pass: offload every partition by its policy, delete the objects retention
        let go of, and (``sweep``) remove orphans. Raises TierUnavailableError at the
        first call the store does not answer."""
        tier = self.tier
        if tier is None:
            return {}
        copied = 0
        for cfg in list(self._topics.values()):
            if cfg.kind != PERSISTENT:
                continue  # nothing stored, nothing to offload
            policy = self.offload_policy(cfg)
            if not policy.enabled and not any(
                self._actors[(cfg.name, p)].log.remote for p in range(cfg.partitions)
            ):
                continue
            for p in range(cfg.partitions):
                if (cfg.name, p) not in self._actors:
                    continue
                try:
                    copied += await self.offload_partition(cfg, p, policy)
                except TierUnavailableError:
                    raise
                except Exception:  # one partition's trouble must not stop the pass
                    log.exception(
                        "offload failed", extra={"topic": short_topic(cfg.name), "partition": p}
                    )
        deleted = await asyncio.to_thread(tier.expire)
        orphans = 0
        if sweep:
            orphans = await asyncio.to_thread(tier.sweep)
            orphans += await asyncio.to_thread(tier.collect_payloads)
        return {"copied": copied, "deleted": deleted, "orphans": orphans}

    async def _tier_loop(self) -> None:
        """Run tier passes every ``tier_interval_s``; back off (doubling, up to 5 min)
        while the object store is unreachable. The sweeper runs every tenth pass."""
        self._tier_backoff_s = 0.0
        for n in itertools.count():
            await asyncio.sleep(self.config.tier_interval_s + self._tier_backoff_s)
            if self._closed:
                return
            t0 = time.monotonic()
            try:
                await self.run_tier_pass(sweep=n % 10 == 0)
                self._tier_backoff_s = 0.0
                self._tier_last_error = ""
            except TierUnavailableError as exc:
                self._tier_backoff_s = min(
                    MAX_BACKOFF_S, max(1.0, self._tier_backoff_s * 2 or self.config.tier_interval_s)
                )
                self._tier_last_error = str(exc)
                log.warning(
                    "tier pass: object store unreachable, retrying later",
                    extra={"error": str(exc), "backoff_s": self._tier_backoff_s},
                )
            except Exception:
                log.exception("tier pass failed")
            log.debug("tier pass", extra={"seconds": time.monotonic() - t0})
