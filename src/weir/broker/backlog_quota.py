"""Backlog quotas (a mixin of `Broker`): how much a partition may hold that its
important consumers and durable subscriptions have not yet acknowledged, and what
happens past it (the namespace or topic policies ``backlog_quota_bytes`` and
``backlog_quota_policy``, named as Pulsar names them):

- ``producer_exception`` (the default) and ``producer_request_hold``: writes are refused
  with `BacklogQuotaExceededError`, retryable; weir's writers hold (retry with backoff
  within their delivery timeout), so for them the two are the same;
- ``consumer_backlog_eviction``: the write goes through and the oldest messages are
  dropped for the slowest readers: every subscription cursor and important consumer's
  committed offset below the point that leaves the quota is moved up to it.

The backlog starts at the lowest of those positions (past the message TTL, nobody's);
it is counted in whole stored blobs from there, as retention removes them.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from weir.broker.retention import Retention
from weir.broker.topics import TopicConfig, short_topic
from weir.errors import BacklogQuotaExceededError

log = logging.getLogger("weir.broker")


class BacklogQuotaPolicy(enum.Enum):
    PRODUCER_REQUEST_HOLD = "producer_request_hold"
    PRODUCER_EXCEPTION = "producer_exception"
    CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"


@dataclass(frozen=True, slots=True)
class BacklogQuota:
    limit_bytes: int
    policy: BacklogQuotaPolicy = BacklogQuotaPolicy.PRODUCER_EXCEPTION


def backlog_quota(policies: Mapping[str, Any]) -> BacklogQuota | None:
    """The quota a topic's effective policies set (None: none)."""
    limit = policies["backlog_quota_bytes"]
    if limit is None:
        return None
    return BacklogQuota(limit, BacklogQuotaPolicy(policies["backlog_quota_policy"]))


class BacklogQuotas(Retention):
    """The backlog-quota check every write makes when its topic has a quota."""

    def backlog_start(self, cfg: TopicConfig, partition: int) -> int | None:
        """The oldest offset of ``partition`` some important consumer or durable subscription
        still needs (None: nobody holds anything back)."""
        start = self.subscriptions.protect_from(cfg, partition)
        if start is None:
            return None
        ttl = self.ttl_offset(cfg.name, partition)
        return max(start, ttl or 0)

    def _check_backlog(self, cfg: TopicConfig, partition: int, quota: BacklogQuota) -> None:
        """Refuse a write, or evict, while the partition's backlog is over the quota."""
        start = self.backlog_start(cfg, partition)
        if start is None:
            return  # nobody holds data back: retention bounds what is stored
        actor = self._actors[(cfg.name, partition)]
        # what waits for commit counts too: a burst of requests must not slip past
        limit = quota.limit_bytes
        backlog = actor.queued_bytes + actor.log.bytes_from(start, limit)
        if backlog <= limit:
            return
        if quota.policy is BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION:
            self._evict(
                cfg, partition, actor.log.offset_keeping(max(0, limit - actor.queued_bytes))
            )
            return
        self.observer.on_refused(cfg.name, partition, "backlog_quota")
        raise BacklogQuotaExceededError(
            f"partition {short_topic(cfg.name)}/{partition} has {backlog} or more bytes its "
            f"important consumers and subscriptions have not acknowledged, over its backlog "
            f"quota of {limit} bytes (backlog_quota_bytes); writes resume as they catch up"
        )

    def _evict(self, cfg: TopicConfig, partition: int, offset: int) -> None:
        """Move the cursors (important consumers' offsets too) below ``offset`` up to it."""
        if self.subscriptions.evict(cfg, partition, offset):
            log.info(
                "backlog quota: oldest messages dropped for the slowest readers",
                extra={"topic": short_topic(cfg.name), "partition": partition, "offset": offset},
            )
