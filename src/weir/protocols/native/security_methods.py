"""The native front's security methods: WhoAmI, users kept in the data directory, grants.

Managing users and grants needs a superuser (every caller is one on an open server,
one that serves anonymous callers). The methods run behind the same authentication
check as every other method (`weir.protocols.native.auth`).
"""

from __future__ import annotations

import grpc

from weir.errors import BadRequestError
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.unary import unary
from weir.security import Security, audit, current_principal
from weir.security.grants import Grant, make_grant, short_resource


def _fields(grant: Grant) -> dict[str, object]:
    return {
        "principal": grant.principal,
        "permission": grant.permission.value,
        "resource": short_resource(grant.kind, grant.resource),
    }


class SecurityMethods:
    """Mixed into `NativeService`, which sets ``security``."""

    security: Security

    @unary
    async def WhoAmI(
        self, request: pb.WhoAmIRequest, context: grpc.aio.ServicerContext
    ) -> pb.WhoAmIResponse:
        p = current_principal.get()
        return pb.WhoAmIResponse(
            principal=p.name, mechanism=p.mechanism, superuser=self.security.is_superuser(p)
        )

    @unary
    async def AddUser(
        self, request: pb.UserRequest, context: grpc.aio.ServicerContext
    ) -> pb.UserResponse:
        self.security.require_superuser(current_principal.get(), "adding a user")
        assert self.security.stored is not None
        if request.user in self.security.users:
            raise BadRequestError(
                f"user {request.user!r} is a static user of the config (auth.users)"
            )
        record = self.security.stored.add(request.user, request.password)
        audit.event("user_added", by=current_principal.get().name, user=record.name)
        return pb.UserResponse(user=record.name, created_ms=record.created_ms)

    @unary
    async def SetUserPassword(
        self, request: pb.UserRequest, context: grpc.aio.ServicerContext
    ) -> pb.UserResponse:
        me = current_principal.get()
        if not (me.name == request.user and me.mechanism in ("password", "token")):
            self.security.require_superuser(me, "changing another user's password")
        assert self.security.stored is not None
        record = self.security.stored.set_password(request.user, request.password)
        audit.event("password_changed", by=me.name, user=record.name)
        return pb.UserResponse(user=record.name, created_ms=record.created_ms)

    @unary
    async def DeleteUser(
        self, request: pb.UserRequest, context: grpc.aio.ServicerContext
    ) -> pb.UserResponse:
        self.security.require_superuser(current_principal.get(), "deleting a user")
        assert self.security.stored is not None
        self.security.stored.delete(request.user)
        audit.event("user_deleted", by=current_principal.get().name, user=request.user)
        if self.security.grants is not None:
            self.security.grants.remove_principal(request.user)
        self.security.changed()
        return pb.UserResponse(user=request.user)

    @unary
    async def ListUsers(
        self, request: pb.ListUsersRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListUsersResponse:
        self.security.require_superuser(current_principal.get(), "listing users")
        supers = self.security.superusers
        out = [
            pb.UserInfo(user=name, source="config", superuser=name in supers)
            for name in self.security.users.names()
        ]
        stored = self.security.stored
        if stored is not None:
            for name in stored.names():
                record = stored.get(name)
                assert record is not None
                out.append(
                    pb.UserInfo(
                        user=name,
                        created_ms=record.created_ms,
                        source="stored",
                        superuser=name in supers,
                    )
                )
        return pb.ListUsersResponse(users=sorted(out, key=lambda u: u.user))

    @unary
    async def Grant(
        self, request: pb.GrantRequest, context: grpc.aio.ServicerContext
    ) -> pb.GrantResponse:
        self.security.require_superuser(current_principal.get(), "granting a permission")
        grant = make_grant(request.principal, request.permission, request.resource)
        assert self.security.grants is not None
        changed = self.security.grants.add(grant)
        self.security.changed()
        audit.event("granted", by=current_principal.get().name, **_fields(grant), changed=changed)
        return pb.GrantResponse(changed=changed)

    @unary
    async def Revoke(
        self, request: pb.GrantRequest, context: grpc.aio.ServicerContext
    ) -> pb.GrantResponse:
        self.security.require_superuser(current_principal.get(), "revoking a permission")
        grant = make_grant(request.principal, request.permission, request.resource)
        assert self.security.grants is not None
        changed = self.security.grants.remove(grant)
        self.security.changed()
        audit.event("revoked", by=current_principal.get().name, **_fields(grant), changed=changed)
        return pb.GrantResponse(changed=changed)

    @unary
    async def ListGrants(
        self, request: pb.ListGrantsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListGrantsResponse:
        me = current_principal.get()
        if request.principal != me.name or me.anonymous:
            self.security.require_superuser(me, "listing the grants of others")
        assert self.security.grants is not None
        return pb.ListGrantsResponse(
            grants=[
                pb.GrantInfo(
                    principal=g.principal,
                    permission=g.permission.value,
                    resource=short_resource(g.kind, g.resource),
                )
                for g in self.security.grants.list(request.principal)
            ]
        )
