"""How the brokers of a cluster authenticate to each other: short-lived tokens signed with
the cluster's shared secret (``auth.cluster_secret``, the same on every broker).

A broker asking another for a client it has already checked (a Kafka group
coordinator reading or committing the offsets of a partition another broker owns,
`weir.protocols.peer_offsets`) sends ``authorization: Bearer weir-peer.<broker>.<expiry>.<sig>``,
an HMAC-SHA256 over the broker id and expiry with a key derived from the secret. The
receiving broker's `PeerTokens` (one of its authenticators) proves the principal
``broker:<id>`` with mechanism ``cluster``, which may do everything (`Security.is_superuser`):
it acts for a client the asking broker authorized. A token is made for each call and
is valid for `PEER_TTL_S`, so a captured one soon stops working.

The same secret gives the key weir's user tokens are signed with in a cluster
(`user_token_key`), so a token one broker issued at a login is valid on every broker.
Anyone holding the secret can act as any broker: keep it like a superuser's password.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time

from weir.errors import TokenRejectedError, UnauthorizedError
from weir.security.authenticator import BearerToken, Credential
from weir.security.principal import Principal

PEER_MECHANISM = "cluster"
PEER_PREFIX = "weir-peer."
PEER_TTL_S = 300.0
MIN_SECRET = 16  # characters of auth.cluster_secret


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _key(secret: str, purpose: bytes) -> bytes:
    return hmac.new(secret.encode(), b"weir cluster secret: " + purpose, hashlib.sha256).digest()


class PeerTokens:
    """Makes this broker's peer tokens and authenticates the other brokers' ones."""

    def __init__(self, secret: str, broker_id: str, *, ttl_s: float = PEER_TTL_S) -> None:
        self._key = _key(secret, b"peer calls")
        self._user_key = _key(secret, b"user tokens")
        self.broker_id = broker_id
        self.ttl_ms = int(ttl_s * 1000)

    def user_token_key(self) -> bytes:
        """What weir's user tokens are signed with on every broker of the cluster."""
        return self._user_key

    def _signature(self, broker_b64: str, expiry_ms: int) -> str:
        msg = f"{broker_b64}.{expiry_ms}".encode()
        return _b64(hmac.new(self._key, msg, hashlib.sha256).digest())

    def token(self) -> str:
        """A fresh token naming this broker."""
        broker_b64 = _b64(self.broker_id.encode())
        expiry = int(time.time() * 1000) + self.ttl_ms
        return f"{PEER_PREFIX}{broker_b64}.{expiry}.{self._signature(broker_b64, expiry)}"

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The gRPC metadata of a call to another broker's native port."""
        return (("authorization", f"Bearer {self.token()}"),)

    def authenticate(self, credential: Credential) -> Principal | None:
        """The broker a peer token names; None for any other credential."""
        if not isinstance(credential, BearerToken) or not credential.token.startswith(PEER_PREFIX):
            return None
        parts = credential.token[len(PEER_PREFIX) :].split(".")
        if len(credential.token) > 1024 or len(parts) != 3 or not parts[1].isdigit():
            raise UnauthorizedError(f"malformed auth {credential.name}")
        broker_b64, expiry_text, sig = parts
        expiry = int(expiry_text)
        if not hmac.compare_digest(sig, self._signature(broker_b64, expiry)):
            raise TokenRejectedError(
                f"invalid auth {credential.name}: not signed with this cluster's "
                "auth.cluster_secret"
            )
        if expiry <= time.time() * 1000:
            raise TokenRejectedError(f"auth {credential.name} expired")
        try:
            broker = base64.urlsafe_b64decode(broker_b64 + "=" * (-len(broker_b64) % 4)).decode()
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise UnauthorizedError(f"malformed auth {credential.name}") from None
        return Principal(f"broker:{broker}", PEER_MECHANISM)
