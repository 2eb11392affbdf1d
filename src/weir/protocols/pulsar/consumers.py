"""Pulsar consumers on a connection: durable ones attached to a broker subscription, and
readers (non-durable subscriptions), which read a partition from a position of their own.

Every Message frame carries a whole stored batch, one Pulsar entry. Which of its messages
the consumer is to take depends on the front's ``batch_index_ack`` setting (Pulsar's
``acknowledgmentAtBatchIndexLevelEnabled``), because a Pulsar client without batch-index
acks only acknowledges an entry once it has acknowledged every message of it:

* off (the default): the broker hands a Pulsar consumer whole batches (``whole_batches``;
  Key_Shared routes a batch by its first message's key, as Pulsar does), and the frame
  carries no ack set: the client takes every message of the entry;
* on: the frame's ``ack_set`` marks the messages this consumer is given (the others are
  someone else's, or acknowledged already); the client skips the rest. Clients must
  enable batch-index acks too (``batch_index_ack_enabled=True``), as with Pulsar.

An acknowledgement covers the messages of the entry that this consumer was given. A
client hands back a permit for every message of a frame, skipped or not; the broker
charged only the ones given, so the difference is kept back from the next Flow.

A consumer of a non-persistent topic (``live``) is attached to a live subscription
(`weir.broker.non_persistent`), readers too: it gets single messages, so a frame of
part of an entry always carries an ack set; acknowledgements change nothing and
nothing of what it was given is remembered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from weir.broker.broker import Broker
from weir.broker.non_persistent import LiveSubscription
from weir.broker.subscriptions import AttachedConsumer, Delivery, Subscription
from weir.errors import BadRequestError, WeirError
from weir.protocols.pulsar import pulsar_api_pb2 as pb
from weir.protocols.pulsar.codec import frame_head, message_prefix
from weir.protocols.pulsar.message_ids import (
    EARLIEST,
    LATEST,
    LEDGER,
    is_whole_entry,
    offset_of,
)
from weir.protocols.pulsar.records import BATCHED, entry_of
from weir.storage.batch import BatchHeader, decode_payload, iter_batches, parse_header

log = logging.getLogger("weir.pulsar")

Write = Callable[[bytes], None]
MAX_READ_BYTES = 1 << 20
# A payload this big goes to the connection apart from its frame's head: a copy of it
# would cost more than a write of its own
SEPARATE_PAYLOAD = 32 << 10


class EntryCache:
    """Encoded entries (the message part of a Message frame, as its prefix and payload),
    shared by every consumer of the front: a batch delivered to several consumers or
    subscriptions is encoded once."""

    def __init__(self, max_bytes: int = 32 << 20) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, int, int, int, int], tuple[bytes, bytes]] = (
            OrderedDict()
        )
        self._bytes = 0

    def part(
        self, topic: str, partition: int, buf: Any, pos: int, h: BatchHeader | None = None
    ) -> tuple[bytes, bytes, int, int]:
        """(message prefix, payload, base offset, record count) of the stored batch at
        ``pos`` (its header ``h`` if parsed already); the message part is prefix + payload
        (`codec.message_prefix`)."""
        if h is None:
            h = parse_header(buf, pos)
        # the count too: a compacted view's batch may start where a stored one does, with
        # fewer of its records (and its write time)
        key = (topic, partition, h.base_offset, h.written_at, h.record_count)
        got = self._entries.get(key)
        if got is None:
            metadata, payload = entry_of(buf, pos, h)
            got = (message_prefix(metadata, payload), payload)
            size = len(got[0]) + len(payload)
            if size <= self.max_bytes // 4:
                self._entries[key] = got
                self._bytes += size
                while self._bytes > self.max_bytes:
                    _, (a, b) = self._entries.popitem(last=False)
                    self._bytes -= len(a) + len(b)
        else:
            self._entries.move_to_end(key)
        return got[0], got[1], h.base_offset, h.record_count


def _ranges(offsets: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted offsets as ``[start, end)`` runs."""
    if (
        isinstance(offsets, list)
        and offsets
        and offsets[-1] - offsets[0] == len(offsets) - 1
        and all(map(int.__lt__, offsets, offsets[1:]))
    ):  # the usual case, a whole entry given in order: one run, found in C
        return [(offsets[0], offsets[-1] + 1)]
    out: list[tuple[int, int]] = []
    for o in sorted(offsets):
        if out and out[-1][1] == o:
            out[-1] = (out[-1][0], o + 1)
        else:
            out.append((o, o + 1))
    return out


async def stored_batch(
    broker: Broker, topic: str, partition: int, offset: int
) -> tuple[int, int, bool] | None:
    """(base offset, record count, delivered as a batch) of the stored batch holding
    ``offset``; None when it is not stored (any more). Read through the actor's
    `read_async`: an offloaded or large batch is fetched off the event loop."""
    actor = broker.actor(topic, partition)
    if not actor.start_offset <= offset < actor.end_offset:
        return None
    res = await actor.read_async(offset, 1, offset + 1)
    if not res.chunks:
        return None
    for pos, h in iter_batches(res.chunks[0], verify=False):
        if h.base_offset <= offset < h.next_offset:
            batched = (
                h.record_count > 1
                or BATCHED in decode_payload(res.chunks[0], pos, h).header_list()[0]
            )
            return h.base_offset, h.record_count, batched
    return None


@dataclass(eq=False)
class ConsumerBase:
    consumer_id: int  # the client's id on this connection
    topic: str  # weir name
    partition: int
    id_partition: int  # partition as message ids say it (-1: non-partitioned topic)
    broker: Broker
    write: Write
    cache: EntryCache
    name: str = ""
    # entry base offset -> (record count, offsets of it this consumer was given)
    delivered: dict[int, tuple[int, list[int]]] = field(default_factory=dict)
    closed: bool = False
    on_dropped: Callable[[ConsumerBase], None] | None = None
    batch_index_ack: bool = False  # frames say which messages of an entry are given
    checks: list[tuple[object, str, str]] = field(default_factory=list)  # asked again on changes
    debt: int = 0  # permits the client will hand back for messages it was not charged
    live: bool = False  # of a non-persistent topic: nothing to acknowledge or redeliver
    # live: (entry, batch index) of the last message sent, what GetLastMessageId answers
    last_given: tuple[int, int] | None = None

    def _frames(
        self, chunks: Iterable[Any], wanted: list[int] | None, counts: dict[int, int]
    ) -> int:
        """Send the stored batches of ``chunks`` that hold a wanted offset (``wanted``
        ascending; None: all of them), each whole; returns how many messages went."""
        sent = 0
        for chunk in chunks:
            for pos, h in iter_batches(chunk, verify=False):
                base, end = h.base_offset, h.next_offset
                if wanted is None:
                    mine = list(range(base, end))
                else:
                    mine = wanted[bisect_left(wanted, base) : bisect_left(wanted, end)]
                    if not mine:
                        continue
                prefix, payload, base, count = self.cache.part(
                    self.topic, self.partition, chunk, pos, h
                )
                known = self.delivered.get(base)
                if self.live:  # nothing to acknowledge: only the last id is remembered
                    self.last_given = (base, max(mine) - base if count > 1 else -1)
                elif known is not None:  # another part of the entry is held here already
                    self.delivered[base] = (count, sorted(set(known[1]).union(mine)))
                else:
                    self.delivered[base] = (count, mine)
                msg = pb.CommandMessage(
                    consumer_id=self.consumer_id,
                    message_id=pb.MessageIdData(
                        ledgerId=LEDGER, entryId=base, partition=self.id_partition
                    ),
                    redelivery_count=max((counts.get(o, 0) for o in mine), default=0)
                    if counts
                    else 0,
                )
                if len(mine) < count:
                    self.debt += count - len(mine)
                    if self.batch_index_ack or self.live:
                        msg.ack_set.extend(ack_set(base, count, mine))
                cmd = pb.BaseCommand(type=pb.BaseCommand.MESSAGE, message=msg).SerializeToString()
                head = frame_head(cmd, len(prefix) + len(payload)) + prefix
                if len(payload) < SEPARATE_PAYLOAD:
                    self.write(head + payload)
                else:  # written as it is (cached, shared): not copied into a frame
                    self.write(head)
                    self.write(payload)
                sent += count
        return sent

    async def ack_ranges(self, mid: pb.MessageIdData) -> list[tuple[int, int]]:
        """What an individual acknowledgement of ``mid`` acknowledges: a whole entry, the
        messages of it this consumer was given; with an ack set (batch-index acks: bits
        still set are not acknowledged), exactly the messages whose bits are clear."""
        off = offset_of(mid)
        if off < 0:
            return []
        base = mid.entryId
        known = self.delivered.get(base)
        if known is None:
            found = await stored_batch(self.broker, self.topic, self.partition, base)
            if found is None:
                return []
            known = (found[1], list(range(found[0], found[0] + found[1])))
            base = found[0]
        count, mine = known
        if is_whole_entry(mid):
            self.delivered.pop(base, None)
            return _ranges(mine)
        if len(mid.ack_set):
            words = list(mid.ack_set)
            acked = [
                o
                for o in mine
                if not (words[(o - base) // 64] >> ((o - base) % 64)) & 1
                if (o - base) // 64 < len(words)
            ]
        else:  # one message of a batch, by its index
            acked = [o for o in mine if o == off]
        rest = [o for o in mine if o not in set(acked)]
        if rest:
            self.delivered[base] = (count, rest)
        else:
            self.delivered.pop(base, None)
        return _ranges(acked)

    async def last_of(self, mid: pb.MessageIdData) -> int | None:
        """The last offset a cumulative acknowledgement of ``mid`` covers: a whole entry, or
        with an ack set (batch-index acks) the messages before its first set bit."""
        off = offset_of(mid)
        if off < 0:
            return None
        if mid.batch_index >= 0:
            return off
        known = self.delivered.get(mid.entryId)
        if known is not None:
            base, count = mid.entryId, known[0]
        else:
            found = await stored_batch(self.broker, self.topic, self.partition, mid.entryId)
            if found is None:
                return None
            base, count = found[0], found[1]
        if len(mid.ack_set):
            first = first_set_bit(mid.ack_set, count)
            if first is not None:
                return base + first - 1 if base + first > 0 else None
        return base + count - 1

    async def settled(self) -> None:
        """Return once every acknowledgement received so far is durable."""

    def forget_through(self, last: int) -> None:
        for base in [b for b in self.delivered if b <= last]:
            del self.delivered[base]


@dataclass(eq=False)
class PulsarConsumer(ConsumerBase):
    """A durable subscription's consumer: the broker's `ConsumerHandle` for it."""

    sub: Subscription | LiveSubscription | None = None
    attached: AttachedConsumer | None = None
    send_command: Callable[[pb.BaseCommand], None] | None = None
    acks: set[asyncio.Task[None]] = field(default_factory=set)  # in flight, not yet durable
    # a reader's subscription of a non-persistent topic: it goes when its last consumer does
    ephemeral: bool = False

    async def settled(self) -> None:
        if self.acks:
            await asyncio.gather(*list(self.acks), return_exceptions=True)

    # ConsumerHandle ---------------------------------------------------------

    def deliver(self, d: Delivery) -> None:
        if self.closed:
            return
        counts = (
            dict(zip(d.offsets, d.redelivery_counts, strict=True))
            if any(d.redelivery_counts)
            else {}
        )
        self._frames(d.chunks, sorted(d.offsets), counts)

    def close(self, err: WeirError) -> None:
        """The broker dropped this consumer (a seek, the subscription deleted): the client
        hears CloseConsumer and subscribes again by itself."""
        if self.closed:
            return
        self.closed = True
        if self.send_command is not None:
            self.send_command(
                pb.BaseCommand(
                    type=pb.BaseCommand.CLOSE_CONSUMER,
                    close_consumer=pb.CommandCloseConsumer(
                        consumer_id=self.consumer_id, request_id=0
                    ),
                )
            )
        if self.on_dropped is not None:
            self.on_dropped(self)

    def active_changed(self, partition: int, active: bool) -> None:
        if self.send_command is not None and not self.closed:
            self.send_command(
                pb.BaseCommand(
                    type=pb.BaseCommand.ACTIVE_CONSUMER_CHANGE,
                    active_consumer_change=pb.CommandActiveConsumerChange(
                        consumer_id=self.consumer_id, is_active=active
                    ),
                )
            )

    # requests ---------------------------------------------------------------

    def flow(self, permits: int) -> None:
        paid = min(self.debt, permits)
        self.debt -= paid
        permits -= paid
        if permits and self.sub is not None and self.attached is not None:
            self.sub.flow(self.attached.consumer_id, permits)

    async def acknowledge(self, ack: pb.CommandAck) -> None:
        sub = self.sub
        if sub is None:
            raise BadRequestError("the consumer is not subscribed")
        if self.live:
            return  # a non-persistent subscription keeps no position
        if ack.ack_type == pb.CommandAck.Cumulative:
            for mid in ack.message_id:
                last = await self.last_of(mid)
                if last is None:
                    continue
                await sub.acknowledge_cumulative(self.partition, last)
                self.forget_through(last)
            return
        ranges = [
            (self.partition, a, b) for mid in ack.message_id for a, b in await self.ack_ranges(mid)
        ]
        if not ranges:
            return
        try:
            await sub.acknowledge(ranges)
        except BadRequestError:
            # an id this consumer was never given (from before a restart, a seek): ack what
            # can be acknowledged one range at a time; the rest is delivered again
            for r in ranges:
                with contextlib.suppress(BadRequestError):
                    await sub.acknowledge([r])

    def redeliver(self, ids: Iterable[pb.MessageIdData]) -> None:
        """Negative acknowledgements (by entry), or with no ids every message held here."""
        sub = self.sub
        if sub is None or self.live:
            return  # non-persistent: what was given is gone
        mids = list(ids)
        bases = [m.entryId for m in mids] if mids else list(self.delivered)
        ranges: list[tuple[int, int, int]] = []
        for base in bases:
            known = self.delivered.pop(base, None)
            if known is not None:
                ranges.extend((self.partition, a, b) for a, b in _ranges(known[1]))
        for r in ranges:
            with contextlib.suppress(BadRequestError):
                sub.negative_acknowledge([r], 0)

    def detach(self) -> None:
        self.closed = True
        if self.sub is not None and self.attached is not None:
            self.sub.detach(self.attached.consumer_id)
            if self.ephemeral and isinstance(self.sub, LiveSubscription):
                self.broker.drop_idle_live_subscription(self.topic, self.sub.name)


@dataclass(eq=False)
class PulsarReader(ConsumerBase):
    """A non-durable subscription (a Pulsar Reader): reads the partition from ``position``
    within its permits; nothing of it is stored, acknowledgements change nothing. With
    ``compacted`` (readCompacted) it reads the partition's compacted view, then the tail."""

    position: int = 0
    permits: int = 0
    task: asyncio.Task[None] | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    on_failed: Callable[[PulsarReader, BaseException], None] | None = None
    compacted: bool = False

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._pump())

    def flow(self, permits: int) -> None:
        self.permits += permits
        self.wake.set()

    async def _pump(self) -> None:
        actor = self.broker.actor(self.topic, self.partition)
        try:
            while not self.closed:
                if self.permits <= 0:
                    self.wake.clear()
                    await self.wake.wait()
                    continue
                if actor.end_offset <= self.position:
                    await actor.wait_for_data(self.position, None)
                    continue
                if self.compacted:
                    first = self.broker.compacted_start(self.topic, self.partition)
                    self.position = max(self.position, first)
                    res = await self.broker.read_compacted(
                        self.topic, self.partition, self.position, MAX_READ_BYTES
                    )
                else:
                    self.position = max(self.position, actor.start_offset)
                    res = await actor.read_async(self.position, MAX_READ_BYTES)
                if not res.chunks:
                    self.position = max(self.position, res.next_offset)
                    await asyncio.sleep(0)
                    continue
                self.permits -= self._frames(res.chunks, None, {})
                self.position = res.next_offset
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            if self.on_failed is not None:
                self.on_failed(self, err)

    async def stop(self) -> None:
        self.closed = True
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task


def ack_set(base: int, count: int, given: Iterable[int]) -> list[int]:
    """A Message frame's ack set: 64-bit words, bit i set when message i of the entry at
    ``base`` (of ``count`` messages) is one the consumer is to take."""
    words = [0] * ((count + 63) // 64)
    for o in given:
        i = o - base
        words[i >> 6] |= 1 << (i & 63)
    # protobuf int64: a word with its top bit set goes as a negative number
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]


def first_set_bit(words: Iterable[int], count: int) -> int | None:
    """The first message (index < ``count``) an ack set leaves unacknowledged."""
    for wi, word in enumerate(words):
        word &= (1 << 64) - 1
        if word:
            i = wi * 64 + ((word & -word).bit_length() - 1)
            return i if i < count else None
    return None


def start_offset(
    broker: Broker,
    topic: str,
    partition: int,
    mid: pb.MessageIdData | None,
    earliest: bool,
    compacted: bool = False,
) -> int:
    """Where a reader starts: the message ``mid`` names (its whole entry: the client skips
    what comes before it), else the partition's start (of its compacted view when
    ``compacted``: offsets retention removed may still be in the view) or end."""
    actor = broker.actor(topic, partition)
    first = broker.compacted_start(topic, partition) if compacted else actor.start_offset
    if mid is None:
        return first if earliest else actor.end_offset
    off = offset_of(mid)
    if off == EARLIEST:
        return first
    if off == LATEST:
        return actor.end_offset
    return min(max(off, first), actor.end_offset)
