"""YDB static credentials: Auth.Login for the users in the config, and the ticket check.

The SDK logs in with user and password, then sends the token it got in the
``x-ydb-auth-ticket`` header of every call. A token is ``user.expiry.signature``
signed with HMAC-SHA256 under a secret kept in the broker's ``server`` table, so
tokens stay valid across a server restart; the signature also covers a hash of
the user's password, so changing or removing a user revokes its tokens. Calls
without a ticket are served when ``allow_anonymous`` is on; a ticket that is
present must be valid either way.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from typing import Any

import grpc

from weir.broker.broker import SERVER, Broker
from weir.errors import UnauthorizedError
from weir.protocols.ydb.protos import ydb_auth_pb2, ydb_auth_v1_pb2_grpc
from weir.protocols.ydb.status import operation
from weir.storage.kv import put

AUTH_HEADER = "x-ydb-auth-ticket"
SECRET_KEY = b"ydb_auth_secret"
TOKEN_TTL_S = 12 * 3600  # as YDB; the SDK logs in again every few minutes anyway
_CACHE_LIMIT = 10_000


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Authenticator:
    """Issues and checks tokens for the static users of ``broker.config``."""

    def __init__(self, broker: Broker, *, ttl_s: float = TOKEN_TTL_S) -> None:
        self.users = dict(broker.config.users)
        self.allow_anonymous = broker.config.allow_anonymous
        self.ttl_ms = int(ttl_s * 1000)
        self._secret = self._load_secret(broker)
        self._valid: dict[str, tuple[str, int]] = {}  # token -> (user, expiry ms)

    @staticmethod
    def _load_secret(broker: Broker) -> bytes:
        raw = broker.store.kv.get(SERVER, SECRET_KEY)
        if raw is not None:
            return bytes(raw)
        secret = secrets.token_bytes(32)
        broker.store.committer.commit([put(SERVER, SECRET_KEY, secret)])
        return secret

    def _signature(self, user: str, expiry_ms: int) -> str:
        pw_hash = hashlib.sha256(self.users.get(user, "").encode()).digest()
        msg = user.encode() + b"\x00" + str(expiry_ms).encode() + b"\x00" + pw_hash
        return _b64(hmac.new(self._secret, msg, hashlib.sha256).digest())

    def login(self, user: str, password: str) -> str:
        """A token for ``user``; UnauthorizedError for a wrong user or password."""
        expected = self.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise UnauthorizedError("Invalid user or password")
        expiry = int(time.time() * 1000) + self.ttl_ms
        return f"{_b64(user.encode())}.{expiry}.{self._signature(user, expiry)}"

    def verify(self, token: str) -> str:
        """The user a token was issued to; UnauthorizedError if it is forged or expired."""
        now = int(time.time() * 1000)
        cached = self._valid.get(token)
        if cached is not None and cached[1] > now:
            return cached[0]
        try:
            user_b64, expiry_text, sig = token.split(".")
            user = _unb64(user_b64).decode()
            expiry = int(expiry_text)
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise UnauthorizedError("malformed auth ticket") from None
        if user not in self.users or not hmac.compare_digest(sig, self._signature(user, expiry)):
            raise UnauthorizedError("invalid auth ticket")
        if expiry <= now:
            raise UnauthorizedError("auth ticket expired: log in again")
        if len(self._valid) >= _CACHE_LIMIT:
            self._valid.clear()
        self._valid[token] = (user, expiry)
        return user

    def check(self, context: grpc.aio.ServicerContext) -> str:
        """The caller's user ("" for anonymous); UnauthorizedError if it may not call."""
        for key, value in context.invocation_metadata() or ():
            if key == AUTH_HEADER:
                return self.verify(value if isinstance(value, str) else value.decode())
        if not self.allow_anonymous:
            raise UnauthorizedError("authentication required: log in with a user and password")
        return ""


class AuthServicer(ydb_auth_v1_pb2_grpc.AuthServiceServicer):
    """``Ydb.Auth.V1.AuthService``: Login with a static user and password."""

    def __init__(self, auth: Authenticator) -> None:
        self.auth = auth

    async def Login(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            token = self.auth.login(request.user, request.password)
        except UnauthorizedError as err:
            return ydb_auth_pb2.LoginResponse(operation=operation(error=err))
        result = ydb_auth_pb2.LoginResult(token=token)
        return ydb_auth_pb2.LoginResponse(operation=operation(result))
