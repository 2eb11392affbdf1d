"""Kafka error codes, and the one mapping of weir's typed errors onto them."""

from __future__ import annotations

import enum

from weir.errors import (
    AlreadyExistsError,
    BadRequestError,
    BatchFormatError,
    CommitFailedError,
    MessageTooLargeError,
    NotEmptyError,
    NotOwnerError,
    OffsetOutOfRangeError,
    OverloadedError,
    PartitionOverflowError,
    PermissionDeniedError,
    ProducerFencedError,
    StorageFullError,
    TierUnavailableError,
    TransactionBusyError,
    TransactionEndedError,
    UnauthorizedError,
    UnavailableError,
    UnknownConsumerError,
    UnknownPartitionError,
    UnknownTopicError,
    UnknownTransactionError,
    WeirError,
    WeirTimeoutError,
)


class ErrorCode(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    UNSUPPORTED_COMPRESSION_TYPE = 76
    MEMBER_ID_REQUIRED = 79
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90


class KafkaError(Exception):
    """An answer with a Kafka error code, raised inside a handler."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message or code.name


def error_code(exc: BaseException, *, group: bool = False) -> ErrorCode:
    """The Kafka code for a weir error (``group``: a refusal is about a group, not a topic)."""
    if isinstance(exc, KafkaError):
        return exc.code
    if isinstance(exc, PermissionDeniedError):
        return (
            ErrorCode.GROUP_AUTHORIZATION_FAILED if group else ErrorCode.TOPIC_AUTHORIZATION_FAILED
        )
    if isinstance(exc, UnauthorizedError):
        return ErrorCode.SASL_AUTHENTICATION_FAILED
    if isinstance(exc, UnknownTopicError | UnknownPartitionError):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(exc, UnknownConsumerError):
        return ErrorCode.GROUP_ID_NOT_FOUND
    if isinstance(exc, AlreadyExistsError):
        return ErrorCode.TOPIC_ALREADY_EXISTS
    if isinstance(exc, MessageTooLargeError):
        return ErrorCode.MESSAGE_TOO_LARGE
    if isinstance(exc, OffsetOutOfRangeError):
        return ErrorCode.OFFSET_OUT_OF_RANGE
    if isinstance(exc, BatchFormatError):
        return ErrorCode.CORRUPT_MESSAGE
    if isinstance(exc, ProducerFencedError):
        return ErrorCode.PRODUCER_FENCED
    if isinstance(exc, UnknownTransactionError):
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if isinstance(exc, TransactionBusyError):
        return ErrorCode.CONCURRENT_TRANSACTIONS
    if isinstance(exc, TransactionEndedError):
        return ErrorCode.INVALID_TXN_STATE
    if isinstance(exc, NotEmptyError):
        return ErrorCode.NON_EMPTY_GROUP
    if isinstance(exc, OverloadedError | PartitionOverflowError):
        # retryable on every client; Kafka's own answer to a full log is a storage error
        return ErrorCode.NOT_ENOUGH_REPLICAS
    if isinstance(exc, StorageFullError | CommitFailedError | TierUnavailableError):
        return ErrorCode.KAFKA_STORAGE_ERROR
    if isinstance(exc, WeirTimeoutError):
        return ErrorCode.REQUEST_TIMED_OUT
    if isinstance(exc, NotOwnerError):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER  # the client refreshes its metadata
    if isinstance(exc, UnavailableError):
        return ErrorCode.LEADER_NOT_AVAILABLE
    if isinstance(exc, BadRequestError):
        return ErrorCode.INVALID_REQUEST
    if isinstance(exc, WeirError):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return ErrorCode.UNKNOWN_SERVER_ERROR
