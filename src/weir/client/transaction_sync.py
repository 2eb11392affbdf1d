"""The synchronous transaction (`weir.Transaction`), twin of
`weir.client.transaction.Transaction`: its calls run in the client's loop thread."""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType
from typing import Any

from weir.client import aio
from weir.client.loop import LoopThread
from weir.client.messages import Batch, Message
from weir.client.transaction import Transaction as AioTransaction
from weir.client.writer_sync import Writer


class Transaction:
    """A transaction (`weir.Client.transaction`): ``with client.transaction() as tx:``
    begins it and commits it at the end of the block (aborts it on an exception). See
    `weir.client.transaction`; the asyncio twin is `weir.aio.Client.transaction`."""

    def __init__(self, inner: AioTransaction, loop: LoopThread) -> None:
        self._inner = inner
        self._loop = loop

    @property
    def id(self) -> int | None:
        return self._inner.id

    @property
    def state(self) -> str:
        """new, open, ending, committed or aborted."""
        return self._inner.state

    @property
    def timeout_ms(self) -> int | None:
        return self._inner.timeout_ms

    def begin(self, *, call_timeout: float | None = 30.0) -> Transaction:
        self._loop.run(self._inner.begin(call_timeout=call_timeout))
        return self

    def writer(self, topic: str, **kwargs: Any) -> Writer:
        """A writer (same arguments as `Client.writer`) whose messages belong to the
        transaction; the commit flushes and closes it."""

        async def make() -> aio.Writer:
            return self._inner.writer(topic, **kwargs)

        return Writer(self._loop.run(make()), self._loop)

    def commit_offsets(
        self,
        items: Message | Batch | Iterable[Message | Batch],
        consumer: str,
        *,
        call_timeout: float | None = 30.0,
    ) -> None:
        """Commit ``consumer``'s offsets past ``items`` when the transaction commits."""
        self._loop.run(self._inner.commit_offsets(items, consumer, call_timeout=call_timeout))

    def commit(self, *, call_timeout: float | None = 60.0) -> None:
        self._loop.run(self._inner.commit(call_timeout=call_timeout))

    def abort(self, *, call_timeout: float | None = 30.0) -> None:
        self._loop.run(self._inner.abort(call_timeout=call_timeout))

    def __enter__(self) -> Transaction:
        if self.state == "new":
            self.begin()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._loop.run(self._inner.__aexit__(et, e, tb))
