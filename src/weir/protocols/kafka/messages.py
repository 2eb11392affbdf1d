"""Every Kafka API weir serves, declared once per API: key, versions served, the first
flexible version, and the request and response schemas (the text form of
`weir.protocols.kafka.codec`). Only the versions listed are advertised in ApiVersions.
The producer-id and transaction APIs live in `weir.protocols.kafka.txn_messages`; `ALL`
and `BY_KEY` here are the one registry of both.

Field names are Kafka's, in snake_case; versions beyond the range served are left out.
"""

from __future__ import annotations

from weir.protocols.kafka.codec import Api
from weir.protocols.kafka.txn_messages import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    INIT_PRODUCER_ID,
    TXN_OFFSET_COMMIT,
)

PRODUCE = Api(
    0,
    "Produce",
    "3-9",
    9,
    """
    transactional_id string null=0+
    acks int16
    timeout_ms int32
    topic_data []
      name string
      partition_data []
        index int32
        records records null=0+
    """,
    """
    responses []
      name string
      partition_responses []
        index int32
        error_code int16
        base_offset int64
        log_append_time_ms int64 def=-1
        log_start_offset int64 5+ def=-1
        record_errors [] 8+
          batch_index int32
          batch_index_error_message string null=0+
        error_message string 8+ null=8+
    throttle_time_ms int32
    """,
)

FETCH = Api(
    1,
    "Fetch",
    "4-12",
    12,
    """
    cluster_id string 12+ null=12+ tag=0
    replica_id int32 def=-1
    max_wait_ms int32
    min_bytes int32
    max_bytes int32 def=2147483647
    isolation_level int8
    session_id int32 7+
    session_epoch int32 7+ def=-1
    topics []
      topic string
      partitions []
        partition int32
        current_leader_epoch int32 9+ def=-1
        fetch_offset int64
        last_fetched_epoch int32 12+ def=-1
        log_start_offset int64 5+ def=-1
        partition_max_bytes int32
    forgotten_topics_data [] 7+
      topic string
      partitions []int32
    rack_id string 11+
    """,
    """
    throttle_time_ms int32
    error_code int16 7+
    session_id int32 7+
    responses []
      topic string
      partitions []
        partition_index int32
        error_code int16
        high_watermark int64
        last_stable_offset int64 def=-1
        log_start_offset int64 5+ def=-1
        aborted_transactions [] null=0+
          producer_id int64
          first_offset int64
        preferred_read_replica int32 11+ def=-1
        records records null=0+
    """,
)

LIST_OFFSETS = Api(
    2,
    "ListOffsets",
    "1-7",
    6,
    """
    replica_id int32
    isolation_level int8 2+
    topics []
      name string
      partitions []
        partition_index int32
        current_leader_epoch int32 4+ def=-1
        timestamp int64
    """,
    """
    throttle_time_ms int32 2+
    topics []
      name string
      partitions []
        partition_index int32
        error_code int16
        timestamp int64 def=-1
        offset int64 def=-1
        leader_epoch int32 4+ def=-1
    """,
)

METADATA = Api(
    3,
    "Metadata",
    "0-12",
    9,
    """
    topics [] null=1+
      topic_id uuid 10+
      name string null=10+
    allow_auto_topic_creation bool 4+
    include_cluster_authorized_operations bool 8-10
    include_topic_authorized_operations bool 8+
    """,
    """
    throttle_time_ms int32 3+
    brokers []
      node_id int32
      host string
      port int32
      rack string 1+ null=1+
    cluster_id string 2+ null=2+
    controller_id int32 1+ def=-1
    topics []
      error_code int16
      name string null=12+
      topic_id uuid 10+
      is_internal bool 1+
      partitions []
        error_code int16
        partition_index int32
        leader_id int32
        leader_epoch int32 7+ def=-1
        replica_nodes []int32
        isr_nodes []int32
        offline_replicas []int32 5+
      topic_authorized_operations int32 8+ def=-2147483648
    cluster_authorized_operations int32 8-10 def=-2147483648
    """,
)

OFFSET_COMMIT = Api(
    8,
    "OffsetCommit",
    "0-8",
    8,
    """
    group_id string
    generation_id int32 1+ def=-1
    member_id string 1+
    group_instance_id string 7+ null=7+
    retention_time_ms int64 2-4 def=-1
    topics []
      name string
      partitions []
        partition_index int32
        committed_offset int64
        committed_leader_epoch int32 6+ def=-1
        commit_timestamp int64 1 def=-1
        committed_metadata string null=0+
    """,
    """
    throttle_time_ms int32 3+
    topics []
      name string
      partitions []
        partition_index int32
        error_code int16
    """,
)

OFFSET_FETCH = Api(
    9,
    "OffsetFetch",
    "0-8",
    6,
    """
    group_id string 0-7
    topics [] 0-7 null=2-7
      name string
      partition_indexes []int32
    groups [] 8+
      group_id string
      topics [] null=8+
        name string
        partition_indexes []int32
    require_stable bool 7+
    """,
    """
    throttle_time_ms int32 3+
    topics [] 0-7
      name string
      partitions []
        partition_index int32
        committed_offset int64
        committed_leader_epoch int32 5+ def=-1
        metadata string null=0+
        error_code int16
    error_code int16 2-7
    groups [] 8+
      group_id string
      topics []
        name string
        partitions []
          partition_index int32
          committed_offset int64
          committed_leader_epoch int32 def=-1
          metadata string null=0+
          error_code int16
      error_code int16
    """,
)

FIND_COORDINATOR = Api(
    10,
    "FindCoordinator",
    "0-4",
    3,
    """
    key string 0-3
    key_type int8 1+
    coordinator_keys []string 4+
    """,
    """
    throttle_time_ms int32 1+
    error_code int16 0-3
    error_message string 1-3 null=1-3
    node_id int32 0-3
    host string 0-3
    port int32 0-3
    coordinators [] 4+
      key string
      node_id int32
      host string
      port int32
      error_code int16
      error_message string null=0+
    """,
)

JOIN_GROUP = Api(
    11,
    "JoinGroup",
    "0-9",
    6,
    """
    group_id string
    session_timeout_ms int32
    rebalance_timeout_ms int32 1+ def=-1
    member_id string
    group_instance_id string 5+ null=5+
    protocol_type string
    protocols []
      name string
      metadata bytes
    reason string 8+ null=8+
    """,
    """
    throttle_time_ms int32 2+
    error_code int16
    generation_id int32 def=-1
    protocol_type string 7+ null=7+
    protocol_name string null=7+
    leader string
    skip_assignment bool 9+
    member_id string
    members []
      member_id string
      group_instance_id string 5+ null=5+
      metadata bytes
    """,
)

HEARTBEAT = Api(
    12,
    "Heartbeat",
    "0-4",
    4,
    """
    group_id string
    generation_id int32
    member_id string
    group_instance_id string 3+ null=3+
    """,
    """
    throttle_time_ms int32 1+
    error_code int16
    """,
)

LEAVE_GROUP = Api(
    13,
    "LeaveGroup",
    "0-5",
    4,
    """
    group_id string
    member_id string 0-2
    members [] 3+
      member_id string
      group_instance_id string null=0+
      reason string 5+ null=5+
    """,
    """
    throttle_time_ms int32 1+
    error_code int16
    members [] 3+
      member_id string
      group_instance_id string null=0+
      error_code int16
    """,
)

SYNC_GROUP = Api(
    14,
    "SyncGroup",
    "0-5",
    4,
    """
    group_id string
    generation_id int32
    member_id string
    group_instance_id string 3+ null=3+
    protocol_type string 5+ null=5+
    protocol_name string 5+ null=5+
    assignments []
      member_id string
      assignment bytes
    """,
    """
    throttle_time_ms int32 1+
    error_code int16
    protocol_type string 5+ null=5+
    protocol_name string 5+ null=5+
    assignment bytes
    """,
)

DESCRIBE_GROUPS = Api(
    15,
    "DescribeGroups",
    "0-5",
    5,
    """
    groups []string
    include_authorized_operations bool 3+
    """,
    """
    throttle_time_ms int32 1+
    groups []
      error_code int16
      group_id string
      group_state string
      protocol_type string
      protocol_data string
      members []
        member_id string
        group_instance_id string 4+ null=4+
        client_id string
        client_host string
        member_metadata bytes
        member_assignment bytes
      authorized_operations int32 3+ def=-2147483648
    """,
)

LIST_GROUPS = Api(
    16,
    "ListGroups",
    "0-4",
    3,
    """
    states_filter []string 4+
    """,
    """
    throttle_time_ms int32 1+
    error_code int16
    groups []
      group_id string
      protocol_type string
      group_state string 4+
    """,
)

SASL_HANDSHAKE = Api(
    17,
    "SaslHandshake",
    "0-1",
    None,
    """
    mechanism string
    """,
    """
    error_code int16
    mechanisms []string
    """,
)

API_VERSIONS = Api(
    18,
    "ApiVersions",
    "0-3",
    3,
    """
    client_software_name string 3+
    client_software_version string 3+
    """,
    """
    error_code int16
    api_keys []
      api_key int16
      min_version int16
      max_version int16
    throttle_time_ms int32 1+
    """,
)

CREATE_TOPICS = Api(
    19,
    "CreateTopics",
    "0-7",
    5,
    """
    topics []
      name string
      num_partitions int32
      replication_factor int16
      assignments []
        partition_index int32
        broker_ids []int32
      configs []
        name string
        value string null=0+
    timeout_ms int32
    validate_only bool 1+
    """,
    """
    throttle_time_ms int32 2+
    topics []
      name string
      topic_id uuid 7+
      error_code int16
      error_message string 1+ null=0+
      topic_config_error_code int16 5+ tag=0
      num_partitions int32 5+ def=-1
      replication_factor int16 5+ def=-1
      configs [] 5+ null=5+
        name string
        value string null=0+
        read_only bool
        config_source int8 def=-1
        is_sensitive bool
    """,
)

DELETE_TOPICS = Api(
    20,
    "DeleteTopics",
    "0-6",
    4,
    """
    topics [] 6+
      name string null=0+
      topic_id uuid
    topic_names []string 0-5
    timeout_ms int32
    """,
    """
    throttle_time_ms int32 1+
    responses []
      name string null=6+
      topic_id uuid 6+
      error_code int16
      error_message string 5+ null=5+
    """,
)

DELETE_RECORDS = Api(
    21,
    "DeleteRecords",
    "0-2",
    2,
    """
    topics []
      name string
      partitions []
        partition_index int32
        offset int64
    timeout_ms int32
    """,
    """
    throttle_time_ms int32
    topics []
      name string
      partitions []
        partition_index int32
        low_watermark int64
        error_code int16
    """,
)

DESCRIBE_CONFIGS = Api(
    32,
    "DescribeConfigs",
    "0-4",
    4,
    """
    resources []
      resource_type int8
      resource_name string
      configuration_keys []string null=0+
    include_synonyms bool 1+
    include_documentation bool 3+
    """,
    """
    throttle_time_ms int32
    results []
      error_code int16
      error_message string null=0+
      resource_type int8
      resource_name string
      configs []
        name string
        value string null=0+
        read_only bool
        is_default bool 0
        config_source int8 1+ def=-1
        is_sensitive bool
        synonyms [] 1+
          name string
          value string null=0+
          source int8
        config_type int8 3+
        documentation string 3+ null=0+
    """,
)

ALTER_CONFIGS = Api(
    33,
    "AlterConfigs",
    "0-2",
    2,
    """
    resources []
      resource_type int8
      resource_name string
      configs []
        name string
        value string null=0+
    validate_only bool
    """,
    """
    throttle_time_ms int32
    responses []
      error_code int16
      error_message string null=0+
      resource_type int8
      resource_name string
    """,
)

SASL_AUTHENTICATE = Api(
    36,
    "SaslAuthenticate",
    "0-2",
    2,
    """
    auth_bytes bytes
    """,
    """
    error_code int16
    error_message string null=0+
    auth_bytes bytes
    session_lifetime_ms int64 1+
    """,
)

CREATE_PARTITIONS = Api(
    37,
    "CreatePartitions",
    "0-3",
    2,
    """
    topics []
      name string
      count int32
      assignments [] null=0+
        broker_ids []int32
    timeout_ms int32
    validate_only bool
    """,
    """
    throttle_time_ms int32
    results []
      name string
      error_code int16
      error_message string null=0+
    """,
)

DELETE_GROUPS = Api(
    42,
    "DeleteGroups",
    "0-2",
    2,
    """
    groups_names []string
    """,
    """
    throttle_time_ms int32
    results []
      group_id string
      error_code int16
    """,
)

INCREMENTAL_ALTER_CONFIGS = Api(
    44,
    "IncrementalAlterConfigs",
    "0-1",
    1,
    """
    resources []
      resource_type int8
      resource_name string
      configs []
        name string
        config_operation int8
        value string null=0+
    validate_only bool
    """,
    """
    throttle_time_ms int32
    responses []
      error_code int16
      error_message string null=0+
      resource_type int8
      resource_name string
    """,
)

OFFSET_DELETE = Api(
    47,
    "OffsetDelete",
    "0",
    None,
    """
    group_id string
    topics []
      name string
      partitions []
        partition_index int32
    """,
    """
    error_code int16
    throttle_time_ms int32
    topics []
      name string
      partitions []
        partition_index int32
        error_code int16
    """,
)

DESCRIBE_CLUSTER = Api(
    60,
    "DescribeCluster",
    "0",
    0,
    """
    include_cluster_authorized_operations bool
    """,
    """
    throttle_time_ms int32
    error_code int16
    error_message string null=0+
    cluster_id string
    controller_id int32 def=-1
    brokers []
      broker_id int32
      host string
      port int32
      rack string null=0+
    cluster_authorized_operations int32 def=-2147483648
    """,
)

ALL: tuple[Api, ...] = (
    PRODUCE,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    FIND_COORDINATOR,
    JOIN_GROUP,
    HEARTBEAT,
    LEAVE_GROUP,
    SYNC_GROUP,
    DESCRIBE_GROUPS,
    LIST_GROUPS,
    SASL_HANDSHAKE,
    API_VERSIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    DELETE_RECORDS,
    INIT_PRODUCER_ID,
    ADD_PARTITIONS_TO_TXN,
    ADD_OFFSETS_TO_TXN,
    END_TXN,
    TXN_OFFSET_COMMIT,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    SASL_AUTHENTICATE,
    CREATE_PARTITIONS,
    DELETE_GROUPS,
    INCREMENTAL_ALTER_CONFIGS,
    OFFSET_DELETE,
    DESCRIBE_CLUSTER,
)

BY_KEY: dict[int, Api] = {api.key: api for api in ALL}
