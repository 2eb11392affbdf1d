"""A Pulsar producer whose write fails stores nothing after it (against a real broker).

The partition actor fails a write, and every write queued behind it, in its own turn;
the producer's receipts task hears of it later. A Send read in between must not be
stored: it would land after a gap in the producer's sequence ids, and the client's resend
of the failed Send (a Pulsar client reconnects after a SendError and resends what is
pending) would be dropped as a duplicate, never stored."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.storage.conftest import hold, queued
from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.protocols.pulsar import pulsar_api_pb2 as pb
from weir.protocols.pulsar.producers import PulsarProducer


def _send(seq: int) -> tuple[pb.CommandSend, pb.MessageMetadata]:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1)
    return pb.CommandSend(producer_id=1, sequence_id=seq), meta


async def test_no_send_is_stored_after_a_failed_one(tmp_path: Path) -> None:
    b = await Broker.open(
        BrokerConfig(data_dir=tmp_path, retention_interval_s=3600, map_size=1 << 20)
    )
    try:
        await b.create_topic("t", partitions=1)
        answers: list[pb.BaseCommand] = []
        p = PulsarProducer(1, "p", b.topic("t").name, 0, -1, b, answers.append, 8 << 20)
        p.start()
        p.handle_send(*_send(1), memoryview(b"x" * (2 << 20)))  # past the 1 MiB map
        assert p.pending[-1].future is not None
        await asyncio.wait([p.pending[-1].future])  # failed, in the actor's turn
        p.handle_send(*_send(2), memoryview(b"fits"))  # read before the receipt went out
        await p.drain()
        p.handle_send(*_send(3), memoryview(b"fits too"))  # and after it
        await p.drain()
        kinds = [(c.type, c.send_error.sequence_id) for c in answers]
        assert kinds == [(pb.BaseCommand.SEND_ERROR, s) for s in (1, 2, 3)]
        assert b.actor("t", 0).end_offset == 0  # nothing stored after the failed Send
        p.release()
    finally:
        await b.close()


async def test_no_send_is_stored_after_a_refused_one(tmp_path: Path) -> None:
    """A Send the partition refuses at once (its queue is over its bound) is resent by the
    client after the SendError; a smaller Send behind it must not be stored first."""
    b = await Broker.open(
        BrokerConfig(
            data_dir=tmp_path, retention_interval_s=3600, max_partition_queue_bytes=64 << 10
        )
    )
    gate = None
    try:
        await b.create_topic("t", partitions=1)
        answers: list[pb.BaseCommand] = []
        p = PulsarProducer(1, "p", b.topic("t").name, 0, -1, b, answers.append, 8 << 20)
        p.start()
        gate = hold(b.store.committer)  # writes wait: the partition's queue fills
        p.handle_send(*_send(1), memoryview(b"first"))
        await queued(b.store.committer, 1)  # taken by the actor, committing
        p.handle_send(*_send(2), memoryview(b"y" * (50 << 10)))  # queued behind it
        p.handle_send(*_send(3), memoryview(b"z" * (50 << 10)))  # over the bound: refused
        p.handle_send(*_send(4), memoryview(b"small"))  # would fit
        gate.set()
        await p.drain()
        kinds = [(c.type, c.send_receipt.sequence_id or c.send_error.sequence_id) for c in answers]
        ok, err = pb.BaseCommand.SEND_RECEIPT, pb.BaseCommand.SEND_ERROR
        assert kinds == [(ok, 1), (ok, 2), (err, 3), (err, 4)]
        assert b.actor("t", 0).end_offset == 2
        p.release()
    finally:
        if gate is not None:
            gate.set()
        await b.close()
