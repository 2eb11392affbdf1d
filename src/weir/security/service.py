"""`Security`: the one object every front asks who a caller is."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from weir.broker.broker import SERVER, Broker
from weir.errors import UnauthorizedError
from weir.security.authenticator import Authenticator, Credential, UserPassword
from weir.security.principal import ANONYMOUS, Principal
from weir.security.static_users import StaticUsers
from weir.security.tokens import TOKEN_TTL_S, IssuedToken, TokenIssuer
from weir.storage.kv import put

SECRET_KEY = b"ydb_auth_secret"  # the name it has had since the YDB front signed tokens


class Security:
    """Authentication for every front: logins, tokens, and the anonymous rule.

    ``authenticate(None)`` is a call without credentials: the anonymous principal
    when ``allow_anonymous`` is on, else an error. Credentials that are present
    must be valid either way.
    """

    def __init__(
        self,
        users: StaticUsers,
        tokens: TokenIssuer,
        *,
        allow_anonymous: bool,
        authenticators: Sequence[Authenticator] = (),
    ) -> None:
        self.users = users
        self.tokens = tokens
        self.allow_anonymous = allow_anonymous
        self.authenticators: list[Authenticator] = [users, tokens, *authenticators]

    @classmethod
    def for_broker(cls, broker: Broker, *, ttl_s: float = TOKEN_TTL_S) -> Security:
        """Static users and anonymous rule from the broker's config; the token secret from
        its ``server`` table (created on first use, so tokens outlive a restart)."""
        raw = broker.store.kv.get(SERVER, SECRET_KEY)
        if raw is not None:
            secret = bytes(raw)
        else:
            secret = secrets.token_bytes(32)
            broker.store.committer.commit([put(SERVER, SECRET_KEY, secret)])
        users = StaticUsers(broker.config.users)
        return cls(
            users,
            TokenIssuer(secret, users.fingerprint, ttl_s=ttl_s),
            allow_anonymous=broker.config.allow_anonymous,
        )

    def login(self, user: str, password: str) -> IssuedToken:
        """A token for a user and password; UnauthorizedError if they are wrong."""
        principal = self.authenticate(UserPassword(user, password))
        return self.tokens.issue(principal)

    def authenticate(self, credential: Credential | None) -> Principal:
        """The principal the credential proves (anonymous for none, when allowed)."""
        if credential is None:
            if not self.allow_anonymous:
                raise UnauthorizedError(
                    "authentication required: log in with a user and password "
                    "(anonymous access is off on this server)"
                )
            return ANONYMOUS
        for authenticator in self.authenticators:
            principal = authenticator.authenticate(credential)
            if principal is not None:
                return principal
        raise UnauthorizedError(f"unsupported credentials: {type(credential).__name__}")
