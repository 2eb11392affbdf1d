"""Static users from the config (``auth.users``): user -> password, for development and tests."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from weir.errors import UnauthorizedError
from weir.security.authenticator import Credential, UserPassword
from weir.security.principal import Principal
from weir.security.scram import ScramCredential, derive


class StaticUsers:
    """Checks a user and password against the configured table (constant-time compare)."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = dict(users)
        self._scram: dict[tuple[str, str], ScramCredential] = {}

    def scram(self, user: str, mechanism: str) -> ScramCredential | None:
        """The user's SCRAM keys, derived from its password on first use."""
        password = self._users.get(user)
        if password is None:
            return None
        key = (user, mechanism)
        if key not in self._scram:
            self._scram[key] = derive(password, mechanism)
        return self._scram[key]

    def __len__(self) -> int:
        return len(self._users)

    def __contains__(self, user: object) -> bool:
        return user in self._users

    def names(self) -> list[str]:
        return sorted(self._users)

    def authenticate(self, credential: Credential) -> Principal | None:
        if not isinstance(credential, UserPassword):
            return None
        expected = self._users.get(credential.user)
        # compare even for an unknown user, so timing does not tell which users exist
        ok = hmac.compare_digest(
            (expected if expected is not None else "\x00").encode(), credential.password.encode()
        )
        if expected is None or not ok:
            raise UnauthorizedError("Invalid user or password")
        return Principal(credential.user, "password")

    def fingerprint(self, user: str) -> bytes | None:
        """A digest of the user's password (None for an unknown user): tokens are bound to
        it, so changing a password or removing the user revokes the user's tokens."""
        password = self._users.get(user)
        return None if password is None else hashlib.sha256(password.encode()).digest()
