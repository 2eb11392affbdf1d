"""The Kafka front: an asyncio TCP listener whose connections speak Kafka's protocol.

One `KafkaFront` per server: the listener, the consumer group `Coordinator`, the
idempotent producers' `Sequences` and the transactional ids (`KafkaTransactions`)
are shared by every connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING

from weir.broker.broker import Broker
from weir.broker.cluster.broker_mode import node_id
from weir.protocols.kafka.admin import NODE_ID
from weir.protocols.kafka.cluster_view import GroupCoordinators
from weir.protocols.kafka.group_api import members_reading
from weir.protocols.kafka.groups import Coordinator
from weir.protocols.kafka.idempotence import Sequences
from weir.protocols.kafka.sasl import MECHANISMS
from weir.protocols.kafka.transactions import KafkaTransactions
from weir.protocols.peer_offsets import PeerOffsets
from weir.security import Security
from weir.security.principal import Principal
from weir.security.tls import ServerTls

if TYPE_CHECKING:
    from weir.protocols.kafka.connection import KafkaConnection

log = logging.getLogger("weir.kafka")

DEFAULT_PORT = 9092


@dataclass(frozen=True)
class KafkaFrontConfig:
    """The ``[kafka]`` section."""

    enabled: bool = True
    listen: str = ""  # empty: the host of server.listen, port 9092
    advertised: str = ""  # empty: the address listened on
    max_request_bytes: int = 100 << 20
    initial_rebalance_delay_ms: int = 300


class KafkaFront:
    """Start with `await front.start(host, port)`; stop with `await front.stop()`."""

    def __init__(
        self,
        broker: Broker,
        security: Security,
        config: KafkaFrontConfig | None = None,
        tls: ServerTls | None = None,
    ) -> None:
        self.broker = broker
        self.security = security
        self.config = config or KafkaFrontConfig()
        self.tls = tls
        self.coordinator = Coordinator(
            initial_rebalance_delay_ms=self.config.initial_rebalance_delay_ms
        )
        self.sequences = Sequences()
        self.transactions = KafkaTransactions(broker)
        # a cluster's offsets of partitions other brokers own (asked with this broker's token)
        self.peers = PeerOffsets(security.peers, tls.peer_credentials() if tls else None)
        self.coordinators = GroupCoordinators(broker)  # a cluster's group -> its broker
        self.stopping = False
        self.host = ""
        self.port = 0
        self._server: asyncio.Server | None = None
        self._connections: set[KafkaConnection] = set()
        c = broker.config
        # one id per cluster: every broker of a replicated cluster answers the same one
        where = (
            f"{c.cluster_zookeeper}{c.cluster_root}"
            if c.storage_mode == "replicated"
            else str(c.data_dir.resolve())
        )
        digest = hashlib.sha256(where.encode()).hexdigest()
        self.cluster_id = f"weir-{digest[:16]}"

    @property
    def node_id(self) -> int:
        """This broker's Kafka node id: 0 alone, derived from the broker id in a cluster."""
        cluster = self.broker.cluster
        return NODE_ID if cluster is None else node_id(cluster.broker_id)

    @property
    def advertised(self) -> tuple[str, int]:
        """The (host, port) clients are told to connect to (Metadata, FindCoordinator)."""
        if self.config.advertised:
            host, _, port = self.config.advertised.rpartition(":")
            return host.strip("[]"), int(port)
        host = self.host
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        return host, self.port

    def sasl_mechanisms(self) -> list[str]:
        return list(MECHANISMS)

    def certificate_principal(self, transport: asyncio.BaseTransport) -> Principal | None:
        """The principal of a verified client certificate (mTLS), else None."""
        obj = transport.get_extra_info("ssl_object")
        if obj is None:
            return None
        cert = obj.getpeercert()
        if not cert:
            return None
        for rdn in cert.get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    return Principal(str(value), "mtls")
        return None

    def _ssl_context(self) -> ssl.SSLContext | None:
        return None if self.tls is None else self.tls.ssl_context()

    async def start(self, host: str, port: int) -> None:
        from weir.protocols.kafka.connection import KafkaConnection

        self.coordinator.start()
        self.broker.consumer_readers.add_source(
            "Kafka group member",
            lambda topic, group: members_reading(self.coordinator, topic, group),
        )
        self._server = await asyncio.get_running_loop().create_server(
            lambda: KafkaConnection(self),
            host,
            port,
            ssl=self._ssl_context(),
            reuse_address=True,
        )
        sock = self._server.sockets[0].getsockname()
        self.host, self.port = host, int(sock[1])
        log.info("kafka listener started", extra={"endpoint": f"{host}:{self.port}"})

    def connection_opened(self, conn: KafkaConnection) -> None:
        self._connections.add(conn)

    def connection_closed(self, conn: KafkaConnection) -> None:
        self._connections.discard(conn)

    async def stop(self) -> None:
        self.stopping = True
        if self._server is not None:
            self._server.close()
        conns = list(self._connections)
        for conn in conns:
            conn.close()
        if conns:
            await asyncio.wait([c.closed for c in conns], timeout=5)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None
        self.broker.consumer_readers.remove_source("Kafka group member")
        await self.coordinator.close()
        await self.peers.close()
