"""A private event loop in a daemon thread: what runs the sync client's streams."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from weir.errors import WeirTimeoutError

T = TypeVar("T")


class LoopThread:
    """Runs coroutines for synchronous callers."""

    def __init__(self, name: str = "weir-client") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` in the loop and wait for its result (its exception is re-raised here)."""
        self.check_outside()
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            if fut.done():
                raise  # the coroutine itself raised TimeoutError
            fut.cancel()
            raise WeirTimeoutError(f"operation did not finish within {timeout} s") from None

    def check_outside(self) -> None:
        """Raise when called in the loop's own thread, where waiting for it would hang."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("a sync weir call from inside a weir callback would deadlock")

    def stop(self) -> None:
        """Cancel what still runs in the loop, let it finish, then stop the thread.

        Stopping with tasks pending (a closed writer's stream, a half-read range)
        would make Python and gRPC print "Task was destroyed but it is pending".
        """
        if not self.loop.is_running():
            return

        async def drain() -> None:
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.loop.shutdown_asyncgens()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(drain(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self.loop.is_running():
            self.loop.close()
