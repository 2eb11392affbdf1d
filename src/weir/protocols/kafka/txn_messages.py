"""The Kafka APIs of idempotent and transactional producers (KIP-98), declared as in
`weir.protocols.kafka.messages`: InitProducerId (a producer id and epoch, with or
without a transactional id), AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and
TxnOffsetCommit. `weir.protocols.kafka.messages.ALL` lists them with the others.
"""

from __future__ import annotations

from weir.protocols.kafka.codec import Api

INIT_PRODUCER_ID = Api(
    22,
    "InitProducerId",
    "0-4",
    2,
    """
    transactional_id string null=0+
    transaction_timeout_ms int32
    producer_id int64 3+ def=-1
    producer_epoch int16 3+ def=-1
    """,
    """
    throttle_time_ms int32
    error_code int16
    producer_id int64 def=-1
    producer_epoch int16
    """,
)

ADD_PARTITIONS_TO_TXN = Api(
    24,
    "AddPartitionsToTxn",
    "0-3",
    3,
    """
    transactional_id string
    producer_id int64
    producer_epoch int16
    topics []
      name string
      partitions []int32
    """,
    """
    throttle_time_ms int32
    results []
      name string
      results []
        partition_index int32
        error_code int16
    """,
)

ADD_OFFSETS_TO_TXN = Api(
    25,
    "AddOffsetsToTxn",
    "0-3",
    3,
    """
    transactional_id string
    producer_id int64
    producer_epoch int16
    group_id string
    """,
    """
    throttle_time_ms int32
    error_code int16
    """,
)

END_TXN = Api(
    26,
    "EndTxn",
    "0-3",
    3,
    """
    transactional_id string
    producer_id int64
    producer_epoch int16
    committed bool
    """,
    """
    throttle_time_ms int32
    error_code int16
    """,
)

TXN_OFFSET_COMMIT = Api(
    28,
    "TxnOffsetCommit",
    "0-3",
    3,
    """
    transactional_id string
    group_id string
    producer_id int64
    producer_epoch int16
    generation_id int32 3+ def=-1
    member_id string 3+
    group_instance_id string 3+ null=3+
    topics []
      name string
      partitions []
        partition_index int32
        committed_offset int64
        committed_leader_epoch int32 2+ def=-1
        committed_metadata string null=0+
    """,
    """
    throttle_time_ms int32
    topics []
      name string
      partitions []
        partition_index int32
        error_code int16
    """,
)
