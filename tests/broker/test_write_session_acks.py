"""The native write session's acks against a real broker: acks sent in the partition
actor's turn (the native TCP port's `write_nowait`) never follow the session's end.

The connection is a recorder of the frames the session writes, in order: the native TCP
port's `FrameResponses` with the socket taken out (tests/reliability/test_native_tcp_hostile.py
covers the real port)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.storage.conftest import hold, make_batch, queued
from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.write_session import WriteSession


class Frames:
    """The kinds of the frames a session wrote to its connection, in order."""

    def __init__(self) -> None:
        self.kinds: list[str] = []

    async def write(self, message: Any) -> None:
        self.kinds.append(message.WhichOneof("kind"))

    def write_nowait(self, message: Any) -> bool:
        self.kinds.append(message.WhichOneof("kind"))
        return True


async def _requests(topic: str, bufs: list[bytes], more: asyncio.Event) -> AsyncIterator[Any]:
    yield pb.WriteRequest(init=pb.WriteInit(topic=topic, producer_id="p"))
    for buf in bufs:
        yield pb.WriteRequest(batches=pb.WriteBatches(batches=[buf]))
    await more.wait()  # the client keeps the stream open


async def test_a_write_committing_when_its_session_ends_is_not_acked_after_the_error(
    tmp_path: Path,
) -> None:
    """A session cancelled (a revoked grant, a stop past its grace) while its write commits:
    the connection gets the error next, and the ack of that write must not follow it (the
    error is a stream's last frame, docs/native-protocol.md)."""
    b = await Broker.open(BrokerConfig(data_dir=tmp_path, retention_interval_s=3600))
    gate: threading.Event | None = None
    try:
        await b.create_topic("t", partitions=1)
        frames, more = Frames(), asyncio.Event()
        committer = b.store.committer
        gate = hold(committer)  # the write below waits in the committer
        session = WriteSession(b, frames)
        bufs = [bytes(x.buf) for x in make_batch(3, producer="p")]
        run = asyncio.create_task(session.run(_requests("t", bufs, more)))
        await queued(committer, 1)
        run.cancel()  # as the TCP port does when a grant is revoked
        await asyncio.gather(run, return_exceptions=True)
        frames.kinds.append("error")  # what the port writes next
        gate.set()
        await b.actor("t", 0).wait_for_data(0, timeout=30)  # committed and applied
        await asyncio.sleep(0.05)  # any callback of that commit has run
        assert frames.kinds == ["init", "error"]
        assert b.actor("t", 0).end_offset == 3  # stored all the same: the client resends
    finally:
        if gate is not None:
            gate.set()
        await b.close()


async def test_acks_go_out_in_the_actors_turn_in_write_order(tmp_path: Path) -> None:
    """Several writes of one session committed in one cycle: one ack each, in order, then
    the end of the stream."""
    b = await Broker.open(BrokerConfig(data_dir=tmp_path, retention_interval_s=3600))
    try:
        await b.create_topic("t", partitions=1)
        frames, more = Frames(), asyncio.Event()
        gate = hold(b.store.committer)
        bufs = [
            bytes(x.buf) for i in range(5) for x in make_batch(2, producer="p", first_seq=1 + 2 * i)
        ]
        session = WriteSession(b, frames)
        run = asyncio.create_task(session.run(_requests("t", bufs, more)))
        await queued(b.store.committer, 1)
        gate.set()
        deadline = time.monotonic() + 30
        while frames.kinds.count("ack") < 5:
            assert time.monotonic() < deadline, frames.kinds
            await asyncio.sleep(0.001)
        more.set()  # the client half-closes
        await asyncio.wait_for(run, 30)
        assert frames.kinds == ["init"] + ["ack"] * 5
        assert b.actor("t", 0).end_offset == 10
    finally:
        await b.close()


async def test_a_request_read_after_a_failed_write_is_not_stored(tmp_path: Path) -> None:
    """A write whose commit fails (the LMDB map is full) ends its session. A request the
    session reads after the actor failed that write, but before its ack task has heard of
    it, must not be stored: it would land after a gap in the producer's seq_nos, and the
    client's resend of the failed write would then be "skipped" as a duplicate and never
    stored (tests/reliability/test_disk.py saw that loss once under load)."""
    b = await Broker.open(
        BrokerConfig(data_dir=tmp_path, retention_interval_s=3600, map_size=1 << 20)
    )
    try:
        await b.create_topic("t", partitions=1)
        frames = Frames()
        session = WriteSession(b, frames)
        too_big = make_batch(1, producer="p", size=2 << 20)[0].buf  # past the 1 MiB map
        fits = make_batch(1, producer="p", first_seq=2)[0].buf

        async def requests() -> AsyncIterator[Any]:
            yield pb.WriteRequest(init=pb.WriteInit(topic="t", producer_id="p"))
            yield pb.WriteRequest(batches=pb.WriteBatches(batches=[bytes(too_big)]))
            # the next request arrives in the turn after the actor failed the first write
            while not (session._pending and session._pending[-1][0].done()):
                await asyncio.sleep(0)
            yield pb.WriteRequest(batches=pb.WriteBatches(batches=[bytes(fits)]))
            await asyncio.Event().wait()  # the client keeps the stream open

        await asyncio.wait_for(session.run(requests()), 30)
        assert frames.kinds == ["init", "error"]
        await asyncio.sleep(0.05)  # a write wrongly submitted would have committed by now
        assert b.actor("t", 0).end_offset == 0  # neither write is stored
        assert b.last_seq_no("t", 0, "p") is None  # the client's resend starts over at 1
    finally:
        await b.close()
