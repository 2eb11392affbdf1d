"""The credentials a front can extract, and the interface of one authentication mechanism."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from weir.security.principal import Principal


@dataclass(frozen=True, slots=True)
class UserPassword:
    """A user name and password, as a login request carries them."""

    user: str
    password: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class BearerToken:
    """A token sent with a call; ``name`` is what the front calls it in errors ("ticket")."""

    token: str = field(repr=False)
    name: str = "token"


@dataclass(frozen=True, slots=True)
class ClientCertificate:
    """The verified client certificate of a TLS connection (mTLS): its common name."""

    subject: str


Credential = UserPassword | BearerToken | ClientCertificate


class Authenticator(Protocol):
    """One authentication mechanism (static users, signed tokens; later JWT, mTLS).

    ``authenticate`` returns the principal the credential proves, None when the
    credential is not of this mechanism's kind (the next one is asked), and
    raises `UnauthorizedError` (or `TokenRejectedError`) when it is of its kind
    but wrong.
    """

    def authenticate(self, credential: Credential) -> Principal | None: ...
