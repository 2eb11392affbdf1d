"""weir's own session tokens: ``base64(user).expiry_ms.signature``, HMAC-SHA256 signed.

The secret lives in the broker's ``server`` table, so tokens stay valid across a
restart; the signature also covers a fingerprint of the user's password, so a
changed password or a removed user revokes them. A login answers a token and its
lifetime; the SDK logs in again before it runs out.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from weir.errors import TokenRejectedError, UnauthorizedError
from weir.security.authenticator import BearerToken, Credential
from weir.security.principal import Principal

TOKEN_TTL_S = 12 * 3600  # as YDB; clients log in again well before
_CACHE_LIMIT = 10_000
_SHAPE = re.compile(r"^[A-Za-z0-9_-]*\.[0-9]{1,19}\.[A-Za-z0-9_-]+$")


@dataclass(frozen=True, slots=True)
class IssuedToken:
    token: str = field(repr=False)
    expires_at_ms: int
    principal: Principal

    @property
    def expires_in_ms(self) -> int:
        return max(0, self.expires_at_ms - _now_ms())


def _now_ms() -> int:
    return int(time.time() * 1000)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenIssuer:
    """Issues tokens for authenticated principals and authenticates bearer tokens."""

    def __init__(
        self,
        secret: bytes,
        fingerprint: Callable[[str], bytes | None],
        *,
        ttl_s: float = TOKEN_TTL_S,
    ) -> None:
        self._secret = secret
        self._fingerprint = fingerprint
        self.ttl_ms = int(ttl_s * 1000)
        self._valid: dict[str, tuple[Principal, int]] = {}  # token -> (principal, expiry ms)

    def _signature(self, user: str, expiry_ms: int, fingerprint: bytes) -> str:
        msg = user.encode() + b"\x00" + str(expiry_ms).encode() + b"\x00" + fingerprint
        return _b64(hmac.new(self._secret, msg, hashlib.sha256).digest())

    def forget(self, user: str) -> None:
        """Drop the cached checks of ``user``'s tokens (its password changed or it is gone):
        the next use of each is checked against the new fingerprint."""
        self._valid = {t: v for t, v in self._valid.items() if v[0].name != user}

    def issue(self, principal: Principal) -> IssuedToken:
        fingerprint = self._fingerprint(principal.name)
        if fingerprint is None:
            raise UnauthorizedError(f"cannot issue a token for unknown user {principal.name!r}")
        expiry = _now_ms() + self.ttl_ms
        token = f"{_b64(principal.name.encode())}.{expiry}.{self._signature(principal.name, expiry, fingerprint)}"
        return IssuedToken(token, expiry, principal)

    @staticmethod
    def expiry(token: str) -> float | None:
        """When a token of this format expires (epoch seconds); None: not one of ours."""
        if not _SHAPE.match(token):
            return None
        return int(token.split(".")[1]) / 1000

    def authenticate(self, credential: Credential) -> Principal | None:
        """The principal of a bearer token of this format; None for another kind of credential."""
        if not isinstance(credential, BearerToken):
            return None
        token, name = credential.token, credential.name
        now = _now_ms()
        cached = self._valid.get(token)
        if cached is not None and cached[1] > now:
            return cached[0]
        if len(token) > 4096 or not _SHAPE.match(token):
            raise UnauthorizedError(f"malformed auth {name}")
        user_b64, expiry_text, sig = token.split(".")
        try:
            user = _unb64(user_b64).decode()
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise UnauthorizedError(f"malformed auth {name}") from None
        if _b64(user.encode()) != user_b64:  # one spelling per token: no unused bits set
            raise UnauthorizedError(f"malformed auth {name}")
        expiry = int(expiry_text)
        fingerprint = self._fingerprint(user)
        if fingerprint is None or not hmac.compare_digest(
            sig, self._signature(user, expiry, fingerprint)
        ):
            raise TokenRejectedError(f"invalid auth {name}")
        if expiry <= now:
            raise TokenRejectedError(f"auth {name} expired: log in again")
        if len(self._valid) >= _CACHE_LIMIT:
            self._valid.clear()
        principal = Principal(user, "token")
        self._valid[token] = (principal, expiry)
        return principal
