"""weir: a durable, partitioned topic service.

    import weir
    client = weir.Client("127.0.0.1:2136")

The SDK names (Client, Writer, Reader, Message, ...) load on first use, so that
importing the server or the storage does not pull in the client.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_SDK = {
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
    "TenantInfo",
    "SubscriptionConsumer",
    "SubscriptionInfo",
    "TopicInfo",
    "Tls",
    "Token",
    "Transaction",
    "UserPassword",
    "WriteResult",
    "Writer",
    "key_shared_slot",
}


def __getattr__(name: str) -> Any:
    if name in _SDK:
        import weir.client

        return getattr(weir.client, name)
    raise AttributeError(f"module 'weir' has no attribute {name!r}")
