"""Who a call runs as: the result of authentication, the subject of authorization."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated identity: a user name and the mechanism that proved it."""

    name: str
    mechanism: str  # "password", "token", "anonymous"; later "jwt", "mtls"

    @property
    def anonymous(self) -> bool:
        return self.mechanism == "anonymous"


ANONYMOUS = Principal("", "anonymous")

# The principal of the call being served, set by the front before the handler runs
# (a handler's task, and the tasks it starts, see it).
current_principal: ContextVar[Principal] = ContextVar("weir_principal", default=ANONYMOUS)

# The authorization checks a long call (a stream) passed, as (permission, topic, operation),
# collected so they can be made again when users or grants change (see `Security.changed`).
# None outside such a call.
current_checks: ContextVar[list[tuple[object, str, str]] | None] = ContextVar(
    "weir_checks", default=None
)
