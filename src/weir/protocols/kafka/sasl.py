"""SASL for the Kafka front: the client's credentials, checked by `weir.security`.

Mechanisms: PLAIN (a weir user and password, static or stored) and OAUTHBEARER (a
weir JWT or login token as the bearer token). The exchange only extracts the
credential; `Security` decides (with its login throttle and audit log).
"""

from __future__ import annotations

import asyncio

from weir.errors import UnauthorizedError
from weir.security import Security
from weir.security.authenticator import BearerToken
from weir.security.principal import Principal

PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"
MECHANISMS = (PLAIN, OAUTHBEARER)


class SaslExchange:
    """One SASL authentication on one connection."""

    def __init__(self, mechanism: str, security: Security, peer: str) -> None:
        self.mechanism = mechanism
        self.security = security
        self.peer = peer

    async def step(self, data: bytes) -> tuple[bytes, Principal | None]:
        """The server's answer to the client's bytes and, once done, the principal."""
        if self.mechanism == PLAIN:
            return b"", await self._plain(data)
        return b"", self._oauthbearer(data)

    async def _plain(self, data: bytes) -> Principal:
        parts = data.split(b"\0")
        if len(parts) != 3:
            raise UnauthorizedError("SASL PLAIN: expected authzid NUL user NUL password")
        try:
            user, password = parts[1].decode(), parts[2].decode()
        except UnicodeDecodeError:
            raise UnauthorizedError("SASL PLAIN: user and password must be utf-8") from None
        return await asyncio.to_thread(self.security.check_password, user, password, self.peer)

    def _oauthbearer(self, data: bytes) -> Principal:
        # RFC 7628: gs2 header, then \x01-separated key=value pairs, auth=Bearer <token>
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise UnauthorizedError("SASL OAUTHBEARER: the message is not utf-8") from None
        token = ""
        for kv in text.split("\x01")[1:]:
            key, _, value = kv.partition("=")
            if key == "auth" and value.lower().startswith("bearer "):
                token = value[7:].strip()
        if not token:
            raise UnauthorizedError("SASL OAUTHBEARER: no bearer token")
        return self.security.authenticate(BearerToken(token))
