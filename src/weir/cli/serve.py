"""`weir serve`: the server with its config, logs, metrics endpoint, web console and clean
shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import ipaddress
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import lmdb
import typer

from weir import config as configuration
from weir import gc_tuning, logs
from weir.broker.observer import BrokerObserver
from weir.cli.common import CliError
from weir.errors import DataDirLockedError, WeirError
from weir.malloc_tuning import keep_freed_memory
from weir.task_stacks import task_stacks

if TYPE_CHECKING:
    from aiohttp import web

    from weir.security.tls import ServerTls

# aiohttp and weir.security (JWTs, cryptography) load in `serve` only: every other
# command imports this module too (`weir --help` lists serve), and they would double
# the start-up time of each of them.

log = logging.getLogger("weir.serve")


class ObserverFanout(BrokerObserver):
    """Hands every broker event to each observer in turn (metrics, then logs)."""

    def __init__(self, *observers: BrokerObserver) -> None:
        self.observers = observers

    def on_write(self, topic: str, partition: int, records: int, nbytes: int, skipped: int) -> None:
        for o in self.observers:
            o.on_write(topic, partition, records, nbytes, skipped)

    def on_read(self, topic: str, partition: int, nbytes: int) -> None:
        for o in self.observers:
            o.on_read(topic, partition, nbytes)

    def on_refused(self, topic: str, partition: int, reason: str) -> None:
        for o in self.observers:
            o.on_refused(topic, partition, reason)

    def on_commit(self, jobs: int, nbytes: int, seconds: float) -> None:
        for o in self.observers:
            o.on_commit(jobs, nbytes, seconds)

    def on_consumer_commit(self, topic: str, partition: int, consumer: str, offset: int) -> None:
        for o in self.observers:
            o.on_consumer_commit(topic, partition, consumer, offset)

    def on_compaction(self, topic: str, partition: int, scanned: int, kept: int) -> None:
        for o in self.observers:
            o.on_compaction(topic, partition, scanned, kept)

    def on_non_persistent(
        self, topic: str, partition: int, delivered: int, dropped: int, nbytes: int
    ) -> None:
        for o in self.observers:
            o.on_non_persistent(topic, partition, delivered, dropped, nbytes)


def announce(cfg: configuration.Config, text: str, **fields: object) -> None:
    """A line for the person (and the test) watching stderr; in JSON mode a log event,
    whose ``fields`` are keys of its object."""
    if cfg.log.json:
        log.info(text, extra=fields)
    else:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


def print_tasks() -> None:
    """`kill -USR2 PID`: every asyncio task's stack to stderr (SIGUSR1 shows the threads)."""
    print(task_stacks(), file=sys.stderr, flush=True)


async def run(cfg: configuration.Config) -> None:
    """Serve until SIGTERM or SIGINT, then stop accepting, finish commits and close the data."""
    from prometheus_client import disable_created_metrics

    from weir.metrics import MetricsEndpoint, ServerMetrics
    from weir.protocols.kafka.front import KafkaFrontConfig
    from weir.server import Server

    disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created: they double the output
    metrics = ServerMetrics()
    tls = server_tls(cfg.tls)
    server = Server(
        cfg.broker,
        cfg.listen,
        observer=ObserverFanout(metrics.observer, logs.LogObserver()),
        tls=tls,
        auth=cfg.auth,
        pulsar_listen=cfg.pulsar_listen,
        pulsar_max_message_size=cfg.pulsar.max_message_size,
        pulsar_batch_index_ack=cfg.pulsar.batch_index_ack,
        pulsar_keep_alive_s=cfg.pulsar.keep_alive_s,
        native_tcp_listen=cfg.native_tcp_listen,
        kafka=KafkaFrontConfig(
            enabled=cfg.kafka.enabled,
            listen=cfg.kafka_listen or "",
            advertised=cfg.kafka.advertised_listener,
        ),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        if stop.is_set():
            log.warning("second %s: exiting without waiting", signal.Signals(signum).name)
            os._exit(128 + signum)  # LMDB keeps every acknowledged commit across this
        log.info("%s received: shutting down", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    if tls is not None:
        loop.add_signal_handler(signal.SIGHUP, tls.reload)  # new certificate, same process
    loop.add_signal_handler(signal.SIGUSR2, print_tasks)  # what every coroutine awaits

    def alive() -> bool:
        """False once the broker closed on its own or its group-commit thread died."""
        broker = server.broker
        if broker is None or server.stopping:
            return True
        return not broker.closed and broker.store.committer.alive

    endpoint = None
    console = None
    admin = None
    http_listen = cfg.http_listen
    if http_listen is not None:
        if cfg.console.enabled:
            from weir.console import Console

            console = Console(metrics, http_listen.rpartition(":")[0])
        if cfg.http.admin:
            from weir.protocols.http.admin import PulsarAdmin

            admin = PulsarAdmin(lambda: server.broker, lambda: server.security)

        def mount(app: web.Application) -> None:
            if admin is not None:
                admin.mount(app)
            if console is not None:
                console.mount(app)

        # up before recovery, so /healthz answers and /readyz says "not yet" while it runs
        endpoint = MetricsEndpoint(
            metrics,
            http_listen,
            alive,
            mount=mount,
            ssl_context=tls.ssl_context() if tls is not None else None,
            pages=[
                *(["/admin/v2"] if admin is not None else []),
                *(["/console"] if console is not None else []),
            ],
        )
        await endpoint.start()
    try:
        await server.start()
        if console is not None:  # before ready: no console page is served before this is set
            console.security = server.security
        metrics.broker = server.broker
        metrics.auth_failures = server.security.throttle.failures
        metrics.ready = True
        if endpoint is not None:
            announce(cfg, f"weir metrics on {endpoint.url}/metrics", url=f"{endpoint.url}/metrics")
        if console is not None and endpoint is not None:
            console.listeners.clients = server.endpoint
            console.listeners.http = endpoint.url
            console.listeners.data_dir = str(cfg.broker.data_dir)
            announce(cfg, f"weir console on {endpoint.url}/console", url=f"{endpoint.url}/console")
        if cfg.broker.allow_anonymous:
            if insecure_bind(cfg):
                announce(
                    cfg,
                    f"weir: WARNING: no authentication on {server.endpoint} (--insecure): anyone "
                    "who reaches this port may read, write and drop every topic",
                    open=True,
                    insecure=True,
                )
            else:
                announce(
                    cfg,
                    "weir: no authentication (auth.allow_anonymous = true): every client may do "
                    "everything, so weir listens on loopback only (see docs/security.md)",
                    open=True,
                    insecure=False,
                )
        elif not cfg.auth.superusers:
            announce(
                cfg,
                "weir: grants are not checked (auth.superusers is empty): every authenticated "
                "principal may do everything",
                authorization=False,
            )
        if server.pulsar is not None:
            announce(
                cfg,
                f"weir Pulsar protocol on {server.pulsar.url}",
                pulsar=server.pulsar.url,
            )
        if server.native_tcp is not None:
            announce(
                cfg,
                f"weir native TCP on {server.native_tcp.endpoint}",
                native_tcp=server.native_tcp.endpoint,
            )
        if admin is not None and endpoint is not None:
            announce(
                cfg,
                f"weir Pulsar admin REST on {endpoint.url}/admin/v2",
                admin=f"{endpoint.url}/admin/v2",
            )
        security = ""
        if tls is not None:
            security = ", TLS" + (" with client certificates" if tls.mutual else "")
        if server.kafka is not None:
            kafka_at = f"{server.kafka.host}:{server.kafka.port}"
            announce(cfg, f"weir kafka listening on {kafka_at}", kafka_endpoint=kafka_at)
        announce(
            cfg,
            f"weir listening on {server.endpoint}, data in {cfg.broker.data_dir}{security}",
            endpoint=server.endpoint,
            data_dir=str(cfg.broker.data_dir),
            tls=tls is not None,
        )
        gc_tuning.settle()  # startup's objects out of every later collection: weir.gc_tuning
        await stop.wait()
        metrics.ready = False
        await server.stop(cfg.shutdown_grace_s)
    finally:
        if endpoint is not None:
            await endpoint.stop()
    log.info("stopped")


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one (127.0.0.0/8, ::1)."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(infos) and all(
        ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]).is_loopback for info in infos
    )


def insecure_bind(cfg: configuration.Config) -> bool:
    """An open server (no authentication) on an address other machines can reach (its
    gRPC, Pulsar, Kafka, HTTP or native TCP port)."""
    listens = [
        cfg.listen,
        cfg.pulsar_listen,
        cfg.kafka_listen,
        cfg.http_listen,
        cfg.native_tcp_listen,
    ]
    hosts = {a.rpartition(":")[0] for a in listens if a is not None}
    return cfg.broker.allow_anonymous and not all(is_loopback(h) for h in hosts)


def server_tls(cfg: configuration.TlsConfig) -> ServerTls | None:
    """The listeners' TLS from the ``[tls]`` section (None: plain text); CliError if unusable."""
    if cfg.cert_file is None or cfg.key_file is None:
        return None
    from weir.security.tls import ServerTls, TlsConfigError, TlsFiles

    files = TlsFiles(cfg.cert_file, cfg.key_file, cfg.client_ca_file, cfg.peer_ca_file)
    try:
        return ServerTls(files)
    except TlsConfigError as err:
        raise CliError(str(err), 2) from None


def _locked_message(data_dir: Path) -> str:
    pid = ""
    with contextlib.suppress(OSError):
        pid = (data_dir / "kv" / "weir.lock").read_text().strip()
    holder = f" (pid {pid})" if pid.isdigit() else ""
    return f"data directory {data_dir} is in use by another weir server{holder}"


def serve(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            envvar="WEIR_CONFIG",
            help="TOML config file (see docs/configuration.md).",
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Directory holding the data (config: server.data_dir)."),
    ] = None,
    listen: Annotated[
        str | None, typer.Option("--listen", help="HOST:PORT for clients (config: server.listen).")
    ] = None,
    metrics_listen: Annotated[
        str | None,
        typer.Option(
            "--metrics-listen",
            help="Serve /metrics, /healthz, /readyz and the web console (/console) on HOST:PORT.",
        ),
    ] = None,
    log_level: Annotated[
        str | None, typer.Option("--log-level", help="debug, info, warning or error.")
    ] = None,
    log_json: Annotated[
        bool | None, typer.Option("--log-json/--log-text", help="Log lines as JSON or as text.")
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            help="Allow a non-loopback --listen without authentication (anyone who reaches "
            "the port may do everything).",
        ),
    ] = False,
) -> None:
    """Start the server with its embedded storage (SIGTERM or Ctrl-C stops it cleanly)."""
    # `kill -USR1 PID` prints every thread's stack to stderr: what a server that hangs
    # (at start, or later) is doing, without stopping it (docs/observability.md).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    overrides: dict[str, tuple[object, str]] = {}
    if data_dir is not None:
        overrides["server.data_dir"] = (str(data_dir), "--data-dir")
    if listen is not None:
        overrides["server.listen"] = (listen, "--listen")
    if metrics_listen is not None:
        overrides["metrics.enabled"] = (True, "--metrics-listen")
        overrides["metrics.listen"] = (metrics_listen, "--metrics-listen")
    if log_level is not None:
        overrides["log.level"] = (log_level, "--log-level")
    if log_json is not None:
        overrides["log.json"] = (log_json, "--log-json")
    cfg = configuration.load(config, env=os.environ, overrides=overrides)
    if insecure_bind(cfg) and not insecure:
        raise CliError(
            f"refusing to listen on {cfg.listen} without authentication: anyone who reaches it "
            "could read, write and drop every topic. Turn authentication on "
            "(auth.allow_anonymous = false with users, JWTs or client certificates; see "
            "docs/security.md), listen on 127.0.0.1, or pass --insecure",
            2,
        )
    logs.configure(cfg.log.level, cfg.log.json)
    from weir.security import audit

    try:
        audit.configure(cfg.log.audit_file)
    except OSError as err:
        raise CliError(
            f"cannot write the audit log {cfg.log.audit_file}: {err.strerror}", 2
        ) from None
    data = cfg.broker.data_dir
    keep_freed_memory()  # large writes reuse freed buffers: see weir.malloc_tuning
    try:
        asyncio.run(run(cfg))
    except DataDirLockedError:
        raise CliError(_locked_message(data)) from None
    except WeirError as err:
        raise CliError(err.message) from None
    except lmdb.Error as err:
        raise CliError(f"cannot open data directory {data}: {err}") from None
    except OSError as err:
        if err.strerror is None:  # ours: "cannot listen on ..." / "cannot serve metrics on ..."
            raise CliError(str(err)) from None
        raise CliError(f"cannot open data directory {data}: {err.strerror}") from None
