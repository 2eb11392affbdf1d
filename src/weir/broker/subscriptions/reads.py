"""Reads of a subscription's dispatch and letters: always the partition actor's
``read_async``, so an offloaded blob (tiered storage) or a large payload is fetched off
the event loop while every other client is served.

``read_async`` stops at an offloaded blob that is not fetched yet (after the first
one); `read_span` reads on from there, for callers that need every batch of a range.
"""

from __future__ import annotations

from weir.broker.partition_actor import PartitionActor
from weir.storage.change import ReadResult


async def read_span(actor: PartitionActor, first: int, stop: int) -> ReadResult:
    """Every stored batch from the one holding ``first`` up to ``stop`` (or EndOffset)."""
    res = await actor.read_async(first, 1 << 62, stop)
    while res.next_offset < min(stop, actor.end_offset):
        more = await actor.read_async(res.next_offset, 1 << 62, stop)
        if more.next_offset <= res.next_offset:
            break
        res.chunks.extend(more.chunks)
        res.next_offset = more.next_offset
    return res
