"""Durable subscriptions over offloaded blobs (a real broker, real LMDB, the real local
tier back end): dispatch reads with the partition actor's ``read_async``, so a Shared
subscription gets every offloaded message, in order and intact, and the object fetch
runs off the event loop while other clients are served."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.storage.conftest import make_batch
from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.broker.subscriptions import Delivery
from weir.errors import WeirError
from weir.storage.batch import decode_records, iter_batches
from weir.storage.tiered.remote_storage import LocalDirStorage

BATCHES = 6
PER_BATCH = 40
SIZE = 1000  # 40 KB batches: each sealed as a blob of its own with the small head of config()


class Gate:
    """Holds the local back end's object GETs while closed (the fetch in progress)."""

    def __init__(self) -> None:
        self.armed = False
        self.open = threading.Event()
        self.entered = threading.Event()
        self.gets = 0
        self.timed_out = False

    def wait(self) -> None:
        self.gets += 1
        if not self.armed:
            return
        self.armed = False  # one GET held: the first fetch
        self.entered.set()
        # bounded: with a fetch on the event loop nobody could open the gate
        if not self.open.wait(30):
            self.timed_out = True


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    g = Gate()
    real = LocalDirStorage.get

    def gated(self: LocalDirStorage, key: str, start: int = 0, end: int | None = None) -> bytes:
        g.wait()
        return real(self, key, start, end)

    monkeypatch.setattr(LocalDirStorage, "get", gated)
    yield g
    g.open.set()


class Inbox:
    """The consumer's side of a delivery: (offset, data) of every message, in order."""

    def __init__(self) -> None:
        self.got: list[tuple[int, bytes]] = []
        self.event = asyncio.Event()

    def deliver(self, d: Delivery) -> None:
        want = set(d.offsets)
        for chunk in d.chunks:
            for pos, _ in iter_batches(chunk, verify=False):
                self.got += [
                    (r.offset, r.data) for r in decode_records(chunk, pos) if r.offset in want
                ]
        self.event.set()

    def close(self, err: WeirError) -> None:
        pass

    async def wait(self, n: int) -> list[tuple[int, bytes]]:
        async with asyncio.timeout(30):
            while len(self.got) < n:
                self.event.clear()
                await self.event.wait()
        return self.got


def config(path: Path) -> BrokerConfig:
    """A head of 64 KB (sealed pieces from 28 KB on), so every batch written is a blob."""
    return BrokerConfig(
        data_dir=path, retention_interval_s=3600, low_watermark=1 << 16, max_blob_size=1 << 18
    )


async def offloaded_broker(path: Path) -> tuple[Broker, list[bytes]]:
    """A broker whose topic "t" holds BATCHES blobs, all but the head offloaded and
    dropped locally; returns it and every message's data by offset."""
    b = await Broker.open(config(path))
    await b.create_topic("t", partitions=1)
    for i in range(BATCHES):
        await b.write(
            "t", 0, make_batch(PER_BATCH, producer="p", first_seq=1 + i * PER_BATCH, size=SIZE)
        )
    assert (await b.offload_topic("t", force=True))[0] >= 2
    data = [bytes(r.data) for r in await read_all(b)]
    assert len(data) == BATCHES * PER_BATCH
    return b, data


async def read_all(b: Broker) -> list[Any]:
    actor = b.actor("t", 0)
    out: list[Any] = []
    pos = 0
    while pos < actor.end_offset:
        res = await actor.read_async(pos, 1 << 30)
        for chunk in res.chunks:
            for p, _ in iter_batches(chunk):
                out += decode_records(chunk, p)
        pos = res.next_offset
    return out


@pytest.mark.parametrize("type", ["shared", "key_shared"])
async def test_subscription_gets_offloaded_messages_in_order(
    tmp_path: Path, gate: Gate, type: str
) -> None:
    b, data = await offloaded_broker(tmp_path / "d")
    try:
        # restart: nothing of the tier's cache survives, every blob is fetched again
        await b.close()
        b = await Broker.open(config(tmp_path / "d"))
        assert b.tier_status("t")[0].remote_bytes > 0
        gets = gate.gets
        inbox = Inbox()
        s, c = await b.subscribe("t", "s", type, "earliest", inbox)
        s.flow(c.consumer_id, 7)  # small grants: many dispatch reads, some inside a blob
        n = len(data)
        while len(inbox.got) < n:
            before = len(inbox.got)
            await inbox.wait(min(n, before + 1))
            s.flow(c.consumer_id, len(inbox.got) - before)
        assert [o for o, _ in inbox.got] == list(range(n))
        assert [d for _, d in inbox.got] == data
        assert gate.gets > gets, "nothing was fetched from the tier"
    finally:
        await b.close()


async def test_other_clients_are_served_while_dispatch_fetches_an_object(
    tmp_path: Path, gate: Gate
) -> None:
    b, data = await offloaded_broker(tmp_path / "d")
    try:
        await b.close()
        b = await Broker.open(config(tmp_path / "d"))
        await b.create_topic("other", partitions=1)
        gate.armed = True
        inbox = Inbox()
        s, c = await b.subscribe("t", "s", "shared", "earliest", inbox)
        s.flow(c.consumer_id, len(data))
        # the pump's fetch of the first offloaded blob is held in the back end...
        assert await asyncio.to_thread(gate.entered.wait, 30)
        # ...and meanwhile another client writes and reads on the same event loop
        await b.write("other", 0, make_batch(3, producer="o"))
        res = await b.actor("other", 0).read_async(0, 1 << 20)
        assert res.next_offset == 3 and not inbox.got
        gate.open.set()
        got = await inbox.wait(len(data))
        assert not gate.timed_out, "the event loop was stalled by the object fetch"
        assert [d for _, d in got] == data
    finally:
        gate.open.set()
        await b.close()
