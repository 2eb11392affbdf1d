"""One Pulsar client connection: the protocol's state machine and a ``handle_*`` per command.

States: waiting for Connect (anything else is refused and the connection closed), then
connected. Each command is answered as Pulsar's broker answers it; the work is the
broker facade's (`weir.broker.broker.Broker`), the decisions about who may do what are
`weir.security`'s, and bytes are `weir.protocols.pulsar.codec`'s: a handler never
touches a frame. A frame that breaks the protocol ends the connection; a request that
fails gets an Error naming why, and the connection goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from weir import __version__
from weir.access_mode import AccessMode
from weir.broker.broker import Broker
from weir.broker.schemas import SchemaInfo
from weir.broker.subscriptions import InitialPosition, Subscription, SubscriptionType
from weir.broker.topics import TopicConfig
from weir.errors import (
    BadRequestError,
    ConsumerBusyError,
    ProducerBusyError,
    ProducerFencedError,
    UnauthorizedError,
    UnknownTopicError,
    WeirError,
)
from weir.protocols.pulsar import names
from weir.protocols.pulsar import pulsar_api_pb2 as pb
from weir.protocols.pulsar.codec import Frame, FrameDecoder, ProtocolError, encode_command
from weir.protocols.pulsar.consumers import (
    ConsumerBase,
    EntryCache,
    PulsarConsumer,
    PulsarReader,
    start_offset,
    stored_batch,
)
from weir.protocols.pulsar.errors import as_weir_error, server_error
from weir.protocols.pulsar.message_ids import EARLIEST_ENTRY, LEDGER, offset_of
from weir.protocols.pulsar.producers import PulsarProducer
from weir.security import Security
from weir.security.authenticator import BearerToken, ClientCertificate, Credential, UserPassword
from weir.security.grants import Permission
from weir.security.principal import ANONYMOUS, Principal, current_checks

log = logging.getLogger("weir.pulsar")

T = pb.BaseCommand
PROTOCOL_VERSION = 19  # the newest version whose commands this front answers
SERVER_VERSION = f"weir-{__version__}"
_names = itertools.count(1)
TYPES = {
    pb.CommandSubscribe.Exclusive: SubscriptionType.EXCLUSIVE,
    pb.CommandSubscribe.Shared: SubscriptionType.SHARED,
    pb.CommandSubscribe.Failover: SubscriptionType.FAILOVER,
    pb.CommandSubscribe.Key_Shared: SubscriptionType.KEY_SHARED,
}
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


@dataclass(frozen=True)
class FrontSettings:
    """What every connection of a Pulsar listener shares."""

    broker_url: str  # pulsar://host:port or pulsar+ssl://host:port, as lookups answer it
    max_message_size: int
    tls: bool = False
    # Pulsar's acknowledgmentAtBatchIndexLevelEnabled: frames carry ack sets (see consumers.py)
    batch_index_ack: bool = False


class FrontState:
    """State shared by the connections of one listener: producers by name (one live
    producer per name and partition), the entry cache, reader positions moved by a seek."""

    def __init__(self) -> None:
        self.producers: dict[tuple[str, int, str], PulsarProducer] = {}
        self.cache = EntryCache()
        self.seeks: dict[tuple[str, int, str], int] = {}


class PulsarConnection:
    def __init__(
        self,
        broker: Broker,
        security: Security,
        settings: FrontSettings,
        state: FrontState,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        certificate: str | None = None,
        stopping: asyncio.Event | None = None,
    ) -> None:
        self.broker = broker
        self.security = security
        self.settings = settings
        self.state = state
        self.reader = reader
        self.writer = writer
        self.certificate = certificate
        self.stopping = stopping or asyncio.Event()
        self.decoder = FrameDecoder(settings.max_message_size + 64 * 1024)
        self.principal: Principal | None = None
        self.credential: Credential | None = None
        self.producers: dict[int, PulsarProducer] = {}
        self.consumers: dict[int, ConsumerBase] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.peer = str(writer.get_extra_info("peername") or "")
        self._closed = False
        self._stop_watching: Callable[[], None] | None = None

    # ------------------------------------------------------------------ transport

    def send(self, cmd: pb.BaseCommand) -> None:
        self.write(encode_command(cmd))

    def write(self, data: bytes) -> None:
        if not self._closed:
            self.writer.write(data)

    async def run(self) -> None:
        try:
            while not self._closed:
                data = await self.reader.read(1 << 16)
                if not data:
                    break
                for frame in self.decoder.feed(data):
                    self.dispatch(frame)
                if self.writer.transport.get_write_buffer_size() > (8 << 20):
                    await self.writer.drain()
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

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._stop_watching is not None:
            self._stop_watching()
        for t in list(self.tasks):
            t.cancel()
        for p in list(self.producers.values()):
            await p.stop()
        for c in list(self.consumers.values()):
            await self._drop_consumer(c)
        self.producers.clear()
        self.consumers.clear()
        with contextlib.suppress(Exception):
            self.writer.close()

    def _spawn(self, work: Awaitable[None], request_id: int | None = None) -> asyncio.Task[None]:
        """Run a request's handler as a task; its failure becomes the request's Error."""

        async def run() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except Exception as err:
                e = as_weir_error(err)
                if not isinstance(err, WeirError):
                    log.exception("pulsar request failed", extra={"peer": self.peer})
                if request_id is not None:
                    self.error(request_id, e)

        t = asyncio.get_running_loop().create_task(run())
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)
        return t

    def error(self, request_id: int, err: WeirError) -> None:
        self.send(
            T(
                type=T.ERROR,
                error=pb.CommandError(
                    request_id=request_id, error=server_error(err), message=err.message
                ),
            )
        )

    def success(self, request_id: int) -> None:
        self.send(T(type=T.SUCCESS, success=pb.CommandSuccess(request_id=request_id)))

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

    # ------------------------------------------------------------------ connect

    def _credential(self, c: pb.CommandConnect) -> Credential | None:
        method = c.auth_method_name
        data = c.auth_data
        if method == "token":
            text = data.decode(errors="replace").strip()
            if text.lower().startswith("token:"):
                text = text[6:]
            return BearerToken(text) if text else None
        if method == "basic":
            user, sep, password = data.decode(errors="replace").partition(":")
            if not sep:
                raise UnauthorizedError("basic auth data must be 'user:password'")
            return UserPassword(user, password)
        if method == "tls" or (not method and self.certificate):
            if self.certificate is None:
                raise UnauthorizedError("TLS authentication needs a client certificate")
            return ClientCertificate(self.certificate)
        if method and method != "none":
            raise UnauthorizedError(
                f"authentication method {method!r} is not served: use token, basic or tls"
            )
        return None

    async def handle_connect(self, c: pb.CommandConnect) -> None:
        try:
            credential = self._credential(c)
            if isinstance(credential, UserPassword):
                principal = await asyncio.to_thread(self.security.authenticate, credential)
            else:
                principal = self.security.authenticate(credential)
        except WeirError as err:
            self.error(0, err)
            await asyncio.sleep(0)
            await self.close()
            return
        self.principal, self.credential = principal, credential
        self._stop_watching = self.security.on_change(self._recheck)
        version = min(c.protocol_version, PROTOCOL_VERSION)
        self.send(
            T(
                type=T.CONNECTED,
                connected=pb.CommandConnected(
                    server_version=SERVER_VERSION,
                    protocol_version=version,
                    max_message_size=self.settings.max_message_size,
                ),
            )
        )

    def _recheck(self) -> None:
        """Users or grants changed. A caller whose credential is refused now loses the
        connection; a producer or consumer whose grant went is closed by the server (the
        client tries again and is refused); the others go on."""
        assert self.principal is not None
        if self._closed:
            return
        err = self.security.still_allowed(self.credential, self.principal, [])
        if err is not None:
            log.info("pulsar connection ended: %s", err.message, extra={"peer": self.peer})
            for t in list(self.tasks):
                t.cancel()
            for p in list(self.producers.values()):
                p.release()
            for c in list(self.consumers.values()):
                if isinstance(c, PulsarConsumer):
                    c.detach()
                else:
                    c.closed = True
            self._closed = True
            with contextlib.suppress(Exception):
                self.writer.transport.abort()
            return
        for p in list(self.producers.values()):
            why = self._still_allowed(p.checks)
            if why is not None:
                log.info("pulsar producer ended: %s", why.message, extra={"peer": self.peer})
                self._producer_closed_by_server(p)
        for c in list(self.consumers.values()):
            why = self._still_allowed(c.checks)
            if why is not None:
                log.info("pulsar consumer ended: %s", why.message, extra={"peer": self.peer})
                self._consumer_closed_by_server(c)

    def _still_allowed(self, checks: list[tuple[object, str, str]]) -> WeirError | None:
        assert self.principal is not None
        try:
            for permission, topic, operation in checks:
                assert permission is None or isinstance(permission, Permission)
                self.security.authorize(self.principal, permission, topic, operation, record=False)
        except WeirError as err:
            return err
        return None

    def _allow(
        self,
        permission: Permission | None,
        topic: names.PulsarTopic,
        what: str,
        checks: list[tuple[object, str, str]] | None = None,
    ) -> None:
        """Ask `security` (never decided here); a stream's ``checks`` remember the question,
        asked again when users or grants change."""
        token = current_checks.set(checks if checks is not None else [])
        try:
            self.security.authorize(self.principal or ANONYMOUS, permission, topic.weir_name, what)
        finally:
            current_checks.reset(token)

    # ------------------------------------------------------------------ lookup

    def _topic_name(self, name: str) -> names.PulsarTopic:
        return names.check_served(names.parse(name))

    async def _topic_for_use(self, t: names.PulsarTopic, create: bool = True) -> TopicConfig:
        try:
            return self.broker.topic(t.weir_name)
        except UnknownTopicError:
            if not create:
                raise
        return await self.broker.topic_for_use(t.weir_name)

    def _partition(self, t: names.PulsarTopic, cfg: TopicConfig) -> tuple[int, int]:
        """(weir partition, partition as ids say it) that a producer or consumer of ``t`` uses."""
        if t.partition is None:
            if cfg.partitions != 1:
                raise BadRequestError(
                    f"topic {t.url()} is partitioned ({cfg.partitions} partitions): use "
                    f"{t.url(0)} ... or let the client look up its partitions"
                )
            return 0, -1
        if t.partition >= cfg.partitions:
            raise UnknownTopicError(
                f"topic {t.url()} has partitions 0..{cfg.partitions - 1}, not {t.partition}"
            )
        return t.partition, t.partition

    async def handle_lookup(self, req: pb.CommandLookupTopic) -> None:
        resp = pb.CommandLookupTopicResponse(request_id=req.request_id)
        try:
            t = self._topic_name(req.topic)
            self._allow(None, t, "look up")
        except WeirError as err:
            resp.response = pb.CommandLookupTopicResponse.Failed
            resp.error = server_error(err)
            resp.message = err.message
        else:
            resp.response = pb.CommandLookupTopicResponse.Connect
            resp.authoritative = True
            resp.proxy_through_service_url = True  # one server: the address the client used
            if self.settings.tls:
                resp.brokerServiceUrlTls = self.settings.broker_url
            else:
                resp.brokerServiceUrl = self.settings.broker_url
        self.send(T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=resp))

    async def handle_partitioned_metadata(self, req: pb.CommandPartitionedTopicMetadata) -> None:
        resp = pb.CommandPartitionedTopicMetadataResponse(request_id=req.request_id)
        try:
            t = self._topic_name(req.topic)
            self._allow(None, t, "look up")
            if t.partition is not None:
                n = 0
            else:
                try:
                    cfg = self.broker.topic(t.weir_name)
                except UnknownTopicError:
                    # auto-creation: the client creates producers / consumers next
                    cfg = await self.broker.topic_for_use(t.weir_name)
                n = 0 if cfg.partitions == 1 else cfg.partitions
        except WeirError as err:
            resp.response = pb.CommandPartitionedTopicMetadataResponse.Failed
            resp.error = server_error(err)
            resp.message = err.message
        else:
            resp.response = pb.CommandPartitionedTopicMetadataResponse.Success
            resp.partitions = n
        self.send(T(type=T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=resp))

    async def handle_get_topics(self, req: pb.CommandGetTopicsOfNamespace) -> None:
        me = self.principal or ANONYMOUS
        out: list[str] = []
        if req.mode != pb.CommandGetTopicsOfNamespace.NON_PERSISTENT:
            for cfg in self.broker.namespace_topics(req.namespace):
                if not self.security.can_see(me, cfg.name):
                    continue
                base = f"persistent://{cfg.name}"
                if cfg.partitions == 1:
                    out.append(base)
                else:
                    out.extend(f"{base}-partition-{p}" for p in range(cfg.partitions))
        filtered = False
        if req.topics_pattern:
            with contextlib.suppress(re.error):
                pattern = re.compile(req.topics_pattern)
                out = [
                    n
                    for n in out
                    if pattern.fullmatch(n) or pattern.fullmatch(n.split("://", 1)[1])
                ]
                filtered = True
        self.send(
            T(
                type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
                getTopicsOfNamespaceResponse=pb.CommandGetTopicsOfNamespaceResponse(
                    request_id=req.request_id, topics=out, filtered=filtered, changed=True
                ),
            )
        )

    # ------------------------------------------------------------------ schemas

    async def _schema_version(self, cfg: TopicConfig, schema: pb.Schema | None) -> int | None:
        if schema is None:
            return None
        info = SchemaInfo(
            int(schema.type),
            bytes(schema.schema_data),
            schema.name,
            {kv.key: kv.value for kv in schema.properties},
        )
        return await self.broker.ensure_schema(cfg.name, info)

    async def handle_get_schema(self, req: pb.CommandGetSchema) -> None:
        resp = pb.CommandGetSchemaResponse(request_id=req.request_id)
        try:
            t = self._topic_name(req.topic)
            self._allow(None, t, "read the schema of")
            version = int.from_bytes(req.schema_version, "big") if req.schema_version else None
            found = self.broker.topic_schema(t.weir_name, version)
            if found is None:
                raise UnknownTopicError(f"topic {t.url()} has no schema")
        except WeirError as err:
            resp.error_code = server_error(err)
            resp.error_message = err.message
        else:
            info, v = found
            resp.schema.CopyFrom(
                pb.Schema(
                    name=info.name,
                    schema_data=info.data,
                    type=info.type,  # type: ignore[arg-type]
                    properties=[pb.KeyValue(key=k, value=x) for k, x in info.properties.items()],
                )
            )
            resp.schema_version = v.to_bytes(8, "big")
        self.send(T(type=T.GET_SCHEMA_RESPONSE, getSchemaResponse=resp))

    async def handle_get_or_create_schema(self, req: pb.CommandGetOrCreateSchema) -> None:
        resp = pb.CommandGetOrCreateSchemaResponse(request_id=req.request_id)
        try:
            t = self._topic_name(req.topic)
            self._allow(Permission.PRODUCE, t, "set the schema of")
            cfg = await self._topic_for_use(t)
            v = await self._schema_version(cfg, req.schema)
        except WeirError as err:
            resp.error_code = server_error(err)
            resp.error_message = err.message
        else:
            resp.schema_version = (v or 0).to_bytes(8, "big")
        self.send(T(type=T.GET_OR_CREATE_SCHEMA_RESPONSE, getOrCreateSchemaResponse=resp))

    # ------------------------------------------------------------------ producers

    async def handle_producer(self, req: pb.CommandProducer) -> None:
        if req.producer_id in self.producers:
            raise BadRequestError(f"producer id {req.producer_id} is in use on this connection")
        if req.encrypted:
            raise names.NotServedError("encrypted producers are not served by weir")
        t = self._topic_name(req.topic)
        checks: list[tuple[object, str, str]] = []
        self._allow(Permission.PRODUCE, t, "write to", checks)
        cfg = await self._topic_for_use(t)
        partition, id_partition = self._partition(t, cfg)
        schema_version = await self._schema_version(
            cfg, req.schema if req.HasField("schema") else None
        )
        name = req.producer_name or f"weir-{self.broker.generation}-{next(_names)}"
        key = (cfg.name, partition, name)
        old = self.state.producers.get(key)
        if old is not None and not old.closed:
            if req.epoch == 0 and req.user_provided_producer_name:
                raise ProducerBusyError(
                    f"producer {name!r} is already connected to {t.url(t.partition)}"
                )
            old.release()  # the same producer reconnecting: its old session goes
        mode = AccessMode(int(req.producer_access_mode))
        p = PulsarProducer(
            req.producer_id,
            name,
            cfg.name,
            partition,
            id_partition,
            self.broker,
            self.send,
            self.broker.message_limit(cfg.name),
            schema_version=schema_version,
            checks=checks,
        )
        self.producers[req.producer_id] = p
        try:
            p.lease = self.broker.count_producer(cfg.name, name)
            if mode is AccessMode.WAIT_FOR_EXCLUSIVE:
                self.send(
                    T(
                        type=T.PRODUCER_SUCCESS,
                        producer_success=pb.CommandProducerSuccess(
                            request_id=req.request_id, producer_name=name, producer_ready=False
                        ),
                    )
                )

            def fenced(err: ProducerFencedError) -> None:
                self._producer_closed_by_server(p)

            p.claim = await self.broker.open_producer(
                cfg.name,
                name,
                mode,
                req.topic_epoch if req.HasField("topic_epoch") else None,
                fenced,
            )
            p.token = self.broker.register_writer(
                cfg.name, f"{name}\0{partition}", lambda: self._producer_closed_by_server(p)
            )
        except BaseException:
            p.release()
            self.producers.pop(req.producer_id, None)
            raise
        self.state.producers[key] = p

        def forget(q: PulsarProducer) -> None:
            if self.state.producers.get(key) is q:
                del self.state.producers[key]

        p.on_closed = forget
        last = None
        if self.broker.policies_of(cfg.name)["deduplication"]:
            last = self.broker.last_seq_no(cfg.name, partition, name)
        success = pb.CommandProducerSuccess(
            request_id=req.request_id,
            producer_name=name,
            last_sequence_id=-1 if last is None else last,
            producer_ready=True,
        )
        if mode.exclusive:
            success.topic_epoch = p.claim.epoch
        if schema_version is not None:
            success.schema_version = schema_version.to_bytes(8, "big")
        p.start()
        self.send(T(type=T.PRODUCER_SUCCESS, producer_success=success))

    def _producer_closed_by_server(self, p: PulsarProducer) -> None:
        """Fenced or superseded: the client hears CloseProducer (and reconnects, or gives up
        when it is fenced)."""
        if self.producers.get(p.producer_id) is not p:
            return
        del self.producers[p.producer_id]
        p.release()
        self.send(
            T(
                type=T.CLOSE_PRODUCER,
                close_producer=pb.CommandCloseProducer(producer_id=p.producer_id, request_id=0),
            )
        )

    def handle_send(self, send: pb.CommandSend, frame: Frame) -> None:
        p = self.producers.get(send.producer_id)
        if p is None or frame.metadata is None or frame.payload is None:
            self.send(
                T(
                    type=T.SEND_ERROR,
                    send_error=pb.CommandSendError(
                        producer_id=send.producer_id,
                        sequence_id=send.sequence_id,
                        error=pb.UnknownError,
                        message="no such producer on this connection"
                        if p is None
                        else "Send without a message",
                    ),
                )
            )
            return
        p.handle_send(send, frame.metadata, frame.payload)

    async def handle_close_producer(self, req: pb.CommandCloseProducer) -> None:
        p = self.producers.pop(req.producer_id, None)
        if p is not None:
            await p.drain()
            await p.stop()
        self.success(req.request_id)

    # ------------------------------------------------------------------ consumers

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

    async def _drop_consumer(self, c: ConsumerBase) -> None:
        if isinstance(c, PulsarConsumer):
            c.detach()
        elif isinstance(c, PulsarReader):
            await c.stop()

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
        actor = self.broker.actor(c.topic, c.partition)
        resp = pb.CommandGetLastMessageIdResponse(request_id=req.request_id)
        resp.last_message_id.CopyFrom(self._id_of(c, actor.end_offset - 1))
        if isinstance(c, PulsarConsumer) and c.sub is not None:
            mark = c.sub.parts[c.partition].cursor.mark_delete
        elif isinstance(c, PulsarReader):
            mark = c.position
        else:
            mark = actor.end_offset
        resp.consumer_mark_delete_position.CopyFrom(self._id_of(c, mark - 1))
        self.send(T(type=T.GET_LAST_MESSAGE_ID_RESPONSE, getLastMessageIdResponse=resp))

    def _id_of(self, c: ConsumerBase, offset: int) -> pb.MessageIdData:
        """The id of the message at ``offset`` as deliveries name it (entry -1 for none)."""
        found = stored_batch(self.broker, c.topic, c.partition, offset) if offset >= 0 else None
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
