"""The client's side of the wire: one gRPC channel, typed errors, backoff."""

from __future__ import annotations

import asyncio
import random
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from typing import Any, TypeVar

import grpc

from weir.client.credentials import AuthedCall, CredentialsArg, TokenSource, as_credentials, bearer
from weir.client.owners import Owners
from weir.client.tcp_call import READ, WRITE, TcpMethod, TcpStreamCall
from weir.client.tls import TlsArg, as_tls
from weir.errors import (
    BadRequestError,
    UnavailableError,
    WeirError,
    WeirTimeoutError,
    error_from_code,
)
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native import weir_pb2_grpc as pb_grpc
from weir.protocols.native import wire
from weir.protocols.native.framing import DEFAULT_PORT as DEFAULT_TCP_PORT
from weir.protocols.native.status import CODE_KEY, code_from_grpc

T = TypeVar("T")

TRANSPORTS = ("grpc", "tcp")
TCP_OFF = "native_tcp.enabled = false"

CHANNEL_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", 256 << 20),
    ("grpc.max_send_message_length", 256 << 20),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.enable_retries", 0),
    # gRPC's own reconnect backoff (1 s growing to 120 s by default) would keep a writer
    # from a restarted server long after it is back; the SDK backs off on its own, and a
    # stream waiting to reconnect goes as soon as the channel is back (Connection.pause),
    # so this bound is how late a client notices a server that is back (Kafka: 1 s too).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


def parse_endpoint(endpoint: str) -> tuple[str, bool]:
    """``(host:port, tls)`` from "host:port", "grpc://host:port" or "grpcs://host:port"."""
    if not isinstance(endpoint, str) or not endpoint:
        raise BadRequestError(f"endpoint must be 'host:port', got {endpoint!r}")
    tls = False
    for scheme, secure in (("grpc://", False), ("weir://", False), ("grpcs://", True)):
        if endpoint.startswith(scheme):
            endpoint = endpoint[len(scheme) :]
            tls = secure
    endpoint = endpoint.rstrip("/")
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise BadRequestError(f"endpoint must be 'host:port', got {endpoint!r}")
    return endpoint, tls


def split_endpoints(endpoint: str | Sequence[str]) -> list[str]:
    """The bootstrap endpoints a client was given: "h1:p1,h2:p2" or a list of them (a
    cluster's brokers: the first is the client's own, the others are asked when it cannot
    be reached); one "host:port" is a list of one. Every one parsed as `parse_endpoint`,
    with the same TLS (a ``grpcs://`` scheme on one of them applies to all)."""
    if isinstance(endpoint, str):
        items = [e.strip() for e in endpoint.split(",")] if "," in endpoint else [endpoint]
    elif isinstance(endpoint, Sequence) and endpoint:
        items = list(endpoint)
    else:
        items = [endpoint]  # type: ignore[list-item]  # parse_endpoint names the bad value
    out: list[str] = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def normalize_endpoint(endpoint: str) -> str:
    """Accept "host:port", "grpc://host:port" or "grpcs://host:port"; answer "host:port"."""
    return parse_endpoint(endpoint)[0]


def error_from_rpc(exc: grpc.aio.AioRpcError | grpc.RpcError) -> WeirError:
    """The typed error a failed call stands for (the server's code, else one from the status)."""
    code = None
    try:
        for k, v in exc.trailing_metadata() or ():
            if k == CODE_KEY:
                code = v if isinstance(v, str) else v.decode()
    except Exception:
        code = None
    status = exc.code()
    details = exc.details() or str(status)
    if code is None:
        code = code_from_grpc(status)
        if code == "UNAVAILABLE":
            details = f"cannot reach the weir server: {details}"
    return error_from_code(code, details)


class Backoff:
    """Exponential backoff with jitter: 50 ms doubling up to 5 s."""

    def __init__(self, first: float = 0.05, cap: float = 5.0) -> None:
        self.first = first
        self.cap = cap
        self.attempt = 0

    def next_delay(self) -> float:
        d: float = min(self.cap, self.first * (2.0**self.attempt))
        self.attempt += 1
        return d * (0.5 + random.random() / 2)

    def reset(self) -> None:
        self.attempt = 0


# A first contact closed before any answer is a TLS mismatch, or a proxy / load balancer
# whose server is (re)starting: only when it lasts this long is it reported as a mismatch.
CLOSED_PATIENCE_S = 10.0


def closed_before_answer(err: WeirError) -> bool:
    """``err`` says the server side closed the connection before any answer."""
    text = err.message.lower()
    return (
        isinstance(err, UnavailableError)
        and tls_failure(text) is None
        and ("socket closed" in text or "connection reset" in text)
    )


def cannot_connect(endpoint: str, err: WeirError, tls: bool = False) -> WeirError | None:
    """The error to fail fast with when ``err`` says nothing listens at ``endpoint`` (or its
    host name does not resolve, or TLS does not agree); None for other failures, which are
    worth retrying. ``tls``: whether this client speaks TLS."""
    if not isinstance(err, UnavailableError):
        return None
    text = err.message.lower()
    failure = tls_failure(text)
    if failure is not None:
        return UnavailableError(f"cannot connect to {endpoint}: {failure}")
    if "socket closed" in text or "connection reset" in text:
        # the first contact ended by the server before any answer: a TLS mismatch
        if tls:
            why = (
                "the server closed the connection during the TLS handshake "
                "(does it require a client certificate? tls=weir.Tls(cert=..., key=...), "
                "--tls-cert/--tls-key)"
            )
        else:
            why = (
                "the server closed the connection before answering "
                "(does it speak TLS? use grpcs://HOST:PORT and the CA: --tls-ca)"
            )
        return UnavailableError(f"cannot connect to {endpoint}: {why}")
    if "connection refused" in text:
        why = "connection refused"
    elif "errors resolving" in text or "name not found" in text or "dns resolution" in text:
        why = "cannot resolve the host name"
    else:
        return None
    return UnavailableError(f"cannot connect to {endpoint}: {why}")


# how long `listening` waits for a connect that neither completes nor is refused
PROBE_TIMEOUT_S = 0.2


def listening(endpoint: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether something accepts TCP connections at ``endpoint`` ("host:port") right now.

    gRPC shares a process's connections to one address between its channels, with their
    state: a new client's first call can fail with "connection refused" that another
    channel's connection saw while the server was down, though it listens again (gRPC
    retries that connection only after its backoff). Before a refusal is reported as a
    wrong address, one fresh connect says whether it still holds. It blocks the caller
    (an event loop too) for ``timeout`` at most, the name lookup included (it runs in a
    thread of its own); a refusal comes back at once, and the question is asked only on
    a never-connected client's refusal. Unknown (a slow lookup) is False."""
    host, _, port = endpoint.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        return False
    answer: list[bool] = []

    def connect() -> None:
        try:
            with socket.create_connection((host, int(port)), timeout=timeout):
                answer.append(True)
        except OSError:
            answer.append(False)

    probe = threading.Thread(target=connect, name="weir-listening-probe", daemon=True)
    probe.start()
    probe.join(timeout)
    return bool(answer and answer[0])


def tls_failure(text: str) -> str | None:
    """What went wrong with TLS, from gRPC's lower-cased error text; None if not TLS."""
    if "ssl" not in text and "tls" not in text:  # not "tcp handshaker shutdown": a timeout
        return None
    if "certificate_verify_failed" in text or "certificate verify failed" in text:
        return (
            "TLS handshake failed: the server's certificate is not signed by the trusted CA "
            "(pass the CA that signed it: tls=weir.Tls(ca=...), --tls-ca)"
        )
    if "wrong_version_number" in text or "wrong version number" in text:
        return "TLS handshake failed: the server does not speak TLS (use host:port, not grpcs://)"
    if "certificate_required" in text or "peer did not return a certificate" in text:
        return (
            "TLS handshake failed: the server requires a client certificate "
            "(tls=weir.Tls(cert=..., key=...), --tls-cert/--tls-key)"
        )
    if "handshake failed" in text:
        return (
            f"TLS handshake failed ({text.rsplit('handshake failed', 1)[-1].strip(' :()')[:200]})"
        )
    return None


class Connection:
    """A grpc.aio channel to one server; must be created inside the loop that uses it.

    Until one call or stream has succeeded on it, a refused connection fails at
    once (`unreachable`): a wrong port or a server that is not running is an
    error to report, not an outage to wait out. After that, the same refusal is
    a server restarting, and callers retry with backoff. (A refusal while the endpoint
    does listen is one gRPC kept from another channel's connection: retried, `listening`.)

    With ``credentials`` every call carries a token from ``Login`` (see
    `weir.client.credentials`); without, calls are anonymous.

    ``transport="tcp"``: write and read streams go to the server's native TCP port
    (``tcp_endpoint``, by default the port the server reports: `learn_tcp_endpoint`;
    `TcpStreamCall`, or `weir.client.direct_writer` for the sync client's pinned writers),
    with the same TLS and credentials; everything else (subscriptions, admin, range
    reads) stays on gRPC.
    """

    def __init__(
        self,
        endpoint: str | Sequence[str],
        credentials: CredentialsArg = None,
        tls: TlsArg = None,
        transport: str = "grpc",
        tcp_endpoint: str | None = None,
    ) -> None:
        given = [parse_endpoint(e) for e in split_endpoints(endpoint)]
        self.endpoint, scheme_tls = given[0]
        scheme_tls = any(secure for _, secure in given)
        # the other brokers given ("h1:p1,h2:p2"): asked when this one cannot be reached
        # (`weir.client.owners`); a lookup adds the cluster's live brokers to them
        self.bootstrap: list[str] = [e for e, _ in given[1:] if e != self.endpoint]
        if transport not in TRANSPORTS:
            raise BadRequestError(f"transport must be 'grpc' or 'tcp', got {transport!r}")
        self.transport = transport
        # given, or learned from the server (DescribeServer) before the first TCP stream;
        # port 2137 of the endpoint's host until then (and from a server without the call)
        self.tcp_known = tcp_endpoint is not None
        if tcp_endpoint is not None:
            self.tcp_endpoint = parse_endpoint(tcp_endpoint)[0]
        else:
            self.tcp_endpoint = f"{self.endpoint.rpartition(':')[0]}:{DEFAULT_TCP_PORT}"
        self.tls = as_tls(tls, scheme_tls)
        self._ssl_context: Any = None
        self._credentials = credentials
        self._owners: Owners | None = None
        creds = as_credentials(credentials)
        self.tokens = TokenSource(creds) if creds is not None else None
        self.ever_connected = False
        self.tcp_ever_connected = False  # the native TCP port's streams, apart
        self._closed_since: float | None = None  # first contacts closed before an answer
        if self.tls is None:
            self.channel = grpc.aio.insecure_channel(self.endpoint, options=CHANNEL_OPTIONS)
        else:
            self.channel = grpc.aio.secure_channel(
                self.endpoint,
                self.tls.channel_credentials(),
                options=[*CHANNEL_OPTIONS, *self.tls.channel_options()],
            )
        self.stub = pb_grpc.WeirStub(self.channel)  # type: ignore[no-untyped-call]
        # the bulk methods use the hand-rolled wire codec (see weir.protocols.native.wire)
        self._stream_write = self.channel.stream_stream(
            "/weir.v1.Weir/StreamWrite",
            request_serializer=wire.encode_write_request,
            response_deserializer=pb.WriteResponse.FromString,
        )
        self._stream_read = self.channel.stream_stream(
            "/weir.v1.Weir/StreamRead",
            request_serializer=pb.ReadRequest.SerializeToString,
            response_deserializer=wire.decode_read_response,
        )
        self._read_range = self.channel.unary_stream(
            "/weir.v1.Weir/ReadRange",
            request_serializer=pb.ReadRangeRequest.SerializeToString,
            response_deserializer=wire.decode_range_response,
        )
        self._subscribe = self.channel.stream_stream(
            "/weir.v1.Weir/Subscribe",
            request_serializer=pb.SubscribeRequest.SerializeToString,
            response_deserializer=pb.SubscribeResponse.FromString,
        )
        if self.tokens is not None:
            self.tokens.bind(self._login)
        self.closed = False

    def _open(self, multicallable: Any, *args: Any) -> Any:
        if self.tokens is None:
            return multicallable(*args)
        return AuthedCall(self.tokens, multicallable, *args)

    def stream_write(self) -> Any:
        """A StreamWrite call (write / read / done_writing / cancel), on the native TCP
        port with ``transport="tcp"``."""
        if self.transport == "tcp":
            return self._tcp_call(WRITE)
        return self._open(self._stream_write)

    def _tcp_call(self, method: TcpMethod) -> TcpStreamCall:
        if self.tls is not None:
            self.tcp_ssl_context()
        host = self.tcp_endpoint.rpartition(":")[0].strip("[]")
        server_name = (self.tls.server_name or host) if self.tls is not None else None
        learn = None if self.tcp_known else self.learn_tcp_endpoint
        return TcpStreamCall(
            method, self.tcp_endpoint, self._ssl_context, server_name, self.tokens, learn
        )

    async def learn_tcp_endpoint(self) -> str:
        """The native TCP port's ``host:port``: the one given, else the port the server
        reports (``DescribeServer``) on the endpoint's host; port 2137 from a server that
        does not know the call. A server whose port is off fails fast, naming the setting."""
        if self.tcp_known:
            return self.tcp_endpoint
        try:
            desc = await self.call(
                "DescribeServer", pb.DescribeServerRequest(), timeout=30.0, failover=False
            )
        except BadRequestError:  # UNIMPLEMENTED: a server from before the call
            self.tcp_known = True
            return self.tcp_endpoint
        host = self.endpoint.rpartition(":")[0]
        if not desc.native_tcp_port:
            raise UnavailableError(
                f"cannot reach the weir native TCP port of {self.endpoint}: the server has it "
                f"off ({TCP_OFF})"
            )
        self.tcp_endpoint = f"{host}:{desc.native_tcp_port}"
        self.tcp_known = True
        return self.tcp_endpoint

    def tcp_ssl_context(self) -> ssl.SSLContext:
        """The TLS context of the native TCP port's connections (made once; needs ``tls``)."""
        assert self.tls is not None
        if self._ssl_context is None:
            self._ssl_context = self.tls.ssl_context()
        return self._ssl_context  # type: ignore[no-any-return]

    def stream_read(self) -> Any:
        """A StreamRead call, on the native TCP port with ``transport="tcp"``."""
        if self.transport == "tcp":
            return self._tcp_call(READ)
        return self._open(self._stream_read)

    def subscribe(self) -> Any:
        """A Subscribe call (a consumer of a durable subscription)."""
        return self._open(self._subscribe)

    def read_range(self, request: pb.ReadRangeRequest) -> Any:
        """A ReadRange call: iterate it for the responses."""
        return self._open(self._read_range, request)

    async def _login(self, request: pb.LoginRequest) -> pb.LoginResponse:
        try:
            resp: pb.LoginResponse = await self.stub.Login(request, timeout=30.0)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from None
        return resp

    @property
    def can_fail_over(self) -> bool:
        """Other brokers of the cluster are known (given, or named by a lookup): a call or
        stream this connection cannot make may go to one of them (`weir.client.owners`)."""
        return bool(self.bootstrap) or (self._owners is not None and self._owners.can_fail_over)

    async def call(
        self,
        method: str,
        request: Any,
        timeout: float | None = 30.0,
        *,
        retry: bool = True,
        failover: bool = True,
    ) -> Any:
        """A unary call with typed errors; retryable failures are retried for up to ``timeout``
        (``retry=False``: the first failure is raised). When this broker cannot be reached
        and others of its cluster are known, each attempt also asks them (``failover``:
        admin calls, which any broker answers)."""
        fn = getattr(self.stub, method)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        backoff = Backoff()
        last: WeirError | None = None  # the broker's last retryable answer
        while True:
            remaining = None if deadline is None else max(0.01, deadline - loop.time())
            token = ""
            try:
                if self.tokens is None:
                    result = await fn(request, timeout=remaining)
                else:
                    token = await self.tokens.token()
                    result = await fn(request, timeout=remaining, metadata=bearer(token))
            except (grpc.aio.AioRpcError, WeirError) as exc:  # WeirError: from logging in
                if isinstance(exc, grpc.aio.AioRpcError):
                    if self.tokens is not None and exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                        self.tokens.refused(token)
                    err = error_from_rpc(exc)
                else:
                    err = exc
                if failover and isinstance(err, UnavailableError) and self.can_fail_over:
                    left = None if deadline is None else max(0.01, deadline - loop.time())
                    answered, result = await self.owners.call_elsewhere(method, request, left)
                    if answered:
                        return result
                fast = self.unreachable(err)
                if fast is not None:
                    raise fast from None
                if (
                    not retry
                    or not err.retryable
                    or (deadline is not None and loop.time() >= deadline)
                ):
                    if isinstance(err, WeirTimeoutError) and last is not None:
                        err = last  # the last attempt only ran out of time: say why we retried
                    raise self.explained(err) from None
                last = err
                await asyncio.sleep(
                    min(backoff.next_delay(), max(0.0, (deadline or 1e18) - loop.time()))
                )
            else:
                self.ever_connected = True
                return result

    def got_through(self, call: Any, tcp: bool = False) -> None:
        """A stream opened on ``call`` (``tcp``: on the native TCP port) was answered:
        later refusals are outages."""
        self.ever_connected = True
        if tcp or isinstance(call, TcpStreamCall):
            self.tcp_ever_connected = True

    def explained(self, err: WeirError) -> WeirError:
        """``err`` as a call that gives up reports it: a first contact that kept being closed
        before any answer names the likely TLS mismatch (even before CLOSED_PATIENCE_S)."""
        if not self.ever_connected and closed_before_answer(err):
            return cannot_connect(self.endpoint, err, self.tls is not None) or err
        return err

    def unreachable(self, err: WeirError, endpoint: str | None = None) -> WeirError | None:
        """The error to fail fast with, when this connection never got through and ``err``
        says nothing listens at the endpoint (``endpoint``: the one the failed call went
        to, when not the gRPC one); None when retrying makes sense."""
        if isinstance(err, UnavailableError) and err.message.endswith(f"({TCP_OFF})"):
            return err  # the server says so: no point in retrying
        tcp = endpoint is not None and endpoint == self.tcp_endpoint
        if self.tcp_ever_connected if tcp else self.ever_connected:
            return None
        fast = cannot_connect(endpoint or self.endpoint, err, self.tls is not None)
        if fast is not None and fast.message.endswith("refused") and self.can_fail_over:
            return None  # one broker of several down: the others are asked (weir.client.owners)
        if (
            fast is not None
            and not tcp  # the native TCP port's calls connect afresh: their refusal is real
            and fast.message.endswith("connection refused")
            and listening(endpoint or self.endpoint)
        ):
            return None  # the refusal was an earlier one of a shared connection (`listening`)
        if fast is not None and tcp and fast.message.endswith("connection refused"):
            fast = UnavailableError(
                f"{fast.message} (is the native TCP port on: native_tcp.enabled?)"
            )
        if fast is not None and closed_before_answer(err):
            # a TLS mismatch, or a proxy whose server is restarting: wait and see (the chaos
            # suite's proxy resets clients while the server is down; they must not give up)
            now = time.monotonic()
            if self._closed_since is None:
                self._closed_since = now
            if now - self._closed_since < CLOSED_PATIENCE_S:
                return None
        return fast

    async def pause(self, delay: float) -> None:
        """Wait before a stream is opened again after a retryable failure: ``delay`` seconds
        (the caller's backoff), or less when the channel, not ready now, becomes ready.

        While the server is down, gRPC keeps reconnecting the channel on its own (at least
        once a second, CHANNEL_OPTIONS) and fails every call at once; a stream that only
        retried after its backoff (up to 5 s) would often sleep through a server that is
        back for a short while, as a restarting or flapping server is, and a writer could
        go on missing it until its delivery timeout while every other client got through
        (the chaos soak saw it). A channel that is ready already (the server ended the
        stream, or refused it) is waited out in full, so a refusal never turns into a
        tight loop; nor does a ready channel that fails again, as the backoff keeps
        growing between acks. A closed channel is waited out too: the caller's next
        attempt reports it, as it did before."""
        try:
            if self.channel.get_state(try_to_connect=True) != grpc.ChannelConnectivity.READY:
                ready = asyncio.ensure_future(self.channel.channel_ready())
                done, _ = await asyncio.wait({ready}, timeout=delay)
                if not done:
                    # not wait_for: it awaits the cancelled watch, and a watch gRPC is slow
                    # to give up (grpc/grpc#3064) must not hold the stream
                    ready.cancel()
                    ready.add_done_callback(_retrieved)
                    return
                ready.result()  # raises what channel_ready raised
                return
        except (grpc.aio.UsageError, RuntimeError):
            pass  # the channel is closed (or gRPC could not watch it)
        await asyncio.sleep(delay)

    @property
    def owners(self) -> Owners:
        """The connections to the brokers owning partitions (cluster mode: `weir.client.owners`)."""
        if self._owners is None:
            self._owners = Owners(self)
        return self._owners

    def sibling(self, endpoint: str) -> Connection:
        """A connection to another broker of the same cluster, with this one's credentials,
        TLS and transport (its native TCP port learnt from it: ``DescribeServer``). Its
        refusals are outages (the broker was named by the cluster: it died or is
        restarting), never a wrong address to fail fast on."""
        conn = Connection(endpoint, self._credentials, self.tls, self.transport)
        conn.ever_connected = conn.tcp_ever_connected = True
        return conn

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self._owners is not None:
                await self._owners.close()
            await self.channel.close()


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Done callback of a watch given up on: take its outcome, so that asyncio does not
    log an exception nobody retrieved."""
    if not task.cancelled():
        task.exception()
