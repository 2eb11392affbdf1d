"""What a writer holds between `write()` and the ack: buffered messages as columns, and
encoded batches in flight (each request remembers the stream it was last sent on)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from weir.errors import BadRequestError

AnyFuture = asyncio.Future[Any] | concurrent.futures.Future[Any]


@dataclass(slots=True)
class Sent:
    """One encoded batch waiting for its ack."""

    data: bytes | memoryview
    count: int
    nbytes: int  # message bytes it accounts for in the buffer bound
    first_seq: int
    seqs: list[int] | None
    futures: list[AnyFuture | None] | None


@dataclass(slots=True)
class Request:
    batches: list[Sent]
    sent_on: int = -1  # id of the stream it was last sent on


@dataclass(slots=True)
class Buffer:
    """Messages not yet encoded, as parallel columns; rarely used fields are sparse
    (index -> value) so the common write costs two list appends. A message's size (data
    plus key, what the buffer's bound counts) is not stored: `sizes` derives the column
    when it is needed, once per request instead of once per write."""

    data: list[bytes] = field(default_factory=list)
    created: list[int] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)  # manual seq_no mode only
    keys: dict[int, bytes] = field(default_factory=dict)
    headers: dict[int, Mapping[str, str]] = field(default_factory=dict)
    futures: dict[int, AnyFuture] = field(default_factory=dict)

    def sizes(self) -> list[int]:
        """Each message's data plus key length, in order."""
        sizes = list(map(len, self.data))
        for i, k in self.keys.items():
            sizes[i] += len(k)
        return sizes

    def split(self, n: int) -> Buffer:
        """Remove and return the first ``n`` messages."""
        head = Buffer(self.data[:n], self.created[:n], self.seqs[:n])
        del self.data[:n], self.created[:n], self.seqs[:n]
        for name in ("keys", "headers", "futures"):
            src: dict[int, Any] = getattr(self, name)
            if src:
                setattr(head, name, {i: v for i, v in src.items() if i < n})
                setattr(self, name, {i - n: v for i, v in src.items() if i >= n})
        return head


def as_bytes(data: Any, what: str) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise BadRequestError(f"message {what} must be bytes or str, got {type(data).__name__}")
