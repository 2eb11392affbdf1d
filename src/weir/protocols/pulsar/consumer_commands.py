"""Subscribe, Flow, Ack, RedeliverUnacknowledgedMessages, CloseConsumer, Unsubscribe, Seek,
GetLastMessageId: a connection's consumers and readers (`consumers`).
"""

from __future__ import annotations

import logging

from weir.broker.subscriptions import InitialPosition, Subscription, SubscriptionType
from weir.broker.topics import PERSISTENT, TopicConfig
from weir.errors import (
    BadRequestError,
    ConsumerBusyError,
    WeirError,
)
from weir.protocols.pulsar import names
from weir.protocols.pulsar import pulsar_api_pb2 as pb
from weir.protocols.pulsar.connection_state import ConnectionState
from weir.protocols.pulsar.consumers import (
    ConsumerBase,
    PulsarConsumer,
    PulsarReader,
    start_offset,
    stored_batch,
)
from weir.protocols.pulsar.errors import server_error
from weir.protocols.pulsar.message_ids import EARLIEST_ENTRY, LEDGER, offset_of
from weir.security.grants import Permission

log = logging.getLogger("weir.pulsar")

T = pb.BaseCommand
TYPES = {
    pb.CommandSubscribe.Exclusive: SubscriptionType.EXCLUSIVE,
    pb.CommandSubscribe.Shared: SubscriptionType.SHARED,
    pb.CommandSubscribe.Failover: SubscriptionType.FAILOVER,
    pb.CommandSubscribe.Key_Shared: SubscriptionType.KEY_SHARED,
}


class ConsumerCommands(ConnectionState):
    """The commands of a connection's consumers and readers, from Subscribe to Seek."""

    async def handle_subscribe(self, req: pb.CommandSubscribe) -> None:
        if req.consumer_id in self.consumers:
            raise BadRequestError(f"consumer id {req.consumer_id} is in use on this connection")
        t = self._topic_name(req.topic)
        checks: list[tuple[object, str, str]] = []
        self._allow(Permission.CONSUME, t, "subscribe to", checks)
        if req.read_compacted and req.durable:
            raise names.NotServedError(
                "read_compacted is served for readers (non-durable subscriptions), "
                "not for durable subscriptions yet"
            )
        cfg = await self._topic_for_use(t, create=req.force_topic_creation)
        partition, id_partition = self._partition(t, cfg)
        if req.HasField("schema"):
            await self._schema_version(cfg, req.schema)
        earliest = req.initialPosition == pb.CommandSubscribe.Earliest
        if cfg.kind != PERSISTENT:
            await self._subscribe_live(req, t, cfg, partition, id_partition, checks)
            return
        if not req.durable:
            seek_key = (cfg.name, partition, req.subscription)
            moved = self.state.seeks.pop(seek_key, None)
            pos = (
                moved
                if moved is not None
                else start_offset(
                    self.broker,
                    cfg.name,
                    partition,
                    req.start_message_id if req.HasField("start_message_id") else None,
                    earliest,
                    compacted=req.read_compacted,
                )
            )
            r = PulsarReader(
                req.consumer_id,
                cfg.name,
                partition,
                id_partition,
                self.broker,
                self.write,
                self.state.cache,
                name=req.subscription,
                batch_index_ack=self.settings.batch_index_ack,
                checks=checks,
                position=pos,
                compacted=req.read_compacted,
            )
            r.on_failed = lambda reader, err: self._consumer_failed(reader, err)
            self.consumers[req.consumer_id] = r
            r.start()
            self.success(req.request_id)
            return
        c = PulsarConsumer(
            req.consumer_id,
            cfg.name,
            partition,
            id_partition,
            self.broker,
            self.write,
            self.state.cache,
            name=req.subscription,
            batch_index_ack=self.settings.batch_index_ack,
            checks=checks,
            send_command=self.send,
        )
        c.on_dropped = self._consumer_dropped
        sticky = _sticky_ranges(req)
        self.consumers[req.consumer_id] = c
        try:
            sub, attached = await self.broker.subscribe(
                cfg.name,
                req.subscription,
                TYPES[req.subType],
                InitialPosition.EARLIEST if earliest else InitialPosition.LATEST,
                c,
                consumer_name=req.consumer_name,
                partitions=frozenset({partition}),
                hash_ranges=sticky,
                # with ack sets a consumer can take part of an entry, and Key_Shared routes
                # each message by its key; without, it takes whole entries only
                whole_batches=not (
                    self.settings.batch_index_ack and req.subType == pb.CommandSubscribe.Key_Shared
                ),
            )
        except BaseException:
            self.consumers.pop(req.consumer_id, None)
            raise
        # Whole-batch consumers attach to durable subscriptions only (the broker refuses
        # them on a non-persistent topic).
        assert isinstance(sub, Subscription)
        c.sub, c.attached = sub, attached
        if c.closed:  # dropped while subscribing
            return
        self.success(req.request_id)

    async def _subscribe_live(
        self,
        req: pb.CommandSubscribe,
        t: names.PulsarTopic,
        cfg: TopicConfig,
        partition: int,
        id_partition: int,
        checks: list[tuple[object, str, str]],
    ) -> None:
        """A consumer or reader of a non-persistent topic: attached to a live subscription
        (a reader to one of its own, gone when it closes); it gets what is written from
        now on, whatever its initial position or start message id."""
        if req.read_compacted:
            raise names.NotServedError(
                f"topic {t.url()} is non-persistent: it has no compacted view"
            )
        if _sticky_ranges(req) is not None:
            raise names.NotServedError(
                f"topic {t.url()} is non-persistent: sticky hash ranges are served for "
                "persistent topics only"
            )
        c = PulsarConsumer(
            req.consumer_id,
            cfg.name,
            partition,
            id_partition,
            self.broker,
            self.write,
            self.state.cache,
            name=req.subscription,
            batch_index_ack=self.settings.batch_index_ack,
            checks=checks,
            live=True,
            send_command=self.send,
            ephemeral=not req.durable,
        )
        c.on_dropped = self._consumer_dropped
        self.consumers[req.consumer_id] = c
        try:
            sub, attached = await self.broker.subscribe(
                cfg.name,
                req.subscription,
                TYPES[req.subType] if req.durable else SubscriptionType.EXCLUSIVE,
                InitialPosition.LATEST,
                c,
                consumer_name=req.consumer_name,
                partitions=frozenset({partition}),
            )
        except BaseException:
            self.consumers.pop(req.consumer_id, None)
            raise
        c.sub, c.attached = sub, attached
        if c.closed:  # dropped while subscribing
            return
        self.success(req.request_id)

    def _consumer_dropped(self, c: ConsumerBase) -> None:
        if self.consumers.get(c.consumer_id) is c:
            del self.consumers[c.consumer_id]

    def _consumer_failed(self, c: ConsumerBase, err: BaseException) -> None:
        log.info("pulsar reader stopped: %r", err, extra={"peer": self.peer})
        self._consumer_closed_by_server(c)

    def _consumer_closed_by_server(self, c: ConsumerBase) -> None:
        """The client hears CloseConsumer (and subscribes again, or is refused)."""
        if self.consumers.get(c.consumer_id) is not c:
            return
        del self.consumers[c.consumer_id]
        if isinstance(c, PulsarConsumer):
            c.detach()
        else:
            c.closed = True
            if isinstance(c, PulsarReader) and c.task is not None:
                c.task.cancel()
        self.send(
            T(
                type=T.CLOSE_CONSUMER,
                close_consumer=pb.CommandCloseConsumer(consumer_id=c.consumer_id, request_id=0),
            )
        )

    def _consumer(self, consumer_id: int) -> ConsumerBase | None:
        return self.consumers.get(consumer_id)

    def handle_flow(self, req: pb.CommandFlow) -> None:
        c = self.consumers.get(req.consumer_id)
        if c is not None and isinstance(c, PulsarConsumer | PulsarReader):
            c.flow(req.messagePermits)

    def _ack(self, req: pb.CommandAck) -> None:
        """An ack runs as a task of its own; the consumer remembers it until it is durable,
        so that closing, unsubscribing or seeking answers only after it (`settled`)."""
        task = self._spawn(self.handle_ack(req))
        c = self.consumers.get(req.consumer_id)
        if isinstance(c, PulsarConsumer):
            c.acks.add(task)
            task.add_done_callback(c.acks.discard)

    async def handle_ack(self, req: pb.CommandAck) -> None:
        c = self.consumers.get(req.consumer_id)
        err: WeirError | None = None
        try:
            if isinstance(c, PulsarConsumer):
                await c.acknowledge(req)
            elif c is None:
                raise BadRequestError(f"no consumer {req.consumer_id} on this connection")
        except WeirError as e:
            err = e
        if req.HasField("request_id"):
            resp = pb.CommandAckResponse(consumer_id=req.consumer_id, request_id=req.request_id)
            if err is not None:
                resp.error = server_error(err)
                resp.message = err.message
            self.send(T(type=T.ACK_RESPONSE, ackResponse=resp))

    def handle_redeliver(self, req: pb.CommandRedeliverUnacknowledgedMessages) -> None:
        c = self.consumers.get(req.consumer_id)
        if isinstance(c, PulsarConsumer):
            c.redeliver(req.message_ids)

    async def handle_close_consumer(self, req: pb.CommandCloseConsumer) -> None:
        c = self.consumers.pop(req.consumer_id, None)
        if c is not None:
            await c.settled()  # the acks sent before the close are durable when it answers
            await self._drop_consumer(c)
        self.success(req.request_id)

    async def handle_unsubscribe(self, req: pb.CommandUnsubscribe) -> None:
        c = self.consumers.get(req.consumer_id)
        if c is None:
            raise BadRequestError(f"no consumer {req.consumer_id} on this connection")
        await c.settled()
        if isinstance(c, PulsarConsumer) and c.sub is not None:
            sub = c.sub
            others = [x for x in sub.consumers.values() if x is not c.attached]
            if others:
                raise ConsumerBusyError(
                    f"subscription {sub.name!r} has {len(others)} other consumer(s) attached"
                )
            c.closed = True
            await self.broker.delete_subscription(sub.topic, sub.name, force=True)
        else:
            await self._drop_consumer(c)
        self.consumers.pop(req.consumer_id, None)
        self.success(req.request_id)

    async def handle_seek(self, req: pb.CommandSeek) -> None:
        c = self.consumers.get(req.consumer_id)
        if c is None:
            raise BadRequestError(f"no consumer {req.consumer_id} on this connection")
        if isinstance(c, PulsarConsumer) and c.live:
            raise names.NotServedError(
                "a non-persistent topic keeps no messages to seek to (as in Pulsar)"
            )
        actor = self.broker.actor(c.topic, c.partition)
        if req.HasField("message_publish_time"):
            target = actor.log.offset_for_time(req.message_publish_time)
        elif req.HasField("message_id"):
            off = offset_of(req.message_id)
            target = actor.start_offset if off == -1 else actor.end_offset if off == -2 else off
        else:
            raise BadRequestError("a seek needs a message id or a publish time")
        await c.settled()
        if isinstance(c, PulsarConsumer) and c.sub is not None:
            # the broker disconnects every consumer of the subscription (CloseConsumer):
            # they subscribe again and get messages from the new position
            await self.broker.seek_subscription(c.topic, c.sub.name, {c.partition: target})
        else:
            self.state.seeks[(c.topic, c.partition, c.name)] = target
            self.consumers.pop(c.consumer_id, None)
            await self._drop_consumer(c)
            self.send(
                T(
                    type=T.CLOSE_CONSUMER,
                    close_consumer=pb.CommandCloseConsumer(consumer_id=c.consumer_id, request_id=0),
                )
            )
        self.success(req.request_id)

    async def handle_get_last_message_id(self, req: pb.CommandGetLastMessageId) -> None:
        c = self.consumers.get(req.consumer_id)
        if c is None:
            raise BadRequestError(f"no consumer {req.consumer_id} on this connection")
        resp = pb.CommandGetLastMessageIdResponse(request_id=req.request_id)
        if isinstance(c, PulsarConsumer) and c.live:
            # nothing is kept: the last message is the last one sent to this consumer
            # (what a reader's hasMessageAvailable compares with what it has read)
            if c.last_given is None:
                last = pb.MessageIdData(
                    ledgerId=EARLIEST_ENTRY, entryId=EARLIEST_ENTRY, partition=c.id_partition
                )
            else:
                last = pb.MessageIdData(
                    ledgerId=LEDGER,
                    entryId=c.last_given[0],
                    partition=c.id_partition,
                    batch_index=c.last_given[1],
                )
            resp.last_message_id.CopyFrom(last)
            resp.consumer_mark_delete_position.CopyFrom(last)
            self.send(T(type=T.GET_LAST_MESSAGE_ID_RESPONSE, getLastMessageIdResponse=resp))
            return
        actor = self.broker.actor(c.topic, c.partition)
        resp.last_message_id.CopyFrom(await self._id_of(c, actor.end_offset - 1))
        if isinstance(c, PulsarConsumer) and isinstance(c.sub, Subscription):
            mark = c.sub.parts[c.partition].cursor.mark_delete
        elif isinstance(c, PulsarReader):
            mark = c.position
        else:
            mark = actor.end_offset
        resp.consumer_mark_delete_position.CopyFrom(await self._id_of(c, mark - 1))
        self.send(T(type=T.GET_LAST_MESSAGE_ID_RESPONSE, getLastMessageIdResponse=resp))

    async def _id_of(self, c: ConsumerBase, offset: int) -> pb.MessageIdData:
        """The id of the message at ``offset`` as deliveries name it (entry -1 for none)."""
        found = (
            await stored_batch(self.broker, c.topic, c.partition, offset) if offset >= 0 else None
        )
        if found is None:
            return pb.MessageIdData(
                ledgerId=LEDGER if offset >= 0 else EARLIEST_ENTRY,
                entryId=EARLIEST_ENTRY,
                partition=c.id_partition,
            )
        base, _, batched = found
        return pb.MessageIdData(
            ledgerId=LEDGER,
            entryId=base,
            partition=c.id_partition,
            batch_index=offset - base if batched else -1,
        )


def _sticky_ranges(req: pb.CommandSubscribe) -> list[tuple[int, int]] | None:
    """A Key_Shared sticky consumer's key-hash slots; None for any other."""
    if (
        req.subType == pb.CommandSubscribe.Key_Shared
        and req.HasField("keySharedMeta")
        and req.keySharedMeta.keySharedMode == pb.STICKY
    ):
        # Pulsar's slots are weir's: (murmur3_32(key) & 0x7FFFFFFF) % 65536, inclusive
        return [(r.start, r.end) for r in req.keySharedMeta.hashRanges]
    return None
