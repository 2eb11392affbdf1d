"""How weir errors cross the native protocol: gRPC status + the weir error code.

Unary calls abort with a gRPC status and the trailing metadata ``weir-code``;
streams send an ``Error`` message and end. The client rebuilds the same error
class from the code (`weir.errors.error_from_code`).
"""

from __future__ import annotations

from typing import TypeVar

import grpc

from weir.errors import WeirError

CODE_KEY = "weir-code"
T = TypeVar("T")

_GRPC: dict[str, grpc.StatusCode] = {
    "BAD_REQUEST": grpc.StatusCode.INVALID_ARGUMENT,
    "BAD_BATCH": grpc.StatusCode.INVALID_ARGUMENT,
    "MESSAGE_TOO_LARGE": grpc.StatusCode.INVALID_ARGUMENT,
    "NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "UNKNOWN_TOPIC": grpc.StatusCode.NOT_FOUND,
    "UNKNOWN_PARTITION": grpc.StatusCode.NOT_FOUND,
    "UNKNOWN_CONSUMER": grpc.StatusCode.NOT_FOUND,
    "UNKNOWN_TENANT": grpc.StatusCode.NOT_FOUND,
    "UNKNOWN_NAMESPACE": grpc.StatusCode.NOT_FOUND,
    "NOT_EMPTY": grpc.StatusCode.FAILED_PRECONDITION,
    "TOO_MANY_PRODUCERS": grpc.StatusCode.FAILED_PRECONDITION,
    "TOO_MANY_CONSUMERS": grpc.StatusCode.FAILED_PRECONDITION,
    "UNKNOWN_SUBSCRIPTION": grpc.StatusCode.NOT_FOUND,
    "CONSUMER_BUSY": grpc.StatusCode.FAILED_PRECONDITION,
    "ALREADY_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
    "UNAUTHORIZED": grpc.StatusCode.UNAUTHENTICATED,
    "TOKEN_REJECTED": grpc.StatusCode.UNAUTHENTICATED,
    "PERMISSION_DENIED": grpc.StatusCode.PERMISSION_DENIED,
    "OVERLOADED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "PARTITION_OVERFLOW": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "BACKLOG_QUOTA_EXCEEDED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "STORAGE_FULL": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "COMMIT_FAILED": grpc.StatusCode.UNAVAILABLE,
    "UNAVAILABLE": grpc.StatusCode.UNAVAILABLE,
    "NOT_OWNER": grpc.StatusCode.UNAVAILABLE,
    "STALE_GENERATION": grpc.StatusCode.FAILED_PRECONDITION,
    "PRODUCER_FENCED": grpc.StatusCode.FAILED_PRECONDITION,
    "PRODUCER_BUSY": grpc.StatusCode.FAILED_PRECONDITION,
    "UNKNOWN_TRANSACTION": grpc.StatusCode.NOT_FOUND,
    "TRANSACTION_ENDED": grpc.StatusCode.FAILED_PRECONDITION,
    "TRANSACTION_COMMITTED": grpc.StatusCode.FAILED_PRECONDITION,
    "TRANSACTION_BUSY": grpc.StatusCode.FAILED_PRECONDITION,
    "TIMEOUT": grpc.StatusCode.DEADLINE_EXCEEDED,
    "CORRUPT_DATA": grpc.StatusCode.DATA_LOSS,
    "DATA_LOSS": grpc.StatusCode.OUT_OF_RANGE,
    "CLOSED": grpc.StatusCode.CANCELLED,
}


def grpc_status(err: WeirError) -> grpc.StatusCode:
    return _GRPC.get(err.code, grpc.StatusCode.INTERNAL)


def code_from_grpc(status: grpc.StatusCode) -> str:
    """A weir code for a gRPC failure that carried none.

    The server puts a weir code on every error it means, so a bare status comes
    from the transport or gRPC itself: a dropped connection surfaces as
    UNAVAILABLE, CANCELLED, UNKNOWN or INTERNAL ("Internal error from Core"), all
    worth a retry; RESOURCE_EXHAUSTED is gRPC's message size limit.
    """
    if status in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.ABORTED,
    ):
        return "UNAVAILABLE"
    if status == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "TIMEOUT"
    if status == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return "MESSAGE_TOO_LARGE"
    if status in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED):
        return "BAD_REQUEST"
    if status == grpc.StatusCode.UNAUTHENTICATED:
        return "UNAUTHORIZED"
    if status == grpc.StatusCode.PERMISSION_DENIED:
        return "PERMISSION_DENIED"
    return "UNAVAILABLE"
