"""Subscriptions of a non-persistent topic: nothing durable, nothing redelivered.

A `LiveSubscription` is a sink on every partition of its topic: it hands each message
to one of its consumers (by type, as a durable subscription would: Exclusive and
Failover to the one active consumer, Shared round robin, Key_Shared by the key's
hash) into that consumer's bounded `LiveQueue`, and delivers from the queue as the
consumer's permits allow. Exclusive and Failover pick a partition's consumer as durable
subscriptions do (by name, then arrival; partition p to the p mod n-th) and tell a
handle that can hear it (``active_changed``, Pulsar's ActiveConsumerChange) when it
becomes or stops being that consumer. A full queue drops (and counts) what does not fit. Acks are
accepted and change nothing: there is nothing to redeliver (Pulsar's non-persistent
subscriptions behave so). The subscription lives while it has consumers or until it
is deleted; a restart forgets it.
"""

from __future__ import annotations

import itertools
import time

from weir.broker.non_persistent.live_partition import LiveQueue
from weir.broker.subscriptions.consumer import AttachedConsumer, ConsumerHandle, Delivery
from weir.broker.subscriptions.info import (
    SubscriptionConsumerInfo,
    SubscriptionInfo,
    SubscriptionPartitionInfo,
)
from weir.broker.subscriptions.settings import (
    InitialPosition,
    SubscriptionMeta,
    SubscriptionType,
    check_subscription_name,
)
from weir.errors import (
    ConsumerBusyError,
    UnknownSubscriptionError,
    WeirError,
)
from weir.hashing import murmur3_32
from weir.storage.batch import decode_payload, parse_header

_consumer_ids = itertools.count(1 << 40)  # apart from the durable subscriptions' ids


class LiveSubscription:
    """See the module docstring; offers what `SubscribeSession` uses of a subscription."""

    def __init__(
        self, topic: str, meta: SubscriptionMeta, partitions: int, queue_bytes: int
    ) -> None:
        self.topic = topic
        self.meta = meta
        self.partitions = partitions
        self.queue_bytes = queue_bytes
        self.consumers: dict[int, AttachedConsumer] = {}
        self.queues: dict[int, LiveQueue] = {}
        self._rr = 0
        self.dropped = 0

    @property
    def name(self) -> str:
        return self.meta.name

    # consumers --------------------------------------------------------------

    def attach(self, c: AttachedConsumer, type: SubscriptionType) -> None:
        if self.consumers and type is not self.meta.type:
            raise ConsumerBusyError(
                f"subscription {self.name!r} is {self.meta.type.value} with "
                f"{len(self.consumers)} consumer(s); cannot attach a {type.value} consumer"
            )
        if not self.consumers:
            self.meta = SubscriptionMeta(
                self.name, type, self.meta.initial_position, self.meta.created_at_ms
            )
        if type is SubscriptionType.EXCLUSIVE and any(
            _overlap(c, o) for o in self.consumers.values()
        ):
            raise ConsumerBusyError(f"exclusive subscription {self.name!r} already has a consumer")
        before = self._owners()
        self.consumers[c.consumer_id] = c
        self.queues[c.consumer_id] = LiveQueue(self.queue_bytes)
        after = self._handover(before)
        for p, owner in after.items():
            if c.takes(p) and owner is not c:
                _tell(c, p, False)  # a standby hears so at once, as in Pulsar

    def detach(self, consumer_id: int) -> None:
        before = self._owners()
        self.consumers.pop(consumer_id, None)
        q = self.queues.pop(consumer_id, None)
        if q is not None:
            self.dropped += sum(len(offs) for _, _, offs in q.items)  # never delivered
        self._handover(before)

    def _owners(self) -> dict[int, AttachedConsumer | None]:
        """Each partition's one consumer (Exclusive / Failover; empty for the others)."""
        if self.meta.type not in (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER):
            return {}
        return {p: self._active(p) for p in range(self.partitions)}

    def _handover(
        self, before: dict[int, AttachedConsumer | None]
    ) -> dict[int, AttachedConsumer | None]:
        """Tell the consumers whose partitions changed hands (nothing moves: what the old
        one was given is its own, there is no redelivery); the owners now."""
        after = self._owners()
        for p in before.keys() | after.keys():
            old, new = before.get(p), after.get(p)
            if old is new:
                continue
            if old is not None and old.consumer_id in self.consumers:
                _tell(old, p, False)
            if new is not None:
                _tell(new, p, True)
        return after

    def flow(self, consumer_id: int, permits: int) -> None:
        c = self.consumers.get(consumer_id)
        if c is None:
            return
        c.permits += max(0, permits)
        self._drain(c)

    async def acknowledge(self, ranges: list[tuple[int, int, int]]) -> None:
        """Nothing to do: a non-persistent subscription keeps no cursor."""

    async def acknowledge_cumulative(self, partition: int, offset: int) -> None:
        """Nothing to do: a non-persistent subscription keeps no cursor."""

    def negative_acknowledge(self, ranges: list[tuple[int, int, int]], delay_ms: int) -> None:
        """Nothing to redeliver: the message is gone."""

    # dispatch ---------------------------------------------------------------

    def _active(self, partition: int) -> AttachedConsumer | None:
        """The consumer Exclusive / Failover give ``partition``'s messages to: of those
        taking it, ordered by (name, arrival), the one at ``partition`` mod their number
        (as durable subscriptions pick, so each partition has one and they spread)."""
        takers = sorted(
            (c for c in self.consumers.values() if c.takes(partition)), key=lambda c: c.order
        )
        return takers[partition % len(takers)] if takers else None

    def offer(self, partition: int, batch: bytes, first: int, end: int) -> tuple[int, int]:
        # consumers of some partitions only (a Pulsar consumer of one partition) take theirs
        takers = [cid for cid, c in self.consumers.items() if c.takes(partition)]
        if not takers:
            return 0, 0  # nobody connected: nothing to deliver to (and nothing "dropped")
        t = self.meta.type
        picks: dict[int, list[int]] = {}
        if t is SubscriptionType.SHARED:
            ids = sorted(takers)
            self._rr += 1
            picks[ids[self._rr % len(ids)]] = list(range(first, end))
        elif t is SubscriptionType.KEY_SHARED:
            ids = sorted(takers)
            h = parse_header(batch)
            keys = decode_payload(batch, 0, h).key_list()
            for i, k in enumerate(keys):
                cid = ids[murmur3_32(k) % len(ids)] if k else ids[0]
                picks.setdefault(cid, []).append(first + i)
        else:
            active = self._active(partition)
            assert active is not None
            picks[active.consumer_id] = list(range(first, end))
        delivered = dropped = 0
        for cid, offsets in picks.items():
            if self.queues[cid].put(partition, batch, offsets):
                delivered += len(offsets)
                self._drain(self.consumers[cid])
            else:
                dropped += len(offsets)
        self.dropped += dropped
        return delivered, dropped

    def _drain(self, c: AttachedConsumer) -> None:
        q = self.queues.get(c.consumer_id)
        while q is not None and q.items and c.permits > 0:
            partition, batch, offsets = q.items[0]
            now, rest = offsets[: c.permits], offsets[c.permits :]
            if rest:
                q.items[0] = (partition, batch, rest)
            else:
                q.items.popleft()
                q.nbytes -= len(batch)
            c.permits -= len(now)
            c.handle.deliver(Delivery(self.topic, partition, [batch], now, [0] * len(now)))

    # admin ------------------------------------------------------------------

    def describe(self, short_topic: str) -> SubscriptionInfo:
        owners = self._owners()
        backlog = {p: 0 for p in range(self.partitions)}
        for q in self.queues.values():
            for p, _, offs in q.items:
                backlog[p] = backlog.get(p, 0) + len(offs)
        return SubscriptionInfo(
            short_topic,
            self.name,
            self.meta.type,
            self.meta.initial_position.value,
            self.meta.created_at_ms,
            [
                SubscriptionPartitionInfo(
                    p,
                    0,
                    0,
                    backlog[p],
                    0,
                    owner.name if (owner := owners.get(p)) is not None else "",
                )
                for p in range(self.partitions)
            ],
            [
                SubscriptionConsumerInfo(c.consumer_id, c.name, c.permits, 0)
                for c in self.consumers.values()
            ],
        )

    def close(self, err: WeirError) -> None:
        for c in list(self.consumers.values()):
            c.handle.close(err)
        self.consumers.clear()
        self.queues.clear()


def _tell(c: AttachedConsumer, partition: int, active: bool) -> None:
    hook = getattr(c.handle, "active_changed", None)  # see ActivityHandle
    if hook is not None:
        hook(partition, active)


def _overlap(a: AttachedConsumer, b: AttachedConsumer) -> bool:
    return a.partitions is None or b.partitions is None or bool(a.partitions & b.partitions)


class LiveSubscriptions:
    """The subscriptions of non-persistent topics, in memory."""

    def __init__(self, queue_bytes: int) -> None:
        self.queue_bytes = queue_bytes
        self._subs: dict[tuple[str, str], LiveSubscription] = {}

    def of_topic(self, topic: str) -> list[LiveSubscription]:
        return [s for (t, _), s in sorted(self._subs.items()) if t == topic]

    def get(self, topic: str, name: str) -> LiveSubscription:
        sub = self._subs.get((topic, name))
        if sub is None:
            raise UnknownSubscriptionError(f"subscription {name!r} does not exist")
        return sub

    def subscribe(
        self,
        topic: str,
        partitions: int,
        name: str,
        type: SubscriptionType,
        handle: ConsumerHandle,
        *,
        consumer_name: str = "",
        create: bool = True,
        only: frozenset[int] | None = None,
    ) -> tuple[LiveSubscription, AttachedConsumer, bool]:
        """Attach a consumer (of the partitions ``only`` names, when given); the third value says
        whether the subscription is new (its caller registers it as a sink on the
        partitions)."""
        check_subscription_name(name)
        sub = self._subs.get((topic, name))
        new = sub is None
        if sub is None:
            if not create:
                raise UnknownSubscriptionError(f"subscription {name!r} does not exist")
            meta = SubscriptionMeta(name, type, InitialPosition.LATEST, int(time.time() * 1000))
            sub = LiveSubscription(topic, meta, partitions, self.queue_bytes)
        cid = next(_consumer_ids)
        c = AttachedConsumer(cid, consumer_name or f"consumer-{cid}", handle, 0, 0, 0, ("", cid))
        c.order = (c.name if type is SubscriptionType.FAILOVER else "", cid)
        c.partitions = only
        sub.attach(c, type)
        self._subs[(topic, name)] = sub
        return sub, c, new

    def delete(self, topic: str, name: str, *, force: bool = False) -> LiveSubscription:
        sub = self.get(topic, name)
        if sub.consumers and not force:
            raise ConsumerBusyError(
                f"subscription {name!r} has {len(sub.consumers)} consumer(s) attached; "
                "close them first, or delete with force"
            )
        del self._subs[(topic, name)]
        sub.close(UnknownSubscriptionError(f"subscription {name!r} was deleted"))
        return sub

    def forget_topic(self, topic: str) -> list[LiveSubscription]:
        gone = self.of_topic(topic)
        for sub in gone:
            del self._subs[(topic, sub.name)]
            sub.close(UnknownSubscriptionError("the topic was dropped"))
        return gone
