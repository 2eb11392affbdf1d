"""Connect (protocol version, authentication) and the recheck of a connection's streams
when users or grants change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from weir import __version__
from weir.errors import (
    UnauthorizedError,
    WeirError,
)
from weir.protocols.pulsar import pulsar_api_pb2 as pb
from weir.protocols.pulsar.consumer_commands import ConsumerCommands
from weir.protocols.pulsar.consumers import (
    PulsarConsumer,
)
from weir.protocols.pulsar.producer_commands import ProducerCommands
from weir.security.authenticator import BearerToken, ClientCertificate, Credential, UserPassword
from weir.security.grants import Permission

log = logging.getLogger("weir.pulsar")

T = pb.BaseCommand
PROTOCOL_VERSION = 19  # the newest version whose commands this front answers
SERVER_VERSION = f"weir-{__version__}"


class Handshake(ProducerCommands, ConsumerCommands):
    """Connect, and the recheck of a connection's streams when users or grants change."""

    def _credential(self, c: pb.CommandConnect) -> Credential | None:
        method = c.auth_method_name
        data = c.auth_data
        if method == "token":
            text = data.decode(errors="replace").strip()
            if text.lower().startswith("token:"):
                text = text[6:]
            return BearerToken(text) if text else None
        if method == "basic":
            user, sep, password = data.decode(errors="replace").partition(":")
            if not sep:
                raise UnauthorizedError("basic auth data must be 'user:password'")
            return UserPassword(user, password)
        if method == "tls" or (not method and self.certificate):
            if self.certificate is None:
                raise UnauthorizedError("TLS authentication needs a client certificate")
            return ClientCertificate(self.certificate)
        if method and method != "none":
            raise UnauthorizedError(
                f"authentication method {method!r} is not served: use token, basic or tls"
            )
        return None

    async def handle_connect(self, c: pb.CommandConnect) -> None:
        try:
            credential = self._credential(c)
            if isinstance(credential, UserPassword):
                principal = await asyncio.to_thread(self.security.authenticate, credential)
            else:
                principal = self.security.authenticate(credential)
        except WeirError as err:
            self.error(0, err)
            await asyncio.sleep(0)
            await self.close()
            return
        self.principal, self.credential = principal, credential
        self._stop_watching = self.security.watch(self._recheck, lambda: self.credential)
        version = min(c.protocol_version, PROTOCOL_VERSION)
        self.send(
            T(
                type=T.CONNECTED,
                connected=pb.CommandConnected(
                    server_version=SERVER_VERSION,
                    protocol_version=version,
                    max_message_size=self.settings.max_message_size,
                ),
            )
        )

    def _recheck(self) -> None:
        """Users or grants changed, or the credential expired. A caller whose credential is
        refused now loses the
        connection; a producer or consumer whose grant went is closed by the server (the
        client tries again and is refused); the others go on."""
        assert self.principal is not None
        if self._closed:
            return
        err = self.security.still_allowed(self.credential, self.principal, [])
        if err is not None:
            log.info("pulsar connection ended: %s", err.message, extra={"peer": self.peer})
            for t in list(self.tasks):
                t.cancel()
            for p in list(self.producers.values()):
                p.release()
            for c in list(self.consumers.values()):
                if isinstance(c, PulsarConsumer):
                    c.detach()
                else:
                    c.closed = True
            self._closed = True
            with contextlib.suppress(Exception):
                self.writer.transport.abort()
            return
        for p in list(self.producers.values()):
            why = self._still_allowed(p.checks)
            if why is not None:
                log.info("pulsar producer ended: %s", why.message, extra={"peer": self.peer})
                self._producer_closed_by_server(p)
        for c in list(self.consumers.values()):
            why = self._still_allowed(c.checks)
            if why is not None:
                log.info("pulsar consumer ended: %s", why.message, extra={"peer": self.peer})
                self._consumer_closed_by_server(c)

    def _still_allowed(self, checks: list[tuple[object, str, str]]) -> WeirError | None:
        assert self.principal is not None
        try:
            for permission, topic, operation in checks:
                assert permission is None or isinstance(permission, Permission)
                self.security.authorize(self.principal, permission, topic, operation, record=False)
        except WeirError as err:
            return err
        return None
