"""Errors across the native protocol: each weir code has its gRPC status, and a bare gRPC
failure (no weir code: the transport, or gRPC itself) becomes the right typed error."""

from __future__ import annotations

import grpc
import pytest

from weir import errors
from weir.errors import error_from_code
from weir.protocols.native.status import _GRPC, code_from_grpc, grpc_status

S = grpc.StatusCode


@pytest.mark.parametrize(
    ("status", "error", "retryable"),
    [
        (S.UNAVAILABLE, errors.UnavailableError, True),  # connection refused or dropped
        (S.CANCELLED, errors.UnavailableError, True),
        (S.UNKNOWN, errors.UnavailableError, True),
        (S.INTERNAL, errors.UnavailableError, True),  # "Internal error from Core"
        (S.ABORTED, errors.UnavailableError, True),
        (S.DEADLINE_EXCEEDED, errors.WeirTimeoutError, True),
        (S.RESOURCE_EXHAUSTED, errors.MessageTooLargeError, False),  # gRPC's size limit
        (S.INVALID_ARGUMENT, errors.BadRequestError, False),
        (S.UNIMPLEMENTED, errors.BadRequestError, False),
        (S.UNAUTHENTICATED, errors.UnauthorizedError, False),
        (S.NOT_FOUND, errors.UnavailableError, True),  # without a code: not the server's word
    ],
)
def test_a_bare_grpc_failure_becomes_a_typed_error(
    status: grpc.StatusCode, error: type[errors.WeirError], retryable: bool
) -> None:
    err = error_from_code(code_from_grpc(status), "details")
    assert type(err) is error and err.retryable is retryable


@pytest.mark.parametrize("code", sorted(_GRPC))
def test_every_weir_code_has_a_grpc_status_and_comes_back_as_its_class(code: str) -> None:
    err = error_from_code(code, "x")
    assert err.code == code  # the client rebuilds the class the server raised
    assert grpc_status(err) == _GRPC[code]


def test_an_error_without_a_mapping_is_internal() -> None:
    assert grpc_status(errors.InternalError("bug")) == S.INTERNAL
