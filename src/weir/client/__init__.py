"""weir.client: the Python SDK over the native protocol (sync here, asyncio in `weir.aio`)."""

from weir.access_mode import AccessMode
from weir.client.admin import (
    CompactionInfo,
    Consumer,
    ConsumerInfo,
    ConsumerLag,
    NamespaceInfo,
    PartitionCompactionInfo,
    PartitionInfo,
    SubscriptionInfo,
    TenantInfo,
    TopicInfo,
)
from weir.client.aio import RangeChunk
from weir.client.credentials import Token, UserPassword
from weir.client.messages import Batch, Message
from weir.client.owners import PartitionOwner
from weir.client.reader import PartitionSession, PartitionSessionClosedError, Start
from weir.client.routing import key_shared_slot
from weir.client.subscription import DeadLetterPolicy, ReceivedMessage
from weir.client.subscription_sync import SubscriptionConsumer
from weir.client.sync import Client, Reader, Transaction, Writer
from weir.client.tls import Tls
from weir.client.writer_settings import WriteResult

__all__ = [
    "AccessMode",
    "Batch",
    "Client",
    "CompactionInfo",
    "Consumer",
    "ConsumerInfo",
    "ConsumerLag",
    "DeadLetterPolicy",
    "Message",
    "NamespaceInfo",
    "PartitionCompactionInfo",
    "PartitionInfo",
    "PartitionOwner",
    "PartitionSession",
    "PartitionSessionClosedError",
    "RangeChunk",
    "Reader",
    "ReceivedMessage",
    "Start",
    "SubscriptionConsumer",
    "SubscriptionInfo",
    "TenantInfo",
    "Tls",
    "Token",
    "TopicInfo",
    "Transaction",
    "UserPassword",
    "WriteResult",
    "Writer",
    "key_shared_slot",
]
