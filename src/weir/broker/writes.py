"""The broker's write path (a mixin of `Broker`): codec and backlog-quota checks
(`weir.broker.backlog_quota`), then the partition actor's queue and group commit."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from weir.broker.backlog_quota import BacklogQuotas
from weir.broker.topics import PERSISTENT, short_topic
from weir.errors import BadRequestError, TopicTerminatedError
from weir.storage.codecs import Codec, codec_name
from weir.storage.incoming import IncomingBatch
from weir.storage.partition import BatchResult
from weir.storage.tiered.manager import TierManager
from weir.storage.tiered.payloads import cut_payloads


class Writes(BacklogQuotas):
    """Validated batches into a partition, refused while its backlog is over quota."""

    async def write(
        self,
        topic: str,
        partition: int,
        batches: Sequence[IncomingBatch],
        nbytes: int | None = None,
    ) -> list[BatchResult]:
        """Store validated batches durably in one partition; per-batch results in order."""
        return await self.submit(topic, partition, batches, nbytes)

    def submit(
        self,
        topic: str,
        partition: int,
        batches: Sequence[IncomingBatch],
        nbytes: int | None = None,
        txn: int = 0,
        on_done: Callable[[], None] | None = None,
    ) -> asyncio.Future[list[BatchResult]]:
        """Queue a write now (calls are committed in call order); the future resolves when
        durable. ``txn``: the open transaction it belongs to (admitted by the caller, see
        `weir.broker.transactions.facade`). ``on_done``: see `PartitionActor.submit` (not
        called for a topic of another kind than persistent: its future is done at once)."""
        self._check_open()
        cfg = self.topic(topic)
        if cfg.terminated:
            raise TopicTerminatedError(
                f"topic {short_topic(cfg.name)!r} is terminated: it takes no more messages"
            )
        if cfg.kind != PERSISTENT:  # handed to the consumers connected now, acknowledged
            fut: asyncio.Future[list[BatchResult]] = asyncio.get_running_loop().create_future()
            fut.set_result(self.live_partition(cfg.name, partition).publish(batches))
            return fut
        actor = self.actor(topic, partition)
        if cfg.codecs:
            for b in batches:
                codec = b.header.data_codec if b.header.data_codec != Codec.RAW else b.header.codec
                if codec not in cfg.codecs and codec != Codec.RAW:
                    raise BadRequestError(
                        f"topic {short_topic(cfg.name)!r} accepts codecs "
                        f"{[codec_name(c) for c in cfg.codecs]}, not {codec_name(codec)}"
                    )
        quota = self._backlog_quota.get(cfg.name)
        if quota is not None:
            self._check_backlog(cfg, partition, quota)
        size = sum(len(b.buf) for b in batches) if nbytes is None else nbytes
        tier = self.store.tier
        if tier is not None:  # the policies matter here only on a server with a tier
            threshold = self.topic_policies(cfg)["large_payload_threshold_bytes"]
            if threshold is not None and any(len(b.buf) > threshold for b in batches):
                ready = asyncio.get_running_loop().create_task(
                    asyncio.to_thread(
                        self._cut_payloads, tier, actor.log.log_id, batches, threshold
                    )
                )
                return actor.submit(batches, size, ready, txn, on_done)
        return actor.submit(batches, size, txn=txn, on_done=on_done)

    @staticmethod
    def _cut_payloads(
        tier: TierManager, log_id: int, batches: Sequence[IncomingBatch], threshold: int
    ) -> Sequence[IncomingBatch]:
        """Each record above ``threshold`` stored as its own object (written and verified
        before the batch is queued for commit), its data emptied in the batch."""
        return [cut_payloads(b, threshold, lambda d: tier.put_payload(log_id, d)) for b in batches]
