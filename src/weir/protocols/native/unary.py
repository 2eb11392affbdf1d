"""The error handling of every unary method of the native front."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from weir.errors import WeirError
from weir.protocols.native.status import CODE_KEY, grpc_status

log = logging.getLogger("weir.native")
T = TypeVar("T")


def unary(
    fn: Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[T]],
) -> Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[T]]:
    """Turn WeirError into a gRPC status with the weir code in trailing metadata."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> T:
        try:
            return await fn(self, request, context)
        except WeirError as err:
            await context.abort(
                grpc_status(err), err.message, trailing_metadata=((CODE_KEY, err.code),)
            )
        except Exception as err:
            log.exception("%s failed", fn.__name__)
            await context.abort(
                grpc.StatusCode.INTERNAL,
                f"internal error: {err!r}",
                trailing_metadata=((CODE_KEY, "INTERNAL"),),
            )
        raise AssertionError("unreachable")

    return wrapper
