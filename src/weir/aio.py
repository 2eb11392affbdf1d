"""The asyncio SDK: the same names as the sync one in `weir`.

import weir.aio
async with weir.aio.Client("127.0.0.1:2136") as client:
    writer = client.writer("orders", producer_id="svc-1")
    await writer.write(b"hello")
    await writer.close()
"""

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
from weir.client.aio import Client, RangeChunk, Reader, Writer
from weir.client.credentials import Token, UserPassword
from weir.client.messages import Batch, Message
from weir.client.reader import PartitionSession, PartitionSessionClosedError, Start
from weir.client.subscription import DeadLetterPolicy, ReceivedMessage, SubscriptionConsumer
from weir.client.tls import Tls
from weir.client.transaction import Transaction
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
]
