#!/usr/bin/env python
"""A "null" YDB Topic gRPC server: it acknowledges writes without storing anything.

It speaks just enough of the YDB gRPC API v1 for the unmodified ``ydb`` Python SDK
(3.33.x) to connect, authenticate, create/describe topics and write through the topic
writer. Every written message is acked as ``written`` with a per-partition increasing
offset; nothing is kept. StreamRead answers the handshake and serves no partitions.

It is the benchmark baseline: the SDK writer's throughput against this server is the
ceiling for any real server.

Usage::

    python bench/ydb_null_server.py --listen 127.0.0.1:2136 [--partitions N]
        [--user NAME --password PW] [--require-auth] [--codecs raw,gzip]

With port 0 an ephemeral port is chosen. The first stdout line is always
``LISTENING <host>:<port>``; session open/close events are logged to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import itertools
import logging
import signal
import sys
import uuid
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import Message

if TYPE_CHECKING:  # the generated modules for protobuf 6.x, as ydb._grpc.common resolves them
    from ydb._grpc.v6 import (
        ydb_auth_v1_pb2_grpc,
        ydb_discovery_v1_pb2_grpc,
        ydb_topic_v1_pb2_grpc,
    )
    from ydb._grpc.v6.protos import (
        ydb_auth_pb2,
        ydb_discovery_pb2,
        ydb_issue_message_pb2,
        ydb_operation_pb2,
        ydb_scheme_pb2,
        ydb_status_codes_pb2,
        ydb_topic_pb2,
    )
else:  # ydb._grpc.common picks v3/v4/v5/v6 to match the installed protobuf
    from ydb._grpc.common import (
        ydb_auth_v1_pb2_grpc,
        ydb_discovery_v1_pb2_grpc,
        ydb_topic_v1_pb2_grpc,
    )
    from ydb._grpc.common.protos import (
        ydb_auth_pb2,
        ydb_discovery_pb2,
        ydb_issue_message_pb2,
        ydb_operation_pb2,
        ydb_scheme_pb2,
        ydb_status_codes_pb2,
        ydb_topic_pb2,
    )

log = logging.getLogger("ydb_null_server")

SUCCESS = ydb_status_codes_pb2.StatusIds.SUCCESS
UNAUTHORIZED = ydb_status_codes_pb2.StatusIds.UNAUTHORIZED
AUTH_HEADER = "x-ydb-auth-ticket"
LOCATION = "local"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # the SDK sends/receives up to 64 * 10**6 bytes

# Server channel options. The SDK pings every 10 s while a stream is open
# (grpc.keepalive_time_ms=10000, permit_without_calls=0). With grpc's defaults
# (min ping interval 5 min, 2 strikes) an idle stream gets GOAWAY "too_many_pings".
KEEPALIVE_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.keepalive_permit_without_calls", 1),
]
SIZE_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]

CODEC_NAMES = {
    "raw": ydb_topic_pb2.CODEC_RAW,
    "gzip": ydb_topic_pb2.CODEC_GZIP,
    "lzop": ydb_topic_pb2.CODEC_LZOP,
    "zstd": ydb_topic_pb2.CODEC_ZSTD,
}


def operation(result: Message | None = None, status: Any = SUCCESS, error: str = "") -> Any:
    """Build a completed ``Ydb.Operations.Operation`` with an Any-packed result."""
    op = ydb_operation_pb2.Operation(id="", ready=True, status=status)
    if error:
        op.issues.append(ydb_issue_message_pb2.IssueMessage(message=error, severity=1))
    if result is not None:
        packed = any_pb2.Any()
        packed.Pack(result)
        op.result.CopyFrom(packed)
    return op


class Config:
    """Runtime settings shared by the servicers."""

    def __init__(
        self,
        host: str,
        port: int,
        partitions: int,
        users: dict[str, str],
        require_auth: bool,
        codecs: Sequence[int],
    ) -> None:
        self.host = host
        self.port = port
        self.partitions = partitions
        self.users = users
        self.require_auth = require_auth
        self.codecs = list(codecs)
        self.tokens: set[str] = set()

    async def check_auth(self, context: grpc.aio.ServicerContext) -> None:
        """Abort with UNAUTHENTICATED when auth is required and the ticket is unknown."""
        if not self.require_auth:
            return
        ticket = dict(context.invocation_metadata() or ()).get(AUTH_HEADER)
        if ticket not in self.tokens:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or unknown auth ticket")


class DiscoveryServicer(ydb_discovery_v1_pb2_grpc.DiscoveryServiceServicer):
    """Announces this server as the only (non-SSL) endpoint of every database."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    async def ListEndpoints(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        endpoint = ydb_discovery_pb2.EndpointInfo(
            address=self.cfg.host, port=self.cfg.port, ssl=False, location=LOCATION, node_id=1
        )
        result = ydb_discovery_pb2.ListEndpointsResult(endpoints=[endpoint], self_location=LOCATION)
        return ydb_discovery_pb2.ListEndpointsResponse(operation=operation(result))


class AuthServicer(ydb_auth_v1_pb2_grpc.AuthServiceServicer):
    """Static user/password login that hands out opaque tokens."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    async def Login(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        if self.cfg.users.get(request.user) != request.password:
            op = operation(status=UNAUTHORIZED, error="Invalid user or password")
            return ydb_auth_pb2.LoginResponse(operation=op)
        token = f"null-{request.user}-{uuid.uuid4().hex}"
        self.cfg.tokens.add(token)
        return ydb_auth_pb2.LoginResponse(
            operation=operation(ydb_auth_pb2.LoginResult(token=token))
        )


class TopicServicer(ydb_topic_v1_pb2_grpc.TopicServiceServicer):
    """Topic service: every topic exists with ``cfg.partitions`` partitions; nothing is stored."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.next_offset: dict[tuple[str, int], int] = {}
        self.session_ids = itertools.count(1)
        self.acked = 0

    # ---- unary scheme/offset calls -------------------------------------------------------

    async def CreateTopic(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self.cfg.check_auth(context)
        return ydb_topic_pb2.CreateTopicResponse(
            operation=operation(ydb_topic_pb2.CreateTopicResult())
        )

    async def AlterTopic(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self.cfg.check_auth(context)
        return ydb_topic_pb2.AlterTopicResponse(
            operation=operation(ydb_topic_pb2.AlterTopicResult())
        )

    async def DropTopic(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self.cfg.check_auth(context)
        return ydb_topic_pb2.DropTopicResponse(operation=operation(ydb_topic_pb2.DropTopicResult()))

    async def CommitOffset(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self.cfg.check_auth(context)
        return ydb_topic_pb2.CommitOffsetResponse(
            operation=operation(ydb_topic_pb2.CommitOffsetResult())
        )

    async def UpdateOffsetsInTransaction(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> Any:
        await self.cfg.check_auth(context)
        result = ydb_topic_pb2.UpdateOffsetsInTransactionResult()
        return ydb_topic_pb2.UpdateOffsetsInTransactionResponse(operation=operation(result))

    def _entry(self, path: str) -> Any:
        name = path.rstrip("/").rsplit("/", 1)[-1]
        return ydb_scheme_pb2.Entry(name=name, owner="root", type=ydb_scheme_pb2.Entry.TOPIC)

    async def DescribeTopic(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self.cfg.check_auth(context)
        n = self.cfg.partitions
        result = ydb_topic_pb2.DescribeTopicResult(
            self=self._entry(request.path),
            partitioning_settings=ydb_topic_pb2.PartitioningSettings(
                min_active_partitions=n, max_active_partitions=n, partition_count_limit=n
            ),
            partitions=[
                ydb_topic_pb2.DescribeTopicResult.PartitionInfo(partition_id=i, active=True)
                for i in range(n)
            ],
            supported_codecs=ydb_topic_pb2.SupportedCodecs(codecs=self.cfg.codecs),
        )
        return ydb_topic_pb2.DescribeTopicResponse(operation=operation(result))

    async def DescribeConsumer(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self.cfg.check_auth(context)
        result = ydb_topic_pb2.DescribeConsumerResult(
            self=self._entry(request.path),
            consumer=ydb_topic_pb2.Consumer(name=request.consumer),
            partitions=[
                ydb_topic_pb2.DescribeConsumerResult.PartitionInfo(partition_id=i, active=True)
                for i in range(self.cfg.partitions)
            ],
        )
        return ydb_topic_pb2.DescribeConsumerResponse(operation=operation(result))

    # ---- StreamWrite ---------------------------------------------------------------------

    def _pick_partition(self, init: Any) -> int:
        """Honour an explicit partition, otherwise hash the message group (= producer id)."""
        which = init.WhichOneof("partitioning")
        if which == "partition_id":
            return int(init.partition_id) % self.cfg.partitions
        if which == "partition_with_generation":
            return int(init.partition_with_generation.partition_id) % self.cfg.partitions
        key = init.message_group_id or init.producer_id
        return zlib.crc32(key.encode()) % self.cfg.partitions

    async def StreamWrite(
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        await self.cfg.check_auth(context)
        from_server = ydb_topic_pb2.StreamWriteMessage.FromServer
        session = f"null-write-{next(self.session_ids)}"
        requests = request_iterator.__aiter__()
        try:
            first = await requests.__anext__()
        except StopAsyncIteration:
            return
        if first.WhichOneof("client_message") != "init_request":
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "first message must be init_request"
            )
        init = first.init_request
        partition = self._pick_partition(init)
        key = (init.path, partition)
        log.info(
            "StreamWrite session opened %s path=%s producer=%s partition=%d",
            session,
            init.path,
            init.producer_id,
            partition,
        )
        requests_seen = 0
        codecs_seen: Counter[int] = Counter()
        first_offset = self.next_offset.get(key, 0)
        yield from_server(
            status=SUCCESS,
            init_response=ydb_topic_pb2.StreamWriteMessage.InitResponse(
                last_seq_no=0,
                session_id=session,
                partition_id=partition,
                supported_codecs=ydb_topic_pb2.SupportedCodecs(codecs=self.cfg.codecs),
            ),
        )
        try:
            async for req in requests:
                kind = req.WhichOneof("client_message")
                if kind == "write_request":
                    resp = from_server(status=SUCCESS)
                    wr = resp.write_response
                    wr.partition_id = partition
                    acks = wr.acks
                    offset = self.next_offset.get(key, 0)
                    for msg in req.write_request.messages:
                        ack = acks.add()
                        ack.seq_no = msg.seq_no
                        ack.written.offset = offset
                        offset += 1
                    self.acked += offset - self.next_offset.get(key, 0)
                    self.next_offset[key] = offset
                    wr.write_statistics.SetInParent()
                    requests_seen += 1
                    codecs_seen[req.write_request.codec] += 1
                    yield resp
                elif kind == "update_token_request":
                    yield from_server(
                        status=SUCCESS, update_token_response=ydb_topic_pb2.UpdateTokenResponse()
                    )
        finally:
            log.info(
                "StreamWrite session closed %s: %d messages in %d write requests, codecs %s",
                session,
                self.next_offset.get(key, 0) - first_offset,
                requests_seen,
                dict(codecs_seen),
            )

    # ---- StreamRead ----------------------------------------------------------------------

    async def StreamRead(
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        await self.cfg.check_auth(context)
        from_server = ydb_topic_pb2.StreamReadMessage.FromServer
        session = f"null-read-{next(self.session_ids)}"
        requests = request_iterator.__aiter__()
        try:
            first = await requests.__anext__()
        except StopAsyncIteration:
            return
        if first.WhichOneof("client_message") != "init_request":
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "first message must be init_request"
            )
        log.info("StreamRead session opened %s consumer=%s", session, first.init_request.consumer)
        yield from_server(
            status=SUCCESS,
            init_response=ydb_topic_pb2.StreamReadMessage.InitResponse(session_id=session),
        )
        try:
            async for req in requests:
                kind = req.WhichOneof("client_message")
                if kind == "commit_offset_request":
                    resp = from_server(status=SUCCESS)
                    committed = resp.commit_offset_response.partitions_committed_offsets
                    for part in req.commit_offset_request.commit_offsets:
                        end = max((r.end for r in part.offsets), default=0)
                        committed.add(
                            partition_session_id=part.partition_session_id, committed_offset=end
                        )
                    yield resp
                elif kind == "update_token_request":
                    yield from_server(
                        status=SUCCESS, update_token_response=ydb_topic_pb2.UpdateTokenResponse()
                    )
                # read_request / start/stop partition responses: nothing to serve.
        finally:
            log.info("StreamRead session closed %s", session)


def parse_listen(value: str) -> tuple[str, int]:
    """Parse ``HOST:PORT`` and refuse anything that is not a loopback address."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit():
        raise argparse.ArgumentTypeError("expected HOST:PORT")
    host = host.strip("[]")
    if host != "localhost":
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise argparse.ArgumentTypeError(f"{host!r}: only loopback addresses may be bound")
    return host, int(port_text)


def parse_codecs(value: str) -> list[int]:
    """Parse a comma list of codec names (raw, gzip, lzop, zstd) into Ydb.Topic.Codec values."""
    names = [c.strip().lower() for c in value.split(",") if c.strip()]
    unknown = [n for n in names if n not in CODEC_NAMES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown codec(s): {', '.join(unknown)}")
    return [CODEC_NAMES[n] for n in names]


async def serve(args: argparse.Namespace) -> None:
    """Start the grpc.aio server and run until SIGINT/SIGTERM."""
    host, port = args.listen
    options = SIZE_OPTIONS + ([] if args.default_keepalive else KEEPALIVE_OPTIONS)
    server = grpc.aio.server(options=options)
    bind_host = f"[{host}]" if ":" in host else host
    bound = server.add_insecure_port(f"{bind_host}:{port}")
    if bound == 0:
        raise SystemExit(f"cannot bind {host}:{port}")
    users = {args.user: args.password} if args.user else {}
    cfg = Config(host, bound, args.partitions, users, args.require_auth, args.codecs)
    topic = TopicServicer(cfg)
    registrations: list[tuple[Any, Any]] = [  # (generated add_*_to_server, servicer)
        (ydb_discovery_v1_pb2_grpc.add_DiscoveryServiceServicer_to_server, DiscoveryServicer(cfg)),
        (ydb_auth_v1_pb2_grpc.add_AuthServiceServicer_to_server, AuthServicer(cfg)),
        (ydb_topic_v1_pb2_grpc.add_TopicServiceServicer_to_server, topic),
    ]
    for add_to_server, servicer in registrations:
        add_to_server(servicer, server)
    await server.start()
    print(f"LISTENING {host}:{bound}", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(grace=1.0)
    log.info("stopped; acked %d messages", topic.acked)


def main(argv: Sequence[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--listen",
        type=parse_listen,
        default=("127.0.0.1", 2136),
        help="loopback HOST:PORT to bind (port 0 = ephemeral)",
    )
    parser.add_argument("--partitions", type=int, default=1, help="partitions of every topic")
    parser.add_argument("--user", default="", help="static user accepted by Auth.Login")
    parser.add_argument("--password", default="", help="password of --user")
    parser.add_argument(
        "--require-auth",
        action="store_true",
        help="reject topic calls without a ticket issued by Login",
    )
    parser.add_argument(
        "--codecs",
        type=parse_codecs,
        default="raw,gzip",
        help="supported_codecs announced to writers (comma list; empty = none)",
    )
    parser.add_argument(
        "--default-keepalive",
        action="store_true",
        help="do NOT relax grpc ping policy (reproduces GOAWAY too_many_pings)",
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    if args.partitions < 1:
        parser.error("--partitions must be >= 1")
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
