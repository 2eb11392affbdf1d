"""One Pulsar client connection: the protocol's state machine, the read loop and dispatch.

States: waiting for Connect (anything else is refused and the connection closed), then
connected. Each command is answered as Pulsar's broker answers it, by the ``handle_*``
of its concept's module: `handshake` (Connect, authentication), `lookup_commands`,
`schema_commands`, `producer_commands`, `consumer_commands`, over the state they share
(`connection_state`). The work is the broker facade's (`weir.broker.broker.Broker`), the
decisions about who may do what are `weir.security`'s, and bytes are
`weir.protocols.pulsar.codec`'s: a handler never touches a frame. A frame that breaks
the protocol ends the connection; a request that fails gets an Error naming why, and
the connection goes on.
"""

from __future__ import annotations

import asyncio
import logging

from weir.protocols.pulsar import names
from weir.protocols.pulsar import pulsar_api_pb2 as pb
from weir.protocols.pulsar.codec import Frame, ProtocolError
from weir.protocols.pulsar.handshake import Handshake
from weir.protocols.pulsar.lookup_commands import LookupCommands
from weir.protocols.pulsar.schema_commands import SchemaCommands

log = logging.getLogger("weir.pulsar")

T = pb.BaseCommand
NOT_SERVED = {
    T.CONSUMER_STATS: "consumerStats",
    T.NEW_TXN: "newTxn",
    T.ADD_PARTITION_TO_TXN: "addPartitionToTxn",
    T.ADD_SUBSCRIPTION_TO_TXN: "addSubscriptionToTxn",
    T.END_TXN: "endTxn",
    T.END_TXN_ON_PARTITION: "endTxnOnPartition",
    T.END_TXN_ON_SUBSCRIPTION: "endTxnOnSubscription",
    T.TC_CLIENT_CONNECT_REQUEST: "tcClientConnectRequest",
    T.WATCH_TOPIC_LIST: "watchTopicList",
    T.WATCH_TOPIC_LIST_CLOSE: "watchTopicListClose",
}


class PulsarConnection(Handshake, LookupCommands, SchemaCommands):
    """One connection: the read loop and the dispatch of each frame to its handler."""

    async def run(self) -> None:
        if self.settings.keep_alive_s > 0:
            self._spawn(self._keep_alive(self.settings.keep_alive_s))
        try:
            while not self._closed:
                data = await self.reader.read(1 << 16)
                if not data:
                    break
                self.heard = True
                for frame in self.decoder.feed(data):
                    self.dispatch(frame)
                if self.queued_bytes > (8 << 20):  # the client reads slower than it asks
                    await self.drained()
        except ProtocolError as err:
            log.info("pulsar connection closed: %s", err.message, extra={"peer": self.peer})
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pulsar connection failed", extra={"peer": self.peer})
        finally:
            await self.close()

    async def _keep_alive(self, interval: float) -> None:
        """Pulsar's keep-alive: a client silent for ``interval`` is sent a Ping (answered
        with a Pong by every client); one still silent an interval later, or that never
        sent Connect, is taken for dead and its connection closed, so that its producers
        and consumers go (an Exclusive subscription or a producer name is free again)."""
        pinged = False
        while not self._closed:
            self.heard = False
            await asyncio.sleep(interval)
            if self.heard:
                pinged = False
            elif pinged or self.principal is None:
                log.info(
                    "pulsar client silent for %.1f s: connection closed",
                    interval * (2 if pinged else 1),
                    extra={"peer": self.peer},
                )
                self.writer.transport.abort()  # the read loop sees the end and closes
                return
            else:
                self.send(T(type=T.PING, ping=pb.CommandPing()))
                pinged = True

    # ------------------------------------------------------------------ dispatch

    def dispatch(self, frame: Frame) -> None:
        cmd = frame.command
        t = cmd.type
        if self.principal is None:
            if t != T.CONNECT:
                raise ProtocolError(f"{T.Type.Name(t)} before Connect")
            self._spawn(self.handle_connect(cmd.connect))
            return
        if t == T.SEND:
            self.handle_send(cmd.send, frame)
        elif t == T.FLOW:
            self.handle_flow(cmd.flow)
        elif t == T.ACK:
            self._ack(cmd.ack)
        elif t == T.PING:
            self.send(T(type=T.PONG, pong=pb.CommandPong()))
        elif t == T.PONG:
            pass
        elif t == T.PRODUCER:
            self._spawn(self.handle_producer(cmd.producer), cmd.producer.request_id)
        elif t == T.SUBSCRIBE:
            self._spawn(self.handle_subscribe(cmd.subscribe), cmd.subscribe.request_id)
        elif t == T.LOOKUP:
            self._spawn(self.handle_lookup(cmd.lookupTopic))
        elif t == T.PARTITIONED_METADATA:
            self._spawn(self.handle_partitioned_metadata(cmd.partitionMetadata))
        elif t == T.REDELIVER_UNACKNOWLEDGED_MESSAGES:
            self.handle_redeliver(cmd.redeliverUnacknowledgedMessages)
        elif t == T.CLOSE_PRODUCER:
            self._spawn(
                self.handle_close_producer(cmd.close_producer), cmd.close_producer.request_id
            )
        elif t == T.CLOSE_CONSUMER:
            self._spawn(
                self.handle_close_consumer(cmd.close_consumer), cmd.close_consumer.request_id
            )
        elif t == T.UNSUBSCRIBE:
            self._spawn(self.handle_unsubscribe(cmd.unsubscribe), cmd.unsubscribe.request_id)
        elif t == T.SEEK:
            self._spawn(self.handle_seek(cmd.seek), cmd.seek.request_id)
        elif t == T.GET_LAST_MESSAGE_ID:
            self._spawn(
                self.handle_get_last_message_id(cmd.getLastMessageId),
                cmd.getLastMessageId.request_id,
            )
        elif t == T.GET_TOPICS_OF_NAMESPACE:
            self._spawn(
                self.handle_get_topics(cmd.getTopicsOfNamespace),
                cmd.getTopicsOfNamespace.request_id,
            )
        elif t == T.GET_SCHEMA:
            self._spawn(self.handle_get_schema(cmd.getSchema))
        elif t == T.GET_OR_CREATE_SCHEMA:
            self._spawn(self.handle_get_or_create_schema(cmd.getOrCreateSchema))
        elif t == T.CONNECT:
            raise ProtocolError("Connect on a connection that is connected already")
        elif t in NOT_SERVED:
            body = getattr(cmd, NOT_SERVED[t])
            self.error(
                body.request_id,
                names.NotServedError(f"{T.Type.Name(t)} is not served by weir"),
            )
        else:
            raise ProtocolError(f"{T.Type.Name(t)} is not a command a client sends")
