"""`PeerOffsets`: committed offsets of partitions another broker of the cluster owns.

In a cluster (``storage.mode = "replicated"``, docs/cluster.md) a committed offset
is a position of its partition's replicated log, written and read by the
partition's owner only (`weir.broker.cluster.offsets`). A front that serves a whole
consumer group on one broker (Kafka's group coordinator) meets partitions owned
elsewhere; it asks their owner over the owner's native gRPC port (the endpoint the
owner published, named by the `NotOwnerError` the broker raised), with weir's own
CommitOffset and DescribeConsumer calls, as any native client would. With
``auth.cluster_secret`` set, each call carries a peer token of the asking broker
(`weir.security.peer_tokens`), which the owner accepts as a broker acting for a client
already authorized; without it the call carries no credentials, and an owner that
requires authentication refuses it (such a cluster does not start without the secret).
When the brokers serve TLS (``tls.cert_file``), the call is made over TLS, the owner's
certificate checked with ``tls.peer_ca_file`` (or the system's roots), this broker's own
certificate presented to brokers that require client certificates (``tls.client_ca_file``;
`ServerTls.peer_credentials`).
"""

from __future__ import annotations

import asyncio
import contextlib

import grpc

from weir.errors import UnavailableError, UnknownConsumerError, WeirError, error_from_code
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.status import CODE_KEY, code_from_grpc
from weir.protocols.native.weir_pb2_grpc import WeirStub
from weir.security.peer_tokens import PeerTokens

TIMEOUT_S = 10.0


def _error(exc: grpc.aio.AioRpcError) -> WeirError:
    code = None
    for k, v in exc.trailing_metadata() or ():
        if k == CODE_KEY:
            code = v if isinstance(v, str) else bytes(v).decode()
    if code is None:
        code = code_from_grpc(exc.code())
    return error_from_code(code, f"the partition's owner answered: {exc.details() or exc.code()}")


class PeerOffsets:
    """One channel per owner endpoint, opened on first use; `close` when the front stops."""

    def __init__(
        self, peers: PeerTokens | None = None, tls: grpc.ChannelCredentials | None = None
    ) -> None:
        self._stubs: dict[str, tuple[grpc.aio.Channel, WeirStub]] = {}
        self._peers = peers
        self._tls = tls  # None: the brokers' ports are plain text

    def _metadata(self) -> tuple[tuple[str, str], ...] | None:
        return None if self._peers is None else self._peers.metadata()

    def _stub(self, endpoint: str) -> WeirStub:
        got = self._stubs.get(endpoint)
        if got is None:
            channel = (
                grpc.aio.insecure_channel(endpoint)
                if self._tls is None
                else grpc.aio.secure_channel(endpoint, self._tls)
            )
            stub = WeirStub(channel)  # type: ignore[no-untyped-call]
            got = self._stubs[endpoint] = (channel, stub)
        return got[1]

    async def commit(
        self,
        endpoint: str,
        topic: str,
        partition: int,
        consumer: str,
        offset: int,
        *,
        allow_backwards: bool = False,
    ) -> bool:
        """Commit at the owner (``endpoint``: its native host:port); True if it changed."""
        req = pb.CommitOffsetRequest(
            topic=topic,
            partition=partition,
            consumer=consumer,
            offset=offset,
            allow_backwards=allow_backwards,
        )
        try:
            got = await self._stub(endpoint).CommitOffset(
                req, timeout=TIMEOUT_S, metadata=self._metadata()
            )
        except grpc.aio.AioRpcError as exc:
            raise _error(exc) from None
        return bool(got.changed)

    async def committed(
        self, endpoint: str, topic: str, partition: int, consumer: str
    ) -> int | None:
        """The consumer's committed offset of ``partition`` as its owner has it (the
        partition's start when it has none; None when the consumer is not registered)."""
        req = pb.DescribeConsumerRequest(topic=topic, consumer=consumer)
        try:
            got = await self._stub(endpoint).DescribeConsumer(
                req, timeout=TIMEOUT_S, metadata=self._metadata()
            )
        except grpc.aio.AioRpcError as exc:
            err = _error(exc)
            if isinstance(err, UnknownConsumerError):
                return None
            raise err from None
        for p in got.partitions:
            if p.partition == partition:
                return int(p.committed_offset)
        raise UnavailableError(
            f"{endpoint} does not serve partition {partition} of {topic} (it moved)"
        )

    async def close(self) -> None:
        stubs, self._stubs = self._stubs, {}
        for channel, _ in stubs.values():
            with contextlib.suppress(Exception):
                await asyncio.shield(channel.close())
