"""Numeric producer ids (Kafka's InitProducerId): unique, concurrently and across restarts."""

from __future__ import annotations

import asyncio
from pathlib import Path

from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.broker.producer_ids import BLOCK


async def _open(path: Path) -> Broker:
    return await Broker.open(BrokerConfig(data_dir=path, retention_interval_s=3600))


async def test_ids_are_never_handed_out_twice_across_restarts(tmp_path: Path) -> None:
    seen: set[int] = set()
    for _ in range(3):
        broker = await _open(tmp_path)
        try:
            ids = await asyncio.gather(*(broker.allocate_producer_id() for _ in range(50)))
        finally:
            await broker.close()
        assert len(set(ids)) == 50 and not seen & set(ids)
        assert min(ids) > max(seen, default=-1)  # a restart starts past the stored block
        seen |= set(ids)
    assert max(seen) < 3 * BLOCK  # one stored block per run, not one per id
