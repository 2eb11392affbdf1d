"""What the person at a console page may see and do: the server's grants, asked per topic.

The same `Security.authorize` the native front calls, with the same permissions per
operation (describe: any grant; read, consumers and subscriptions: consume; test
message: produce; create, alter, delete: admin), so a page never offers what the CLI
would refuse, and a refusal is audited the same way. On a server without authentication
(anonymous access on) every caller may do everything, as on every other front.
"""

from __future__ import annotations

from dataclasses import dataclass

from weir.broker.topics import canonical_topic
from weir.errors import BadRequestError
from weir.security import Security
from weir.security.grants import Permission
from weir.security.principal import ANONYMOUS, Principal


@dataclass(frozen=True)
class Access:
    """One request's principal, and the questions the pages ask about it."""

    security: Security
    principal: Principal = ANONYMOUS

    @property
    def logged_in(self) -> bool:
        return not self.principal.anonymous

    @property
    def superuser(self) -> bool:
        return self.security.is_superuser(self.principal)

    def permissions(self, topic: str) -> set[Permission]:
        """``topic`` as a user types it or canonical."""
        return self.security.permissions(self.principal, canonical_topic(topic))

    def can_see(self, topic: str) -> bool:
        return bool(self.permissions(topic))

    def can(self, permission: Permission, topic: str) -> bool:
        return permission in self.permissions(topic)

    def require(
        self, permission: Permission | None, topic: str, operation: str, group: str = ""
    ) -> None:
        """PermissionDeniedError unless allowed (under consumer group ``group`` too, when
        given); checked before the topic is looked up, so the answer is the same for a
        topic that exists and one the principal cannot see."""
        try:
            name = canonical_topic(topic)
        except BadRequestError:
            if not self.security.enforcing:
                return  # the look-up that follows says what is wrong, as without grants
            raise
        self.security.authorize(self.principal, permission, name, operation)
        if group:
            self.security.authorize_group(self.principal, group, operation)

    def may_create(self) -> bool:
        """Whether the create form is worth showing: a superuser, or an admin grant."""
        if self.superuser:
            return True
        grants = self.security.grants
        if self.principal.anonymous or grants is None:
            return False
        return any(
            g.permission is Permission.ADMIN and g.principal in (self.principal.name, "*")
            for g in grants.list()
        )

    def flags(self, topic: str) -> dict[str, bool]:
        """The template's switches for one topic's forms and links."""
        held = self.permissions(topic)
        return {
            "consume": Permission.CONSUME in held,
            "produce": Permission.PRODUCE in held,
            "admin": Permission.ADMIN in held,
        }
