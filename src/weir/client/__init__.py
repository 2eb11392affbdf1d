"""weir.client: the Python SDK over the native protocol (sync here, asyncio in `weir.aio`)."""

from weir.client.admin import Consumer, ConsumerInfo, ConsumerLag, PartitionInfo, TopicInfo
from weir.client.aio import RangeChunk
from weir.client.credentials import Token, UserPassword
from weir.client.messages import Batch, Message
from weir.client.reader import PartitionSession, PartitionSessionClosedError, Start
from weir.client.sync import Client, Reader, Writer
from weir.client.tls import Tls
from weir.client.writer_settings import WriteResult

__all__ = [
    "Batch",
    "Client",
    "Consumer",
    "ConsumerInfo",
    "ConsumerLag",
    "Message",
    "PartitionInfo",
    "PartitionSession",
    "PartitionSessionClosedError",
    "RangeChunk",
    "Reader",
    "Start",
    "Tls",
    "Token",
    "TopicInfo",
    "UserPassword",
    "WriteResult",
    "Writer",
]
