"""Console logins: who a browser is, kept server-side behind a random cookie.

With authentication on (``auth.allow_anonymous = false``) a browser logs in once with a
user and password (or pastes a token) and gets a session cookie: HttpOnly (scripts
cannot read it), SameSite=Strict (other sites' requests do not carry it), Secure on a
TLS endpoint, scoped to /console. The session keeps the weir token the login was given,
and every request authenticates that token again, so deleting the user or changing its
password ends the session at once, and grants are read fresh for every page and action.
Each session has a CSRF token that every form carries back.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from aiohttp import web

from weir.security.authenticator import BearerToken

COOKIE = "weir_console"
MAX_SESSIONS = 10_000  # past it the oldest is dropped (its browser logs in again)
MAX_AGE_S = 12 * 3600  # at most as long as a weir token lasts


@dataclass
class Session:
    """One logged-in browser: the credential it proved, and its form token."""

    id: str
    user: str
    credential: BearerToken = field(repr=False)
    csrf: str = field(repr=False)
    created: float

    def csrf_ok(self, sent: str) -> bool:
        return hmac.compare_digest(self.csrf.encode(), sent.encode())


class Sessions:
    """The logged-in browsers of this server (in memory: a restart logs everyone out)."""

    def __init__(self) -> None:
        self._by_id: OrderedDict[str, Session] = OrderedDict()

    def open(self, user: str, token: str) -> Session:
        session = Session(
            id=secrets.token_urlsafe(32),
            user=user,
            credential=BearerToken(token),
            csrf=secrets.token_urlsafe(32),
            created=time.time(),
        )
        self._by_id[session.id] = session
        while len(self._by_id) > MAX_SESSIONS:
            self._by_id.popitem(last=False)
        return session

    def of(self, request: web.Request) -> Session | None:
        """The request's session, if its cookie names a live one."""
        sid = request.cookies.get(COOKIE, "")
        session = self._by_id.get(sid) if sid else None
        if session is not None and time.time() - session.created > MAX_AGE_S:
            self.close(session)
            return None
        return session

    def close(self, session: Session) -> None:
        self._by_id.pop(session.id, None)

    def __len__(self) -> int:
        return len(self._by_id)


def set_cookie(response: web.StreamResponse, session: Session, secure: bool, path: str) -> None:
    response.set_cookie(
        COOKIE,
        session.id,
        path=path,
        httponly=True,
        samesite="Strict",
        secure=secure,
        max_age=MAX_AGE_S,
    )


def clear_cookie(response: web.StreamResponse, path: str) -> None:
    response.del_cookie(COOKIE, path=path)
