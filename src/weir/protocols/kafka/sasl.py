"""SASL for the Kafka front: the client's credentials, checked by `weir.security`.

Mechanisms: PLAIN (a weir user and password, static or stored), SCRAM-SHA-256 and
SCRAM-SHA-512 (the same users: static ones by their configured password, stored ones by
the SCRAM keys kept with their hash since their password was set) and OAUTHBEARER (a
weir JWT or login token as the bearer token). The exchange only carries the messages;
`Security` decides (with its login throttle and audit log).
"""

from __future__ import annotations

import asyncio

from weir.errors import UnauthorizedError
from weir.security import Security
from weir.security.authenticator import BearerToken
from weir.security.principal import Principal

PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, OAUTHBEARER)


class SaslExchange:
    """One SASL authentication on one connection."""

    def __init__(self, mechanism: str, security: Security, peer: str) -> None:
        self.mechanism = mechanism
        self.security = security
        self.peer = peer
        self._scram = security.scram_exchange(mechanism) if mechanism.startswith("SCRAM-") else None
        self._scram_started = False
        self.credential: BearerToken | None = None  # OAUTHBEARER's token, once it passed

    async def step(self, data: bytes) -> tuple[bytes, Principal | None]:
        """The server's answer to the client's bytes and, once done, the principal."""
        if self.mechanism == PLAIN:
            return b"", await self._plain(data)
        if self._scram is not None:
            if not self._scram_started:
                self._scram_started = True
                return self._scram.first(data), None
            reply, principal = self.security.scram_finish(self._scram, data, self.peer)
            return reply, principal
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
        principal = self.security.authenticate(BearerToken(token))
        self.credential = BearerToken(token)
        return principal
