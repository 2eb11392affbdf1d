"""One Pulsar producer on a connection: its Sends become broker writes, its receipts go back in order.

Sends are queued on the partition actor as they are read (`Broker.submit`, which
keeps call order), so a producer's messages are stored in the order it sent them;
one task per producer waits for each write in turn and answers SendReceipt (or
SendError, after which the client reconnects and resends: dedup drops what was
stored already).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from weir.broker.access import Claim
from weir.broker.broker import Broker
from weir.broker.partition_actor import write_failed
from weir.broker.producers import WriterToken
from weir.broker.tenancy.limits import Lease
from weir.errors import BadRequestError, MessageTooLargeError, UnavailableError, WeirError
from weir.protocols.pulsar import pulsar_api_pb2 as pb
from weir.protocols.pulsar.errors import as_weir_error, server_error
from weir.protocols.pulsar.message_ids import LEDGER
from weir.protocols.pulsar.records import send_to_batch
from weir.storage.batch import parse_header
from weir.storage.incoming import IncomingBatch
from weir.storage.partition import BatchResult

log = logging.getLogger("weir.pulsar")

Send = Callable[[pb.BaseCommand], None]


@dataclass(slots=True)
class _Pending:
    future: asyncio.Future[list[BatchResult]] | None  # None: refused before the broker
    sequence_id: int
    highest: int
    error: WeirError | None = None
    # the Send's message can never be stored (it does not decode, or is over the limit):
    # answered with ChecksumError, the one SendError after which a Pulsar client drops
    # the message and fails its send; after any other it reconnects and resends it, for
    # ever when it can never succeed
    undecodable: bool = False


@dataclass(eq=False)
class PulsarProducer:
    producer_id: int  # the client's id on this connection
    name: str
    topic: str  # weir name
    partition: int
    id_partition: int  # the partition as message ids say it (-1: non-partitioned)
    broker: Broker
    send: Send
    message_limit: int
    claim: Claim | None = None
    lease: Lease | None = None
    token: WriterToken | None = None
    schema_version: int | None = None
    checks: list[tuple[object, str, str]] = field(default_factory=list)  # asked again on changes
    pending: deque[_Pending] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    closed: bool = False
    on_closed: Callable[[PulsarProducer], None] | None = None
    # the first of this producer's writes that failed or was refused (but for a message
    # that can never be stored): every later Send is refused with it (the client
    # reconnects and resends from there), see `_failed_write`
    failed: WeirError | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._receipts())

    def handle_send(self, send: pb.CommandSend, metadata: pb.MessageMetadata, payload: Any) -> None:
        """Queue one Send's write now (never awaits: order is the order of the frames)."""
        highest = send.highest_sequence_id or metadata.highest_sequence_id or send.sequence_id
        item = _Pending(None, send.sequence_id, highest)
        try:
            if self.closed:
                raise UnavailableError(f"producer {self.name!r} is closed")
            failed = self._failed_write()
            if failed is not None:
                raise failed
            sent = send_to_batch(
                metadata,
                payload,
                self.name,
                is_chunk=send.is_chunk,
                max_bytes=self.message_limit + (1 << 16),
            )
            if len(sent.batch) > self.message_limit + (64 << 10) * sent.count + (1 << 16):
                raise MessageTooLargeError(
                    f"a message of this Send exceeds the limit of {self.message_limit} bytes"
                )
            inc = IncomingBatch(sent.batch, parse_header(sent.batch))
            item.future = self.broker.submit(self.topic, self.partition, [inc], len(sent.batch))
        except Exception as err:
            item.error = as_weir_error(err)
            item.undecodable = isinstance(item.error, BadRequestError)
            if not item.undecodable and self.failed is None:
                # refused by the partition (overloaded, over a quota, closing): the client
                # resends it, so nothing after it may be stored either (`_failed_write`)
                self.failed = item.error
        self.pending.append(item)
        self.wake.set()

    def _failed_write(self) -> WeirError | None:
        """The error of a write of this producer that failed, if one did, the receipts task
        heard of it or not: the newest pending write tells (`write_failed`)."""
        if self.failed is None:
            newest = next((i.future for i in reversed(self.pending) if i.future is not None), None)
            if newest is not None and write_failed(newest) and not newest.cancelled():
                self.failed = as_weir_error(newest.exception())  # type: ignore[arg-type]
        return self.failed

    async def _receipts(self) -> None:
        try:
            while True:
                while not self.pending:
                    if self.closed:
                        return
                    self.wake.clear()
                    await self.wake.wait()
                item = self.pending[0]
                err = item.error
                result: BatchResult | None = None
                if err is None and item.future is not None:
                    try:
                        # shielded: a write in flight completes even when this task is stopped
                        results = await asyncio.shield(item.future)
                        result = results[0]
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:
                        err = as_weir_error(exc)
                        if self.failed is None:
                            self.failed = err
                self.pending.popleft()
                if err is not None:
                    self.send(
                        pb.BaseCommand(
                            type=pb.BaseCommand.SEND_ERROR,
                            send_error=pb.CommandSendError(
                                producer_id=self.producer_id,
                                sequence_id=item.sequence_id,
                                error=pb.ChecksumError if item.undecodable else server_error(err),
                                message=err.message,
                            ),
                        )
                    )
                    continue
                assert result is not None
                if result.skipped:
                    # Pulsar's duplicate id (-1, -1). Also when only the first messages of
                    # the Send were stored before (a client that batched its resends
                    # anew): the rest is stored, but the client names message i of the
                    # Send entry + i, and where the earlier ones are is not known here
                    mid = pb.MessageIdData(ledgerId=(1 << 64) - 1, entryId=(1 << 64) - 1)
                else:
                    mid = pb.MessageIdData(
                        ledgerId=LEDGER, entryId=result.offset, partition=self.id_partition
                    )
                self.send(
                    pb.BaseCommand(
                        type=pb.BaseCommand.SEND_RECEIPT,
                        send_receipt=pb.CommandSendReceipt(
                            producer_id=self.producer_id,
                            sequence_id=item.sequence_id,
                            message_id=mid,
                            highest_sequence_id=item.highest,
                        ),
                    )
                )
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pulsar producer receipts failed", extra={"producer": self.name})

    async def drain(self, timeout: float = 10.0) -> None:
        """Wait until every queued Send is answered."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self.pending:
                    await asyncio.sleep(0.005)

    def release(self) -> None:
        """Give up the producer's claims on the broker (its queued writes still complete)."""
        self.closed = True
        self.wake.set()
        if self.token is not None:
            self.broker.unregister_writer(self.token)
            self.token = None
        if self.claim is not None:
            self.broker.close_producer(self.claim)
            self.claim = None
        if self.lease is not None:
            self.lease.release()
            self.lease = None
        if self.on_closed is not None:
            self.on_closed(self)

    async def stop(self) -> None:
        self.release()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
