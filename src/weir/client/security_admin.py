"""The SDK's security calls (asyncio and sync twins, mixed into the clients): who am I,
users kept by the server, grants. Managing users and grants needs a superuser."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from weir.protocols.native import weir_pb2 as pb

if TYPE_CHECKING:
    from weir.client.connection import Connection


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the server takes the caller for."""

    principal: str  # "" for anonymous
    mechanism: str  # password, token, jwt, mtls, anonymous
    superuser: bool


@dataclass(frozen=True, slots=True)
class UserInfo:
    user: str
    created_ms: int  # 0 for a static user of the config
    source: str  # "stored" or "config"
    superuser: bool


@dataclass(frozen=True, slots=True)
class GrantInfo:
    principal: str
    permission: str  # produce, consume, admin
    resource: str  # a topic name or pattern


class AsyncSecurityCalls:
    """Mixed into `weir.aio.Client`."""

    @property
    def conn(self) -> Connection:  # pragma: no cover - the client's
        raise NotImplementedError

    async def whoami(self, *, timeout: float | None = 30.0) -> Identity:
        r = await self.conn.call("WhoAmI", pb.WhoAmIRequest(), timeout)
        return Identity(r.principal, r.mechanism, r.superuser)

    async def add_user(self, user: str, password: str, *, timeout: float | None = 30.0) -> None:
        await self.conn.call("AddUser", pb.UserRequest(user=user, password=password), timeout)

    async def set_password(self, user: str, password: str, *, timeout: float | None = 30.0) -> None:
        """A new password (revokes the user's tokens); a user may change its own."""
        req = pb.UserRequest(user=user, password=password)
        await self.conn.call("SetUserPassword", req, timeout)

    async def delete_user(self, user: str, *, timeout: float | None = 30.0) -> None:
        """Removes the user and its grants; its tokens stop working."""
        await self.conn.call("DeleteUser", pb.UserRequest(user=user), timeout)

    async def list_users(self, *, timeout: float | None = 30.0) -> list[UserInfo]:
        r = await self.conn.call("ListUsers", pb.ListUsersRequest(), timeout)
        return [UserInfo(u.user, u.created_ms, u.source, u.superuser) for u in r.users]

    async def grant(
        self, principal: str, permission: str, resource: str, *, timeout: float | None = 30.0
    ) -> bool:
        """Give ``principal`` ``permission`` (produce, consume, admin) on the topics
        ``resource`` names ("orders", "shop/*", "*"); False if it had it already."""
        req = pb.GrantRequest(principal=principal, permission=permission, resource=resource)
        r = await self.conn.call("Grant", req, timeout)
        return bool(r.changed)

    async def revoke(
        self, principal: str, permission: str, resource: str, *, timeout: float | None = 30.0
    ) -> bool:
        """Take a grant back (exactly as it was given); False if there was none."""
        req = pb.GrantRequest(principal=principal, permission=permission, resource=resource)
        r = await self.conn.call("Revoke", req, timeout)
        return bool(r.changed)

    async def list_grants(
        self, principal: str = "", *, timeout: float | None = 30.0
    ) -> list[GrantInfo]:
        r = await self.conn.call("ListGrants", pb.ListGrantsRequest(principal=principal), timeout)
        return [GrantInfo(g.principal, g.permission, g.resource) for g in r.grants]


class SyncSecurityCalls:
    """Mixed into `weir.Client`: the same calls, blocking."""

    @property
    def _calls(self) -> AsyncSecurityCalls:
        return self._aio  # type: ignore[attr-defined,no-any-return]

    def _run(self, coro: Any, timeout: float | None = None) -> Any:  # pragma: no cover
        raise NotImplementedError

    def whoami(self, *, timeout: float | None = 30.0) -> Identity:
        return self._run(self._calls.whoami(timeout=timeout))  # type: ignore[no-any-return]

    def add_user(self, user: str, password: str, *, timeout: float | None = 30.0) -> None:
        self._run(self._calls.add_user(user, password, timeout=timeout))

    def set_password(self, user: str, password: str, *, timeout: float | None = 30.0) -> None:
        self._run(self._calls.set_password(user, password, timeout=timeout))

    def delete_user(self, user: str, *, timeout: float | None = 30.0) -> None:
        self._run(self._calls.delete_user(user, timeout=timeout))

    def list_users(self, *, timeout: float | None = 30.0) -> list[UserInfo]:
        return self._run(self._calls.list_users(timeout=timeout))  # type: ignore[no-any-return]

    def grant(
        self, principal: str, permission: str, resource: str, *, timeout: float | None = 30.0
    ) -> bool:
        return self._run(self._calls.grant(principal, permission, resource, timeout=timeout))  # type: ignore[no-any-return]

    def revoke(
        self, principal: str, permission: str, resource: str, *, timeout: float | None = 30.0
    ) -> bool:
        return self._run(self._calls.revoke(principal, permission, resource, timeout=timeout))  # type: ignore[no-any-return]

    def list_grants(self, principal: str = "", *, timeout: float | None = 30.0) -> list[GrantInfo]:
        return self._run(self._calls.list_grants(principal, timeout=timeout))  # type: ignore[no-any-return]
