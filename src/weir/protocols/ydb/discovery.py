"""YDB Discovery: ListEndpoints names this server as the only endpoint of every database.

The SDK connects to whatever the endpoint list says, and drops endpoints whose
``ssl`` flag differs from its own scheme; so ``ssl`` says whether the port
speaks TLS (clients then use ``grpcs://``).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import grpc

from weir.errors import WeirError
from weir.protocols.ydb.auth import Authenticator
from weir.protocols.ydb.protos import ydb_discovery_pb2, ydb_discovery_v1_pb2_grpc
from weir.protocols.ydb.status import operation

LOCATION = "weir"
NODE_ID = 1
_WILDCARDS = {"", "0.0.0.0", "::", "[::]"}


class DiscoveryServicer(ydb_discovery_v1_pb2_grpc.DiscoveryServiceServicer):
    """``Ydb.Discovery.V1.DiscoveryService``: ListEndpoints (WhoAmI stays unimplemented)."""

    def __init__(
        self, auth: Authenticator, address: Callable[[], tuple[str, int]], ssl: bool = False
    ) -> None:
        self.auth = auth
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
        endpoint = ydb_discovery_pb2.EndpointInfo(
            address=host, port=port, ssl=self.ssl, location=LOCATION, node_id=NODE_ID
        )
        result = ydb_discovery_pb2.ListEndpointsResult(endpoints=[endpoint], self_location=LOCATION)
        return ydb_discovery_pb2.ListEndpointsResponse(operation=operation(result))
