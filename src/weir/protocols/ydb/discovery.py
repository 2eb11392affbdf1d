"""YDB Discovery: ListEndpoints names this server as the only endpoint of every database
(in a cluster, every live broker: docs/cluster.md).

The SDK connects to whatever the endpoint list says, and drops endpoints whose
``ssl`` flag differs from its own scheme; so ``ssl`` says whether the port
speaks TLS (clients then use ``grpcs://``).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import grpc

from weir.broker.cluster.broker_mode import ClusterMode, node_id
from weir.errors import WeirError
from weir.protocols.ydb.auth import Authenticator
from weir.protocols.ydb.protos import ydb_discovery_pb2, ydb_discovery_v1_pb2_grpc
from weir.protocols.ydb.status import operation

LOCATION = "weir"
NODE_ID = 1
_WILDCARDS = {"", "0.0.0.0", "::", "[::]"}


def node_of(cluster: ClusterMode | None) -> int:
    """This server's YDB node id: NODE_ID alone, derived from the broker id in a cluster
    (the SDK routes a query session's calls to the node its CreateSession named)."""
    return NODE_ID if cluster is None else node_id(cluster.broker_id)


class DiscoveryServicer(ydb_discovery_v1_pb2_grpc.DiscoveryServiceServicer):
    """``Ydb.Discovery.V1.DiscoveryService``: ListEndpoints (WhoAmI stays unimplemented)."""

    def __init__(
        self,
        auth: Authenticator,
        address: Callable[[], tuple[str, int]],
        ssl: bool = False,
        cluster: ClusterMode | None = None,
    ) -> None:
        self.auth = auth
        # replicated mode: every live broker is an endpoint (node_id from its broker id), so
        # the SDK's connections spread over them and a session refused by a broker that
        # does not own its partition (UNAVAILABLE) is retried on the next one
        self.cluster = cluster
        self.ssl = ssl
        self.address = address  # read per call: the port is known only once the server bound it

    async def ListEndpoints(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            self.auth.check(context)
        except WeirError as err:
            return ydb_discovery_pb2.ListEndpointsResponse(operation=operation(error=err))
        host, port = self.address()
        if host in _WILDCARDS:  # bound to every interface: name one the client can reach
            host = socket.gethostname()
        endpoints = [
            ydb_discovery_pb2.EndpointInfo(
                address=host,
                port=port,
                ssl=self.ssl,
                location=LOCATION,
                node_id=node_of(self.cluster),
            )
        ]
        if self.cluster is not None:
            for broker, eps in sorted((await self.cluster.live_brokers()).items()):
                other, _, other_port = eps.get("native", "").rpartition(":")
                if broker == self.cluster.broker_id or not other_port.isdigit():
                    continue
                endpoints.append(
                    ydb_discovery_pb2.EndpointInfo(
                        address=other.strip("[]"),
                        port=int(other_port),
                        ssl=self.ssl,
                        location=LOCATION,
                        node_id=node_id(broker),
                    )
                )
        result = ydb_discovery_pb2.ListEndpointsResult(endpoints=endpoints, self_location=LOCATION)
        return ydb_discovery_pb2.ListEndpointsResponse(operation=operation(result))
