"""Numeric producer ids for idempotent producers (Kafka's InitProducerId), unique across
restarts.

Ids are handed out from blocks: the end of the current block is stored (one commit per
``BLOCK`` ids) before any id of it is given, so an id given before a crash is never given
again after it (at worst the rest of a block is skipped).
"""

from __future__ import annotations

import asyncio
import struct
from typing import Protocol

from weir.storage.committer import GroupCommitter
from weir.storage.kv import KV, put

BLOCK = 1000
_KEY = b"producer_id_block_end"
_U64 = struct.Struct("<Q")


class IdAllocator(Protocol):
    """What hands producer ids out: `ProducerIds` (LMDB) or, in a cluster,
    `weir.broker.cluster.producer_registry.ClusterProducerIds` (ZooKeeper)."""

    async def allocate(self) -> int: ...


class ProducerIds:
    """Allocates producer ids; `allocate` is safe to call concurrently."""

    def __init__(self, kv: KV, committer: GroupCommitter, table: str) -> None:
        self._committer = committer
        self._table = table
        raw = kv.get(table, _KEY)
        self._next = _U64.unpack(bytes(raw))[0] if raw else 0
        self._end = self._next  # nothing of a block is handed out until it is stored
        self._lock = asyncio.Lock()

    async def allocate(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                end = self._next + BLOCK
                op = put(self._table, _KEY, _U64.pack(end))
                await asyncio.wrap_future(self._committer.submit([op], 16))
                self._end = end
            pid = self._next
            self._next += 1
            return pid
