"""Topics of a test cluster: created and known to every broker, and read back through
any broker (the helpers the cluster test modules share)."""

from __future__ import annotations

import asyncio
import time

import weir
import weir.aio
from tests.cluster.claims import owner_of
from tests.conftest import ServerProcess
from tests.reliability.history import message_id
from weir.broker.cluster import ClusterRecords, partition_key
from weir.errors import WeirError


async def created(
    brokers: dict[str, ServerProcess],
    records: ClusterRecords,
    name: str,
    partitions: int = 1,
    consumers: tuple[str, ...] = (),
) -> str:
    """Create ``name`` and wait for the owner of each partition (partition 0's is
    returned); every broker knows the topic then."""
    async with weir.aio.Client(brokers["a"].endpoint) as admin:
        await admin.create_topic(name, partitions=partitions, consumers=consumers)
        owner = await owner_of(records, partition_key(name, 0))
        for p in range(1, partitions):
            await owner_of(records, partition_key(name, p))
    await known_everywhere(brokers, name)
    return owner


async def known_everywhere(brokers: dict[str, ServerProcess], name: str) -> None:
    """Until every broker describes ``name`` (the catalog watch reaches each in turn)."""
    for srv in brokers.values():
        async with weir.aio.Client(srv.endpoint) as c:
            deadline = time.monotonic() + 30
            while True:
                try:
                    await c.describe_topic(name, timeout=10)
                    break
                except WeirError:  # unknown there yet, or the broker still starting
                    assert time.monotonic() < deadline, f"{srv.endpoint} never saw {name}"
                    await asyncio.sleep(0.1)


async def read_all(
    endpoint: str | list[str], topic: str, n: int, timeout: float = 60
) -> list[tuple[int, str]]:
    """(offset, message id) of the first ``n`` messages of ``topic``, read through ``endpoint``."""
    out: list[tuple[int, str]] = []
    async with weir.aio.Client(endpoint) as client:
        reader = client.reader(topic, start="earliest")
        try:
            deadline = time.monotonic() + timeout
            while len(out) < n and time.monotonic() < deadline:
                msg = await reader.receive_message(timeout=1.0)
                if msg is not None:
                    out.append((msg.offset, message_id(msg.data)))
        finally:
            await reader.close()
    return out
