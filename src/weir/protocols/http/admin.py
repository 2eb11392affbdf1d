"""The Pulsar-style admin REST API (``/admin/v2``) on the server's HTTP port."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from weir.broker.broker import Broker
from weir.security import Security


class PulsarAdmin:
    def __init__(
        self, broker: Callable[[], Broker | None], security: Callable[[], Security]
    ) -> None:
        self._broker = broker
        self._security = security

    def mount(self, app: web.Application) -> None:
        pass
