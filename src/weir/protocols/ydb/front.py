"""Installs the YDB front on the server's gRPC port: Discovery, Auth, Topic and the Query
calls transactions need.

`weir.server.default_fronts` calls `install` for every server. The channel
options the SDK needs (keepalive pings without data, 64 MB messages) are part of
`weir.server.GRPC_OPTIONS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

from weir.broker.broker import Broker
from weir.protocols.ydb.auth import Authenticator, AuthServicer
from weir.protocols.ydb.discovery import DiscoveryServicer
from weir.protocols.ydb.protos import (
    ydb_auth_v1_pb2_grpc,
    ydb_discovery_v1_pb2_grpc,
    ydb_query_v1_pb2_grpc,
    ydb_topic_v1_pb2_grpc,
)
from weir.protocols.ydb.query_service import QueryServicer
from weir.protocols.ydb.topic_service import TopicServicer

if TYPE_CHECKING:
    from weir.server import Server


def install(grpc_server: grpc.aio.Server, broker: Broker, server: Server) -> None:
    """Register the YDB services for ``broker`` on ``grpc_server`` (before it starts)."""
    auth = Authenticator(broker, security=server.security)

    def address() -> tuple[str, int]:
        return server.host, server.port

    ydb_discovery_v1_pb2_grpc.add_DiscoveryServiceServicer_to_server(  # type: ignore[no-untyped-call]
        DiscoveryServicer(auth, address, ssl=server.tls is not None, cluster=broker.cluster),
        grpc_server,
    )
    ydb_auth_v1_pb2_grpc.add_AuthServiceServicer_to_server(AuthServicer(auth), grpc_server)  # type: ignore[no-untyped-call]
    ydb_topic_v1_pb2_grpc.add_TopicServiceServicer_to_server(  # type: ignore[no-untyped-call]
        TopicServicer(broker, auth, server), grpc_server
    )
    ydb_query_v1_pb2_grpc.add_QueryServiceServicer_to_server(  # type: ignore[no-untyped-call]
        QueryServicer(broker, auth, server), grpc_server
    )
