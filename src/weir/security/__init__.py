"""Security shared by every front: who is calling (authentication), later what it may do.

A front extracts credentials in its own wire format (the YDB front's
``x-ydb-auth-ticket``, the native front's ``authorization: Bearer``, a login
request's user and password) and asks `Security` for a `Principal`; no front
checks a password or a token itself. `Authenticator` is the plug-in point:
static users and weir's signed tokens today, JWT and client certificates later.
"""

from weir.security.authenticator import Authenticator, BearerToken, Credential, UserPassword
from weir.security.principal import ANONYMOUS, Principal, current_principal
from weir.security.service import Security
from weir.security.static_users import StaticUsers
from weir.security.tokens import TOKEN_TTL_S, IssuedToken, TokenIssuer

__all__ = [
    "ANONYMOUS",
    "TOKEN_TTL_S",
    "Authenticator",
    "BearerToken",
    "Credential",
    "IssuedToken",
    "Principal",
    "Security",
    "StaticUsers",
    "TokenIssuer",
    "UserPassword",
    "current_principal",
]
