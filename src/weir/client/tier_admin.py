"""Tiered-storage calls: offload a topic now, and where each partition's data is. The
asyncio ones and their sync twins (same names), mixed into `weir.aio.Client` and
`weir.Client`. See docs/tiered-storage.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from weir.protocols.native import weir_pb2 as pb

if TYPE_CHECKING:
    from weir.client.aio import Client as AioClient
    from weir.client.connection import Connection


@dataclass(frozen=True, slots=True)
class TierSegment:
    """One offloaded blob: offsets ``[first_offset, end_offset)`` in one object."""

    first_offset: int
    end_offset: int
    object_key: str
    object_size: int
    object_crc: int  # CRC32C of the whole object
    # holds transaction markers or aborted messages: read it through the broker
    transactional: bool = False
    # the offsets the whole object holds (more than the segment's when it packs several
    # blobs); -1: the segment's own
    object_first_offset: int = -1
    object_end_offset: int = -1

    @property
    def object_offsets(self) -> tuple[int, int]:
        """``[first, end)`` of every offset the object holds."""
        if self.object_end_offset <= self.object_first_offset:
            return self.first_offset, self.end_offset
        return self.object_first_offset, self.object_end_offset


@dataclass(frozen=True, slots=True)
class PartitionTier:
    partition: int
    start_offset: int
    end_offset: int
    local_bytes: int
    remote_bytes: int
    first_local_offset: int  # offsets below it are only in the object store
    segments: list[TierSegment]


@dataclass(frozen=True, slots=True)
class TierStatus:
    partitions: list[PartitionTier]
    store: dict[str, str]  # backend and where: endpoint, bucket, prefix, region, or path
    last_error: str


def tier_status(r: pb.TierStatusResponse) -> TierStatus:
    return TierStatus(
        [
            PartitionTier(
                p.partition,
                p.start_offset,
                p.end_offset,
                p.local_bytes,
                p.remote_bytes,
                p.first_local_offset,
                [
                    TierSegment(
                        s.first_offset,
                        s.end_offset,
                        s.object_key,
                        s.object_size,
                        s.object_crc,
                        s.transactional,
                        s.object_first_offset,
                        s.object_end_offset,
                    )
                    for s in p.segments
                ],
            )
            for p in r.partitions
        ],
        dict(r.store),
        r.last_error,
    )


class AsyncTierCalls:
    if TYPE_CHECKING:

        @property
        def conn(self) -> Connection: ...

    async def offload_topic(
        self, topic: str, *, force: bool = False, timeout: float | None = 600.0
    ) -> list[int]:
        """Offload now, by the topic's policy (or, ``force``, every sealed blob); returns
        the blobs copied per partition."""
        req = pb.OffloadTopicRequest(topic=topic, force=force)
        return list((await self.conn.call("OffloadTopic", req, timeout)).copied)

    async def tier_status(self, topic: str, *, timeout: float | None = 30.0) -> TierStatus:
        req = pb.TierStatusRequest(topic=topic)
        return tier_status(await self.conn.call("TierStatus", req, timeout))


class SyncTierCalls:
    """The blocking twins of `AsyncTierCalls`."""

    if TYPE_CHECKING:
        _aio: AioClient

        def _run(self, coro: Any, timeout: float | None = None) -> Any: ...

    def offload_topic(
        self, topic: str, *, force: bool = False, timeout: float | None = 600.0
    ) -> list[int]:
        return self._run(self._aio.offload_topic(topic, force=force, timeout=timeout))  # type: ignore[no-any-return]

    def tier_status(self, topic: str, *, timeout: float | None = 30.0) -> TierStatus:
        return self._run(self._aio.tier_status(topic, timeout=timeout))  # type: ignore[no-any-return]
