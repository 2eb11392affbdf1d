"""weir's typed errors as Pulsar's ServerError codes (what the client retries, what it gives up on)."""

from __future__ import annotations

from weir.broker.schemas import IncompatibleSchemaError
from weir.errors import (
    BacklogQuotaExceededError,
    ConsumerBusyError,
    InternalError,
    NotFoundError,
    PermissionDeniedError,
    ProducerBusyError,
    ProducerFencedError,
    TooManyConsumersError,
    TooManyProducersError,
    TopicTerminatedError,
    UnauthorizedError,
    UnknownSubscriptionError,
    WeirError,
)
from weir.protocols.pulsar import pulsar_api_pb2 as pb
from weir.protocols.pulsar.codec import ProtocolError
from weir.protocols.pulsar.names import InvalidTopicNameError, NotServedError, TopicKindError


def as_weir_error(err: BaseException) -> WeirError:
    return err if isinstance(err, WeirError) else InternalError(f"unexpected server error: {err!r}")


def server_error(err: WeirError) -> pb.ServerError.ValueType:
    """The ServerError code that tells a Pulsar client what ``err`` means for it."""
    if isinstance(err, UnauthorizedError):
        return pb.AuthenticationError
    if isinstance(err, PermissionDeniedError):
        return pb.AuthorizationError
    if isinstance(err, UnknownSubscriptionError):
        return pb.SubscriptionNotFound
    if isinstance(err, NotFoundError):
        return pb.TopicNotFound
    if isinstance(err, ConsumerBusyError):
        return pb.ConsumerBusy
    if isinstance(err, ProducerFencedError):
        return pb.ProducerFenced
    if isinstance(err, ProducerBusyError | TooManyProducersError):
        return pb.ProducerBusy
    if isinstance(err, TooManyConsumersError):
        return pb.ConsumerBusy
    if isinstance(err, BacklogQuotaExceededError):
        return pb.ProducerBlockedQuotaExceededError
    if isinstance(err, TopicTerminatedError):
        return pb.TopicTerminatedError
    if isinstance(err, IncompatibleSchemaError):
        return pb.IncompatibleSchema
    if isinstance(err, NotServedError | TopicKindError | InvalidTopicNameError):
        # not InvalidTopicName: the C++ client retries that (and UnknownError) until its
        # operation timeout, then reports only "TimeOut"; NotAllowedError fails at once
        return pb.NotAllowedError
    if isinstance(err, ProtocolError):
        return pb.UnknownError
    if err.retryable:
        return pb.ServiceNotReady  # the client backs off and tries again
    return pb.UnknownError
