"""The state of one Pulsar connection, shared by its command handlers (one mixin per
concept: `handshake`, `lookup_commands`, `schema_commands`, `producer_commands`,
`consumer_commands`; `connection` assembles them): its producers and consumers by id,
its principal, the replies it writes, and the topic and permission checks every
command makes. A handler never touches a frame (`codec` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from weir.broker.broker import Broker
from weir.broker.schemas import SchemaInfo
from weir.broker.topics import TopicConfig
from weir.errors import (
    BadRequestError,
    UnknownTopicError,
    WeirError,
)
from weir.protocols.pulsar import names
from weir.protocols.pulsar import pulsar_api_pb2 as pb
from weir.protocols.pulsar.codec import FrameDecoder, encode_command
from weir.protocols.pulsar.consumers import (
    ConsumerBase,
    EntryCache,
    PulsarConsumer,
    PulsarReader,
)
from weir.protocols.pulsar.errors import as_weir_error, server_error
from weir.protocols.pulsar.producers import PulsarProducer
from weir.security import Security
from weir.security.authenticator import Credential
from weir.security.grants import Permission
from weir.security.principal import ANONYMOUS, Principal, current_checks

log = logging.getLogger("weir.pulsar")

T = pb.BaseCommand
# Bytes the transport may hold before frames wait in the connection's own queue. asyncio's
# socket transport copies what it cannot send at once into one bytearray and shifts the
# rest down after every send: a delivery of megabytes written in one go is copied several
# times over. Queued frames are not copied; they go to the transport as it drains.
WRITE_HIGH = 256 << 10


@dataclass(frozen=True)
class FrontSettings:
    """What every connection of a Pulsar listener shares."""

    broker_url: str  # pulsar://host:port or pulsar+ssl://host:port, as lookups answer it
    max_message_size: int
    tls: bool = False
    # Pulsar's acknowledgmentAtBatchIndexLevelEnabled: frames carry ack sets (see consumers.py)
    batch_index_ack: bool = False
    # Pulsar's keepAliveIntervalSeconds: Ping a silent client, close one silent after it
    keep_alive_s: float = 30.0


class FrontState:
    """State shared by the connections of one listener: producers by name (one live
    producer per name and partition), the entry cache, reader positions moved by a seek."""

    def __init__(self) -> None:
        self.producers: dict[tuple[str, int, str], PulsarProducer] = {}
        self.cache = EntryCache()
        self.seeks: dict[tuple[str, int, str], int] = {}


class ConnectionState:
    """What every command handler of a connection shares: its fields, the replies it
    writes, its tasks, and the questions about topics and permissions each command asks."""

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
        self._queued: deque[bytes] = deque()  # frames waiting for the transport to drain
        self.queued_bytes = 0
        self.heard = False  # a frame came since the keep-alive last looked
        self._flusher: asyncio.Task[None] | None = None
        with contextlib.suppress(AttributeError, NotImplementedError):
            writer.transport.set_write_buffer_limits(high=WRITE_HIGH, low=WRITE_HIGH // 4)
        self._stop_watching: Callable[[], None] | None = None

    # ------------------------------------------------------------------ transport

    def send(self, cmd: pb.BaseCommand) -> None:
        self.write(encode_command(cmd))

    def write(self, data: bytes) -> None:
        """Write ``data`` after everything written before it: to the transport while it
        holds less than `WRITE_HIGH`, else into the queue that `_flush` empties."""
        if self._closed:
            return
        if self._queued:
            self._queued.append(data)
            self.queued_bytes += len(data)
        elif self.writer.transport.get_write_buffer_size() >= WRITE_HIGH:
            self._queued.append(data)
            self.queued_bytes += len(data)
            self._flusher = asyncio.get_running_loop().create_task(self._flush())
        else:
            self.writer.write(data)

    async def _flush(self) -> None:
        queued = self._queued
        transport = self.writer.transport
        try:
            while queued and not self._closed:
                await self.writer.drain()  # until the transport is below its low mark
                while queued and transport.get_write_buffer_size() < WRITE_HIGH:
                    data = queued.popleft()
                    self.queued_bytes -= len(data)
                    self.writer.write(data)
        except (ConnectionError, RuntimeError):
            queued.clear()  # the connection is gone: its read loop closes it
            self.queued_bytes = 0
        finally:
            self._flusher = None

    async def drained(self) -> None:
        """Return once the queued frames are with the transport (or the connection ended)."""
        if self._flusher is not None:
            await asyncio.wait({self._flusher})

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queued.clear()
        self.queued_bytes = 0
        if self._flusher is not None:
            self._flusher.cancel()
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

    def _allow(
        self,
        permission: Permission | None,
        topic: names.PulsarTopic,
        what: str,
        checks: list[tuple[object, str, str]] | None = None,
        subscription: str = "",
    ) -> None:
        """Ask `security` (never decided here); a stream's ``checks`` remember the question,
        asked again when users or grants change. ``subscription``: a durable subscription's
        name, a consumer group that needs a group grant too."""
        token = current_checks.set(checks if checks is not None else [])
        try:
            principal = self.principal or ANONYMOUS
            self.security.authorize(principal, permission, topic.weir_name, what)
            if subscription:
                self.security.authorize_group(principal, subscription, what)
        finally:
            current_checks.reset(token)

    # ------------------------------------------------------------------ lookup

    def _topic_name(self, name: str) -> names.PulsarTopic:
        return names.parse(name)

    def _known_topic(self, t: names.PulsarTopic) -> TopicConfig | None:
        """The topic ``t`` names if it exists (of the kind its domain says, else
        TopicKindError); None when there is none."""
        try:
            cfg = self.broker.topic(t.weir_name)
        except UnknownTopicError:
            return None
        return names.check_kind(t, cfg)

    async def _topic_for_use(self, t: names.PulsarTopic, create: bool = True) -> TopicConfig:
        """The topic ``t`` names; a missing one is created (``create``, and the namespace's
        auto-creation policy allowing) of the kind its domain says."""
        cfg = self._known_topic(t)
        if cfg is not None:
            return cfg
        if not create:
            raise UnknownTopicError(f"topic {t.url()} does not exist")
        return names.check_kind(t, await self.broker.topic_for_use(t.weir_name, kind=t.kind))

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

    async def _drop_consumer(self, c: ConsumerBase) -> None:
        if isinstance(c, PulsarConsumer):
            c.detach()
        elif isinstance(c, PulsarReader):
            await c.stop()
