"""Notice that the server is stopping, so open YDB streams end at once.

`weir.server.Server.stop` sets ``stopping`` and then gives open calls a grace
period; a topic stream never ends on its own, so without this every open
reader or writer would hold the shutdown for the whole grace. Sessions wait on
`Shutdown.wait` and end with UNAVAILABLE (after their pending acks and commit
answers), and the SDK reconnects once the server is back.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

POLL_S = 0.05


class ServerState(Protocol):
    """What the YDB front needs to know about the server around it."""

    @property
    def stopping(self) -> bool: ...


class Shutdown:
    """An event that is set once ``server.stopping`` becomes true (one watcher for all)."""

    def __init__(self, server: ServerState, poll_s: float = POLL_S) -> None:
        self.server = server
        self.poll_s = poll_s
        self._event = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None

    @property
    def stopping(self) -> bool:
        return self.server.stopping

    async def wait(self) -> None:
        event = getattr(self.server, "stopping_event", None)
        if isinstance(event, asyncio.Event):
            await event.wait()  # weir.server.Server says so itself
            return
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watch())
        await self._event.wait()

    async def _watch(self) -> None:
        # The server offers no stop callback, and polling a flag is cheap: one timer for
        # every stream together.
        while not self.server.stopping:
            await asyncio.sleep(self.poll_s)
        self._event.set()
