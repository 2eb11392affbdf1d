"""The state a subscription's parts share: per partition what is pending, due again or
held back (`PartitionState`), and the subscription's own (`SubscriptionState`, the base
of the `Acknowledgements` mixin and of `Subscription`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from weir.broker.partition_actor import PartitionActor
from weir.broker.subscriptions.consumer import AttachedConsumer
from weir.broker.subscriptions.cursor import Cursor
from weir.broker.subscriptions.delayed import DelayedIndex
from weir.broker.subscriptions.dispatcher import Dispatcher
from weir.broker.subscriptions.rates import RateMeter
from weir.broker.subscriptions.settings import SubscriptionMeta
from weir.errors import UnknownPartitionError

log = logging.getLogger("weir.subscriptions")

DeadLetterSink = Callable[[str, list[bytes]], Awaitable[None]]  # (topic, batches)
MAX_DELAY_MS = 7 * 24 * 3600 * 1000


@dataclass(eq=False, slots=True)
class PartitionState:
    cursor: Cursor
    read_pos: int  # next offset never dispatched since the subscription was loaded
    dispatched_high: int  # offsets below may have been delivered: they can be acked
    pending: dict[int, tuple[int, int]] = field(
        default_factory=dict
    )  # offset -> (consumer, delivery)
    redeliver: set[int] = field(default_factory=set)
    # Key_Shared: key hashes of messages read and not acknowledged, and the ones read but
    # held back (their key waits for another consumer, or its consumer has no permits)
    keys: dict[int, int] = field(default_factory=dict)
    held: set[int] = field(default_factory=set)
    partition: int = -1
    dead: set[int] = field(default_factory=set)  # on their way to the dead-letter topic
    burying: asyncio.Task[None] | None = None
    delayed: DelayedIndex = field(default_factory=DelayedIndex)  # held back until their time
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    seeks: int = 0  # seeks so far: a dispatch read that spans one delivers nothing


class SubscriptionState:
    """The live state of one subscription (set up by `Subscription.__init__`)."""

    topic: str
    topic_id: int
    meta: SubscriptionMeta
    dispatcher: Dispatcher
    parts: dict[int, PartitionState]
    consumers: dict[int, AttachedConsumer]
    rate_out: RateMeter
    rate_redeliver: RateMeter
    rate_ack: RateMeter
    _actor_of: Callable[[int], PartitionActor]
    _dead_letter_sink: DeadLetterSink | None
    _closed: bool
    # a consumer's committed offsets (see consumer_cursor): Failover or Exclusive,
    # acknowledged in order or cumulatively, no dead letters nor retry letters
    consumer_backed: bool = False

    @property
    def name(self) -> str:
        return self.meta.name

    def _state(self, partition: int) -> PartitionState:
        st = self.parts.get(partition)
        if st is None:
            raise UnknownPartitionError(
                f"subscription {self.name!r} has partitions 0..{len(self.parts) - 1}, not {partition}"
            )
        return st

    def _wake_all(self) -> None:
        for st in self.parts.values():
            st.wake.set()


def ignore_failure(fut: asyncio.Future[None]) -> None:
    """For a cursor snapshot nobody waits for: a failure is logged (the next one retries)."""
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("storing a cursor in the background failed: %s", fut.exception())


async def all_durable(waits: list[asyncio.Future[None]]) -> None:
    # shield: a caller that goes away must not cancel a snapshot others wait for too
    await asyncio.gather(*(asyncio.shield(w) for w in waits))


def now_ms() -> int:
    return int(time.time() * 1000)
