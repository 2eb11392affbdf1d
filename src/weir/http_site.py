"""One aiohttp application served on a host and port, started and stopped by its owner.

The server's HTTP endpoint (metrics, admin REST, console) and a bookie's metrics endpoint
both serve one. Port 0 picks a free port, read back after the start; a busy port is an
``OSError`` that names the address instead of aiohttp's bare errno text."""

from __future__ import annotations

import contextlib
import ssl

from aiohttp import web


class HttpSite:
    """The runner of one served application; ``start`` returns the bound port."""

    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None

    async def start(
        self,
        app: web.Application,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
    ) -> int:
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, port, shutdown_timeout=1.0, ssl_context=ssl_context)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise OSError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
        self._runner = runner
        return int(runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await self._runner.cleanup()
            self._runner = None
