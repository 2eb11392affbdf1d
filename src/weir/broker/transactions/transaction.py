"""One transaction as the coordinator sees it: who owns it, where it wrote, what
offsets it commits, its timeout and its state."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field


class TxnState(enum.Enum):
    OPEN = "open"
    ENDING = "ending"  # a commit or abort is under way
    COMMITTED = "committed"
    ABORTED = "aborted"


OffsetKey = tuple[str, int, str]  # (topic, partition, consumer)


@dataclass(eq=False)
class Transaction:
    """An open (or ending) transaction; see `weir.broker.transactions.coordinator`."""

    id: int
    timeout_ms: int
    owner: str = ""  # only this owner may use it ("" anyone): the YDB front's session id
    producer: str = ""  # the transactional id, "" for an anonymous transaction
    epoch: int | None = None  # the producer's epoch it was begun with (fencing)
    key: str | None = None  # a joinable transaction's key (the Spark sink's batch id)
    state: TxnState = TxnState.OPEN
    partitions: set[tuple[str, int]] = field(default_factory=set)  # where it may have written
    offsets: dict[OffsetKey, int] = field(default_factory=dict)
    inflight: int = 0  # writes queued and not yet answered
    timer: asyncio.TimerHandle | None = None
    _idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self._idle.set()

    def write_started(self) -> None:
        self.inflight += 1
        self._idle.clear()

    def write_done(self) -> None:
        self.inflight -= 1
        if self.inflight == 0:
            self._idle.set()

    async def writes_done(self) -> None:
        """Wait until every write admitted so far has been answered (stored or failed)."""
        await self._idle.wait()

    def describe(self) -> str:
        who = f" of producer {self.producer!r}" if self.producer else ""
        return f"transaction {self.id:#x}{who}"
