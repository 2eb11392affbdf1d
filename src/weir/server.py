"""The weir server: one broker, one grpc.aio server, every protocol front on one port."""

from __future__ import annotations

import asyncio
import errno
import importlib
import logging
import signal
import socket
import sys
from collections.abc import Callable

import grpc

from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.broker.observer import BrokerObserver
from weir.config import CLUSTER_SECRET_NEEDED, AuthConfig, cluster_secret_missing
from weir.errors import BadRequestError
from weir.protocols.kafka.front import DEFAULT_PORT as KAFKA_PORT
from weir.protocols.kafka.front import KafkaFront, KafkaFrontConfig
from weir.protocols.native.service import NativeService
from weir.protocols.native.service import add_to_server as add_native
from weir.protocols.native.tcp_front import NativeTcpFront
from weir.protocols.pulsar.front import PulsarFront
from weir.security import Security
from weir.security.tls import ServerTls

log = logging.getLogger("weir.server")

DEFAULT_LISTEN = "127.0.0.1:2136"
MAX_MESSAGE_BYTES = 256 << 20

# The YDB SDK pings every 10 s even with no call in flight; without these the
# server answers GOAWAY too_many_pings and the SDK reconnects forever.
GRPC_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 1000),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.so_reuseport", 0),  # a second server on the same port must fail, not share it
]

FrontInstaller = Callable[[grpc.aio.Server, Broker, "Server"], None]


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise BadRequestError(f"listen address must be HOST:PORT, got {listen!r}")
    return host.strip("[]"), int(port)


def check_port_free(host: str, port: int) -> None:
    """Raise OSError("cannot listen on ...") when no address of ``host`` can bind ``port``.

    gRPC answers a taken port with a raw ``E... add_port.cc`` line on stderr and a
    vague error; this asks the kernel first, the way gRPC binds (SO_REUSEADDR, no
    SO_REUSEPORT), and names the reason. gRPC still binds for real afterwards.
    """
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    first: OSError | None = None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                first = first or exc
                continue
        return  # one address binds: gRPC serves on the ones it can
    reason = first.strerror if first is not None and first.strerror else "not available"
    if first is not None and first.errno == errno.EADDRINUSE:
        reason = "address already in use (is another server running there?)"
    raise OSError(f"cannot listen on {host}:{port}: {reason}")


def kafka_address(config: KafkaFrontConfig, listen_host: str) -> tuple[str, int]:
    """Where the Kafka listener binds: ``config.listen``, else port 9092 of the listen host."""
    if config.listen:
        return parse_listen(config.listen)
    return listen_host, KAFKA_PORT


def _install_native(server: grpc.aio.Server, broker: Broker, srv: Server) -> None:
    def tcp_port() -> int:
        return srv.native_tcp.port if srv.native_tcp is not None else 0

    add_native(NativeService(broker, srv.stopping_event, srv.security, tcp_port), server)


def default_fronts() -> list[FrontInstaller]:
    fronts: list[FrontInstaller] = [_install_native]
    try:
        ydb_front = importlib.import_module("weir.protocols.ydb.front")
    except ImportError:  # pragma: no cover - the YDB front ships with weir
        log.warning("YDB Topic API front not available")
    else:
        fronts.append(ydb_front.install)
    return fronts


class Server:
    """Start with `await Server(...).start()`; stop with `await server.stop()`."""

    def __init__(
        self,
        config: BrokerConfig,
        listen: str = DEFAULT_LISTEN,
        fronts: list[FrontInstaller] | None = None,
        observer: BrokerObserver | None = None,
        tls: ServerTls | None = None,
        auth: AuthConfig | None = None,
        pulsar_listen: str | None = None,
        pulsar_max_message_size: int = 5 << 20,
        pulsar_batch_index_ack: bool = False,
        pulsar_keep_alive_s: float = 30.0,
        kafka: KafkaFrontConfig | None = None,
        native_tcp_listen: str | None = None,
    ) -> None:
        self.config = config
        # the native protocol's framed TCP port (None: off); started with the broker
        self.native_tcp_listen = native_tcp_listen
        self.native_tcp: NativeTcpFront | None = None
        # the Pulsar port (None: off); started with the broker, stopped before it
        self.pulsar_listen = pulsar_listen
        self.pulsar_max_message_size = pulsar_max_message_size
        self.pulsar_batch_index_ack = pulsar_batch_index_ack
        self.pulsar_keep_alive_s = pulsar_keep_alive_s
        self.pulsar: PulsarFront | None = None
        # the Kafka listener (off unless configured); started with the broker, stopped before it
        self.kafka_config = kafka or KafkaFrontConfig(enabled=False)
        self.kafka: KafkaFront | None = None
        self.tls = tls  # None: plain text
        self.auth = auth or AuthConfig()
        self.observer = observer
        self.host, self.port = parse_listen(listen)
        self.fronts = default_fronts() if fronts is None else fronts
        self.broker: Broker | None = None
        self._security: Security | None = None
        self._grpc: grpc.aio.Server | None = None
        self.stopping = False
        # Set when stop() begins: open streams finish their acks and end at once instead
        # of holding the shutdown for the whole grace period.
        self.stopping_event = asyncio.Event()

    @property
    def security(self) -> Security:
        """Authentication shared by every front (set up once the broker is open)."""
        if self._security is None:
            raise RuntimeError("the server is not started")
        return self._security

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        """Bind the port, then open the data: a start that cannot listen leaves the data alone.

        Opening the data directory raises its generation (fencing every writer of the
        previous one), so it must not happen for a start that then fails on the port.
        """
        # Short GIL switch interval: the group-commit thread gets the GIL back quickly
        # after its fsync instead of waiting up to 5 ms behind the event loop.
        sys.setswitchinterval(0.0005)
        cfg = self.config
        if cluster_secret_missing(cfg.storage_mode, cfg.allow_anonymous, self.auth.cluster_secret):
            raise ValueError(CLUSTER_SECRET_NEEDED)
        check_port_free(self.host, self.port)  # a clear error, and no raw gRPC log line
        server = grpc.aio.server(options=GRPC_OPTIONS)
        try:
            address = f"{self.host}:{self.port}"
            if self.tls is None:
                port = server.add_insecure_port(address)
            else:
                port = server.add_secure_port(address, self.tls.grpc_credentials())
        except RuntimeError as exc:
            await server.stop(None)
            raise OSError(f"cannot listen on {self.host}:{self.port}: {exc}") from None
        if port == 0:
            await server.stop(None)
            raise OSError(
                f"cannot listen on {self.host}:{self.port}: address in use or not available"
            )
        self.port = port
        try:
            self.broker = await Broker.open(
                self.config, observer=self.observer, endpoints={"native": self.endpoint}
            )
            self._security = Security.for_broker(
                self.broker,
                superusers=self.auth.superusers,
                jwt_secret=self.auth.jwt_secret,
                jwt_public_key_file=self.auth.jwt_public_key_file,
                jwt_audience=self.auth.jwt_audience,
                cluster_secret=self.auth.cluster_secret,
            )
            for install in self.fronts:
                install(server, self.broker, self)
            if self.kafka_config.enabled:
                host, port = kafka_address(self.kafka_config, self.host)
                self.kafka = KafkaFront(self.broker, self._security, self.kafka_config, self.tls)
                try:
                    await self.kafka.start(host, port)
                except OSError as exc:
                    raise OSError(
                        f"cannot listen on {host}:{port} (Kafka): {exc.strerror or exc}"
                    ) from None
            if self.pulsar_listen is not None:
                host, port = parse_listen(self.pulsar_listen)
                self.pulsar = PulsarFront(
                    self.broker,
                    self._security,
                    host,
                    port,
                    tls=self.tls,
                    max_message_size=self.pulsar_max_message_size,
                    batch_index_ack=self.pulsar_batch_index_ack,
                    keep_alive_s=self.pulsar_keep_alive_s,
                    stopping=self.stopping_event,
                )
                await self.pulsar.start()
            if self.native_tcp_listen is not None:
                host, port = parse_listen(self.native_tcp_listen)
                self.native_tcp = NativeTcpFront(
                    self.broker,
                    self._security,
                    host,
                    port,
                    tls=self.tls,
                    stopping=self.stopping_event,
                )
                await self.native_tcp.start()
            if self.broker.cluster is not None:  # where other brokers send clients
                await self.broker.cluster.publish(self._front_endpoints())
            await server.start()
        except BaseException:
            if self.native_tcp is not None:
                await self.native_tcp.stop()
            if self.pulsar is not None:
                await self.pulsar.stop()
            await server.stop(None)
            if self.kafka is not None:
                await self.kafka.stop()
                self.kafka = None
            if self.broker is not None:
                await self.broker.close()
            raise
        self._grpc = server
        log.debug(
            "grpc server started",
            extra={"endpoint": self.endpoint, "data_dir": self.config.data_dir},
        )

    def _front_endpoints(self) -> dict[str, str]:
        """The Kafka and Pulsar addresses clients are told (cluster mode: the owner's)."""
        out: dict[str, str] = {}
        if self.kafka is not None:
            host, port = self.kafka.advertised
            out["kafka"] = f"{host}:{port}"
        if self.pulsar is not None:
            out["pulsar"] = self.pulsar.url
        return out

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting calls, give streams `grace` seconds, finish commits, close LMDB."""
        self.stopping = True
        self.stopping_event.set()
        if self.kafka is not None:
            await self.kafka.stop()
            self.kafka = None
        if self.pulsar is not None:
            await self.pulsar.stop()
        if self.native_tcp is not None:
            await self.native_tcp.stop(grace)
        if self._grpc is not None:
            await self._grpc.stop(grace)
            self._grpc = None
        if self._security is not None and self._security.shared is not None:
            self._security.shared.stop()  # no more reads of the cluster's users and grants
        if self.broker is not None:
            await self.broker.close()

    async def wait_closed(self) -> None:
        if self._grpc is not None:
            await self._grpc.wait_for_termination()


async def serve(
    config: BrokerConfig,
    listen: str = DEFAULT_LISTEN,
    ready: Callable[[Server], None] | None = None,
) -> None:
    """Run until SIGTERM or SIGINT, then shut down cleanly."""
    server = Server(config, listen)
    await server.start()
    if ready is not None:
        ready(server)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await server.stop()
