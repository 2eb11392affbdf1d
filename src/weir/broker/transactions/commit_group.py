"""One transaction end across partitions: every partition's marker in one KV transaction.

The coordinator queues the end on each partition actor the transaction wrote to (all
in one step, see `weir.broker.partition_actor`). Each actor, when the end reaches
the head of its queue, prepares its marker change and hands it here, then waits.
Once every actor has answered, the coordinator commits all their ops (and the
transaction's consumer offsets) as one job of the group committer, then applies
every change, or aborts every change, before any actor moves on: so readers of
any partition see the whole outcome or none of it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from weir.errors import WeirError

if TYPE_CHECKING:
    from weir.broker.partition_actor import PartitionActor
    from weir.storage.partition import PreparedChange


class CommitGroup:
    """Gathers the prepared marker changes of ``size`` partition actors."""

    def __init__(self, size: int) -> None:
        loop = asyncio.get_running_loop()
        self._waiting = size
        self.changes: list[tuple[PartitionActor, PreparedChange]] = []
        self.errors: list[BaseException] = []
        self._all_in: asyncio.Future[None] = loop.create_future()
        self._finished: asyncio.Future[None] = loop.create_future()
        if size == 0:
            self._all_in.set_result(None)

    # ------------------------------------------------------------------ actor side

    def prepared(self, actor: PartitionActor, change: PreparedChange | None) -> None:
        """``actor`` prepared its marker (None: the transaction wrote nothing there)."""
        if change is not None:
            self.changes.append((actor, change))
        self._answered()

    def failed(self, exc: BaseException) -> None:
        """An actor could not prepare its marker (closed, damaged, a bug)."""
        self.errors.append(exc)
        self._answered()

    def _answered(self) -> None:
        self._waiting -= 1
        if self._waiting == 0 and not self._all_in.done():
            self._all_in.set_result(None)

    async def finished(self) -> None:
        """Wait until the coordinator applied or aborted this actor's change."""
        await asyncio.shield(self._finished)

    # ------------------------------------------------------------------ coordinator side

    async def gather(self) -> list[tuple[PartitionActor, PreparedChange]]:
        """Wait for every actor; raise the first failure (after aborting what was prepared)."""
        await self._all_in
        if self.errors:
            self.abort()
            err = self.errors[0]
            raise err if isinstance(err, WeirError) else WeirError(repr(err))
        return self.changes

    def apply(self) -> None:
        """The ops are durable: make every change visible, in one step, and wake readers."""
        for actor, change in self.changes:
            actor.log.apply(change)
        for actor, _ in self.changes:
            actor.notify_readers()
        self._finish()

    def abort(self) -> None:
        """The ops were not committed: every partition stays as it was."""
        for actor, change in self.changes:
            actor.log.abort(change)
        self._finish()

    def _finish(self) -> None:
        if not self._finished.done():
            self._finished.set_result(None)
