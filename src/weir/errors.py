"""The one error hierarchy of weir, shared by storage, broker, fronts and SDK.

Every error says whether retrying the same operation later can succeed
(``retryable``). Each class has a stable ``code`` so that an error crosses the
wire as (code, message) and is rebuilt as the same class on the client side.
"""

from __future__ import annotations

import re
from typing import ClassVar


class WeirError(Exception):
    """Base of every error weir raises on purpose."""

    code: ClassVar[str] = "INTERNAL"
    retryable: ClassVar[bool] = False

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.__class__.__name__)
        self.message = message or self.__class__.__name__


class RetryableError(WeirError):
    """The operation may succeed if tried again later (after backoff)."""

    retryable = True
    code = "UNAVAILABLE"


class FatalError(WeirError):
    """Retrying the same operation will fail the same way."""

    code = "INTERNAL"


# --- retryable -------------------------------------------------------------


class UnavailableError(RetryableError):
    """The server is shutting down, starting, or the connection was lost."""

    code = "UNAVAILABLE"


class NotOwnerError(UnavailableError):
    """Cluster mode: this broker does not serve the partition. Another broker owns it
    (``owner``, at ``generation``, reachable at ``endpoints``: {"native": "host:port",
    ...}), or nobody does while it moves (``owner`` empty). Retryable: the SDK asks a
    broker who owns it (the Lookup call) and goes there."""

    code = "NOT_OWNER"

    def __init__(
        self,
        message: str = "",
        *,
        topic: str = "",
        partition: int = -1,
        owner: str = "",
        generation: int = 0,
        endpoints: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.owner = owner
        self.generation = generation
        self.endpoints = dict(endpoints or {})


class OverloadedError(RetryableError):
    """Backpressure: too many bytes in flight for a session or partition."""

    code = "OVERLOADED"


class PartitionOverflowError(RetryableError):
    """The partition reached its size or message limit; space frees up as retention runs."""

    code = "PARTITION_OVERFLOW"


class BacklogQuotaExceededError(PartitionOverflowError):
    """The partition's backlog (bytes its important consumers have not read) passed the
    topic's backlog_quota_bytes policy; writes resume as they catch up."""

    code = "BACKLOG_QUOTA_EXCEEDED"


class StorageFullError(RetryableError):
    """The storage (disk or LMDB map) is full; nothing was written."""

    code = "STORAGE_FULL"


class CommitFailedError(RetryableError):
    """The durable commit failed (or an earlier queued write of the partition did); nothing was written."""

    code = "COMMIT_FAILED"


class StaleGenerationError(RetryableError):
    """A write named a partition generation that is no longer current: describe again."""

    code = "STALE_GENERATION"


class TokenRejectedError(RetryableError):
    """The server no longer accepts the auth token sent (expired, or signed before its
    secret or the user's password changed). Retryable: a client holding a user and
    password logs in again and retries; with a wrong password that login then fails."""

    code = "TOKEN_REJECTED"


class WeirTimeoutError(RetryableError):
    """An operation did not finish within its timeout."""

    code = "TIMEOUT"


class DeliveryTimeoutError(WeirTimeoutError):
    """A writer's messages went unacknowledged for its delivery timeout, so it gave up.

    ``reason`` is the last error behind the wait (server unreachable, partition
    full, overloaded...), None when the server simply did not answer. The
    writer is failed: a new writer may succeed once the cause is gone.
    """

    code = "DELIVERY_TIMEOUT"

    def __init__(self, message: str, reason: WeirError | None = None) -> None:
        super().__init__(message)
        self.reason = reason


class TierUnavailableError(RetryableError):
    """The object store of the tiered storage cannot be reached or is failing: writes go
    on locally, reads of offloaded offsets fail with this until it is back."""

    code = "TIER_UNAVAILABLE"


# --- fatal -----------------------------------------------------------------


class BadRequestError(FatalError):
    """The request is invalid (wrong types, bad values)."""

    code = "BAD_REQUEST"


class BatchFormatError(BadRequestError):
    """A batch is corrupt or truncated (bad magic, CRC, lengths)."""

    code = "BAD_BATCH"


class MessageTooLargeError(BadRequestError):
    """A message or batch is larger than the configured limit."""

    code = "MESSAGE_TOO_LARGE"


class OffsetOutOfRangeError(BadRequestError):
    """An offset past the partition's end (on the wire it is a BAD_REQUEST)."""


class NotFoundError(FatalError):
    """A named object does not exist."""

    code = "NOT_FOUND"


class UnknownTopicError(NotFoundError):
    code = "UNKNOWN_TOPIC"


class UnknownPartitionError(NotFoundError):
    code = "UNKNOWN_PARTITION"


class UnknownConsumerError(NotFoundError):
    code = "UNKNOWN_CONSUMER"


class UnknownTenantError(NotFoundError):
    code = "UNKNOWN_TENANT"


class UnknownNamespaceError(NotFoundError):
    code = "UNKNOWN_NAMESPACE"


class NotEmptyError(FatalError):
    """A tenant or namespace still holds namespaces or topics, so it cannot be deleted."""

    code = "NOT_EMPTY"


class TooManyProducersError(FatalError):
    """The topic has as many live producers as its max_producers_per_topic policy allows."""

    code = "TOO_MANY_PRODUCERS"


class TooManyConsumersError(FatalError):
    """The topic has as many live read sessions as its max_consumers_per_topic policy allows."""

    code = "TOO_MANY_CONSUMERS"


class UnknownSubscriptionError(NotFoundError):
    code = "UNKNOWN_SUBSCRIPTION"


class TopicTerminatedError(FatalError):
    """The topic was terminated (Pulsar's terminate): it takes no more messages, ever."""

    code = "TOPIC_TERMINATED"


class AlreadyExistsError(FatalError):
    code = "ALREADY_EXISTS"


class ConsumerBusyError(FatalError):
    """A subscription refuses this consumer: an Exclusive one already has a consumer,
    or its consumers use another subscription type."""

    code = "CONSUMER_BUSY"


class UnauthorizedError(FatalError):
    code = "UNAUTHORIZED"


class PermissionDeniedError(FatalError):
    """The caller is authenticated but has no grant for this operation on this resource."""

    code = "PERMISSION_DENIED"


class CorruptDataError(FatalError):
    """Stored bytes fail their checksum or structure: never served."""

    code = "CORRUPT_DATA"

    def __init__(self, message: str, *, partition: str = "", offset: int | None = None) -> None:
        where = f" (partition {partition}" if partition else ""
        if where and offset is not None:
            where += f", offset {offset}"
        if where:
            where += ")"
        super().__init__(message + where)
        self.partition = partition
        self.offset = offset


class UnsupportedCodecError(FatalError):
    """Messages compressed with a codec weir only records (a ydb SDK custom codec, LZOP):
    stored as written, readable with the ydb SDK and its own decoder."""

    code = "UNSUPPORTED_CODEC"


class DataLossError(FatalError):
    """Requested offsets were removed by retention."""

    code = "DATA_LOSS"


class ClosedError(FatalError):
    """The writer, reader, client or server has been closed."""

    code = "CLOSED"


class ProducerFencedError(FatalError):
    """This producer must stop: a newer write session with the same producer_id took
    over, or an exclusive producer (ExclusiveWithFencing, or any exclusive producer
    since this one's epoch) took the topic."""

    code = "PRODUCER_FENCED"


class ProducerBusyError(FatalError):
    """The producer's access mode conflicts with the topic's producers: an exclusive
    producer holds the topic, or an Exclusive one asked while others write."""

    code = "PRODUCER_BUSY"


class UnknownTransactionError(NotFoundError):
    """No such transaction: never begun here, or forgotten (ended long ago, or open when
    the server restarted: a restart aborts every open transaction)."""

    code = "UNKNOWN_TRANSACTION"


class TransactionEndedError(FatalError):
    """The transaction has ended already (committed, or aborted: by the client, by its
    timeout, because a newer instance of its producer fenced it, or because one of its
    writes failed); the message says which. Begin a new one."""

    code = "TRANSACTION_ENDED"


class TransactionCommittedError(TransactionEndedError):
    """The transaction was committed already (a client that retried its commit after a
    lost answer learns here that the commit landed)."""

    code = "TRANSACTION_COMMITTED"


class TransactionBusyError(FatalError):
    """The transactional producer has a transaction open already: end it first."""

    code = "TRANSACTION_BUSY"


class DataDirLockedError(FatalError):
    """Another weir process holds the data directory."""

    code = "DATA_DIR_LOCKED"


class TierError(FatalError):
    """The tier's object store refused a request for a reason retrying will not fix."""

    code = "TIER_ERROR"


class ObjectMissingError(TierError):
    """An object the tier's metadata names is not in the object store."""

    code = "TIER_OBJECT_MISSING"


class InternalError(FatalError):
    code = "INTERNAL"


def _all_subclasses(cls: type[WeirError]) -> list[type[WeirError]]:
    out: list[type[WeirError]] = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_all_subclasses(sub))
    return out


_BY_CODE: dict[str, type[WeirError]] = {}
for _cls in _all_subclasses(WeirError):
    _BY_CODE.setdefault(_cls.code, _cls)
_BY_CODE["UNAVAILABLE"] = UnavailableError
_BY_CODE["INTERNAL"] = InternalError


# "partition T/P is owned by broker B (generation G; native host:port, ...), not by X" or
# "partition T/P has no owner now ..." (weir.broker.cluster.partitions.not_owned)
_NOT_OWNER = re.compile(
    r"^partition (?P<topic>\S+)/(?P<partition>\d+) "
    r"(?:is owned by broker (?P<owner>\S+) \(generation (?P<generation>\d+)"
    r"(?:; (?P<endpoints>[^)]*))?\))?"
)


def not_owner_from_message(message: str) -> NotOwnerError:
    """A NOT_OWNER error from the wire with the fields its message names (the Lookup
    call is the way to learn the current owner; these say which partition to ask for)."""
    m = _NOT_OWNER.match(message)
    if m is None:
        return NotOwnerError(message)
    endpoints = {}
    for part in (m["endpoints"] or "").split(", "):
        front, _, where = part.partition(" ")
        if front and where:
            endpoints[front] = where
    return NotOwnerError(
        message,
        topic=m["topic"],
        partition=int(m["partition"]),
        owner=m["owner"] or "",
        generation=int(m["generation"] or 0),
        endpoints=endpoints,
    )


def error_from_code(code: str, message: str) -> WeirError:
    """Rebuild the error class named by a wire code (unknown codes become InternalError)."""
    cls = _BY_CODE.get(code, InternalError)
    if cls is CorruptDataError:
        return CorruptDataError(message)
    if cls is NotOwnerError:
        return not_owner_from_message(message)
    return cls(message)
