"""Open YDB streams end when the server stops, also for a server without a stop event."""

from __future__ import annotations

import asyncio

from weir.protocols.ydb.shutdown import Shutdown


class PlainServer:
    """A server that only has a ``stopping`` flag (weir's own also sets an event)."""

    stopping = False


async def test_streams_waiting_on_a_plain_server_are_released_when_it_stops() -> None:
    server = PlainServer()
    shutdown = Shutdown(server, poll_s=0.001)
    waiters = [asyncio.create_task(shutdown.wait()) for _ in range(3)]  # one watcher for all
    done, _ = await asyncio.wait(waiters, timeout=0.05)
    assert not done and not shutdown.stopping
    server.stopping = True
    await asyncio.wait_for(asyncio.gather(*waiters), 10)
    assert shutdown.stopping
    await asyncio.wait_for(shutdown.wait(), 10)  # once stopped, at once
