"""weir errors as YDB statuses, and the envelopes that carry a status to the SDK.

The mapping is chosen for how the ``ydb`` SDK reacts, not just for the name:
it reconnects in a hot loop on UNAVAILABLE and NOT_FOUND, slowly on OVERLOADED
and INTERNAL_ERROR, and stops on SCHEME_ERROR, BAD_REQUEST, UNAUTHORIZED and the
rest. So a condition that persists (an unknown topic, a bad request) must map to
a status that stops the client, and NOT_FOUND is used only for a transaction that
is unknown or over (as YDB does; the SDK's transaction writer never reconnects, and
``retry_tx_*`` begins a new transaction).
"""

from __future__ import annotations

import logging
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import Message

from weir.errors import InternalError, WeirError
from weir.protocols.ydb.protos import StatusIds, ydb_issue_message_pb2, ydb_operation_pb2

log = logging.getLogger("weir.ydb")

SUCCESS = StatusIds.SUCCESS

# WeirError.code -> Ydb.StatusIds. Codes not listed fall back to INTERNAL_ERROR.
STATUS_BY_CODE: dict[str, int] = {
    "UNAVAILABLE": StatusIds.UNAVAILABLE,  # shutting down: reconnect elsewhere/later
    "NOT_OWNER": StatusIds.UNAVAILABLE,  # cluster: another broker serves the partition
    "CLOSED": StatusIds.UNAVAILABLE,  # the partition went away under the session
    "OVERLOADED": StatusIds.OVERLOADED,  # backpressure: the SDK backs off and resends
    "PARTITION_OVERFLOW": StatusIds.OVERLOADED,  # space returns as retention runs
    "BACKLOG_QUOTA_EXCEEDED": StatusIds.OVERLOADED,  # room returns as consumers catch up
    "STORAGE_FULL": StatusIds.OVERLOADED,
    "COMMIT_FAILED": StatusIds.INTERNAL_ERROR,  # retried by the SDK with backoff
    "TIMEOUT": StatusIds.TIMEOUT,
    "BAD_REQUEST": StatusIds.BAD_REQUEST,
    "BAD_BATCH": StatusIds.BAD_REQUEST,
    "MESSAGE_TOO_LARGE": StatusIds.BAD_REQUEST,
    "UNKNOWN_PARTITION": StatusIds.BAD_REQUEST,
    "UNKNOWN_TOPIC": StatusIds.SCHEME_ERROR,
    "UNKNOWN_CONSUMER": StatusIds.SCHEME_ERROR,
    "UNKNOWN_TENANT": StatusIds.SCHEME_ERROR,
    "UNKNOWN_NAMESPACE": StatusIds.SCHEME_ERROR,  # YDB: the directory does not exist
    "NOT_EMPTY": StatusIds.PRECONDITION_FAILED,
    "TOO_MANY_PRODUCERS": StatusIds.PRECONDITION_FAILED,  # a policy: retrying would loop
    "TOO_MANY_CONSUMERS": StatusIds.PRECONDITION_FAILED,
    "NOT_FOUND": StatusIds.SCHEME_ERROR,
    "ALREADY_EXISTS": StatusIds.ALREADY_EXISTS,
    "UNAUTHORIZED": StatusIds.UNAUTHORIZED,
    "PERMISSION_DENIED": StatusIds.UNAUTHORIZED,  # YDB's "access denied" is UNAUTHORIZED too
    "STALE_GENERATION": StatusIds.PRECONDITION_FAILED,
    "PRODUCER_FENCED": StatusIds.PRECONDITION_FAILED,  # a newer session of the producer won
    "PRODUCER_BUSY": StatusIds.PRECONDITION_FAILED,  # an exclusive producer holds the topic
    # subscription consumers hold the consumer's offsets: the SDK reports it, not retries
    "CONSUMER_BUSY": StatusIds.PRECONDITION_FAILED,
    # YDB answers a transaction it does not know (or that ended) with NOT_FOUND, which the
    # SDK's retry_tx_* retries with a new transaction; BAD_SESSION would retry too, but
    # also drops the session: a finished transaction says nothing about its session
    "UNKNOWN_TRANSACTION": StatusIds.NOT_FOUND,
    "TRANSACTION_ENDED": StatusIds.NOT_FOUND,
    "TRANSACTION_COMMITTED": StatusIds.NOT_FOUND,
    "TRANSACTION_BUSY": StatusIds.PRECONDITION_FAILED,
    "BAD_SESSION": StatusIds.BAD_SESSION,  # a query session that is over: the SDK makes another
    "UNSUPPORTED": StatusIds.UNSUPPORTED,
    "SCHEME_ERROR": StatusIds.SCHEME_ERROR,  # a path that cannot name a topic
    "PRECONDITION_FAILED": StatusIds.PRECONDITION_FAILED,
    "CORRUPT_DATA": StatusIds.GENERIC_ERROR,  # persistent: retrying would loop
    "DATA_LOSS": StatusIds.GENERIC_ERROR,
}

# The gRPC status a stream ends with after its error message went out. The SDK acts on
# the message; the trailer only has to be an error (an OK end hangs the sync SDK).
_GRPC_BY_STATUS: dict[int, grpc.StatusCode] = {
    StatusIds.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    StatusIds.UNAUTHORIZED: grpc.StatusCode.UNAUTHENTICATED,
    StatusIds.BAD_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    StatusIds.SCHEME_ERROR: grpc.StatusCode.NOT_FOUND,
    StatusIds.OVERLOADED: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


class UnsupportedError(WeirError):
    """A YDB feature weir does not implement (transactions, direct read)."""

    code = "UNSUPPORTED"


class SchemeError(WeirError):
    """A path that cannot be a topic (the database itself): YDB's SCHEME_ERROR."""

    code = "SCHEME_ERROR"


class PreconditionFailedError(WeirError):
    """A setting this kind of database does not take (metering mode outside serverless)."""

    code = "PRECONDITION_FAILED"


def as_weir_error(err: BaseException) -> WeirError:
    """The error as a WeirError; anything unexpected becomes INTERNAL (and is logged)."""
    if isinstance(err, WeirError):
        return err
    log.error("unexpected error in the YDB front: %r", err, exc_info=err)
    return InternalError(f"internal error: {err!r}")


def status_of(err: BaseException) -> int:
    """The Ydb.StatusIds value for an error."""
    return STATUS_BY_CODE.get(as_weir_error(err).code, StatusIds.INTERNAL_ERROR)


def grpc_code_of(status: int) -> grpc.StatusCode:
    return _GRPC_BY_STATUS.get(status, grpc.StatusCode.ABORTED)


def issue(message: str) -> Any:
    """One Ydb.Issue.IssueMessage (severity 1 = error), as the SDK prints it."""
    return ydb_issue_message_pb2.IssueMessage(message=message, severity=1)


def operation(result: Message | None = None, error: BaseException | None = None) -> Any:
    """A completed ``Ydb.Operations.Operation``: SUCCESS with an Any-packed result, or the
    error's status and message."""
    if error is not None:
        err = as_weir_error(error)
        return ydb_operation_pb2.Operation(
            ready=True, status=status_of(err), issues=[issue(err.message)]
        )
    op = ydb_operation_pb2.Operation(ready=True, status=SUCCESS)
    if result is not None:
        packed = any_pb2.Any()
        packed.Pack(result)
        op.result.CopyFrom(packed)
    return op


async def end_stream(
    context: grpc.aio.ServicerContext, from_server: Any, err: BaseException
) -> None:
    """Tell the client why its stream ends (a FromServer with the status), then end the call
    with a gRPC error: never with OK, which the sync SDK waits on for ever."""
    werr = as_weir_error(err)
    status = status_of(werr)
    try:
        await context.write(from_server(status=status, issues=[issue(werr.message)]))
    except Exception:  # the client is gone; nothing more to tell it
        return
    await context.abort(grpc_code_of(status), werr.message)
