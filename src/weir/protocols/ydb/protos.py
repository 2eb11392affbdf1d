"""The YDB API's generated messages and servicers, taken from the installed ``ydb`` SDK.

``ydb._grpc.common`` picks the generated code that matches the installed
protobuf (v6 here), so weir copies no .proto file and always speaks exactly the
messages the SDK sends. For mypy the same modules are named by their v6 path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ydb._grpc.v6 import (
        ydb_auth_v1_pb2_grpc,
        ydb_discovery_v1_pb2_grpc,
        ydb_query_v1_pb2_grpc,
        ydb_topic_v1_pb2_grpc,
    )
    from ydb._grpc.v6.protos import (
        ydb_auth_pb2,
        ydb_discovery_pb2,
        ydb_issue_message_pb2,
        ydb_operation_pb2,
        ydb_query_pb2,
        ydb_scheme_pb2,
        ydb_status_codes_pb2,
        ydb_topic_pb2,
    )
else:
    from ydb._grpc.common import (
        ydb_auth_v1_pb2_grpc,
        ydb_discovery_v1_pb2_grpc,
        ydb_query_v1_pb2_grpc,
        ydb_topic_v1_pb2_grpc,
    )
    from ydb._grpc.common.protos import (
        ydb_auth_pb2,
        ydb_discovery_pb2,
        ydb_issue_message_pb2,
        ydb_operation_pb2,
        ydb_query_pb2,
        ydb_scheme_pb2,
        ydb_status_codes_pb2,
        ydb_topic_pb2,
    )

__all__ = [
    "ydb_auth_pb2",
    "ydb_auth_v1_pb2_grpc",
    "ydb_discovery_pb2",
    "ydb_discovery_v1_pb2_grpc",
    "ydb_issue_message_pb2",
    "ydb_operation_pb2",
    "ydb_query_pb2",
    "ydb_query_v1_pb2_grpc",
    "ydb_scheme_pb2",
    "ydb_status_codes_pb2",
    "ydb_topic_pb2",
    "ydb_topic_v1_pb2_grpc",
]

# Short names for the stream message families (used on every message).
StreamWrite = ydb_topic_pb2.StreamWriteMessage
StreamRead = ydb_topic_pb2.StreamReadMessage
StatusIds = ydb_status_codes_pb2.StatusIds
