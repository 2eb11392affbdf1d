"""The native front's calls for tenants, namespaces and their policies (a mixin of
`NativeService`): each translates one message into one broker call."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import grpc

from weir.broker.tenancy import Namespace, Tenant
from weir.broker.tenancy.names import check_tenant, parse_namespace
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.policy_values import from_wire, to_wire
from weir.protocols.native.unary import unary
from weir.security import Security, current_principal
from weir.security.grants import Permission

if TYPE_CHECKING:
    from weir.broker.broker import Broker

Ctx: TypeAlias = grpc.aio.ServicerContext


def describe_tenant(broker: Broker, t: Tenant) -> pb.TenantDescription:
    return pb.TenantDescription(
        tenant=t.name,
        namespaces=[ns.name for ns in broker.list_namespaces(t.name)],
        created_at_ms=t.created_at_ms,
    )


def describe_namespace(broker: Broker, ns: Namespace) -> pb.NamespaceDescription:
    d = pb.NamespaceDescription(
        namespace=ns.path,
        tenant=ns.tenant,
        topics=[c.name.rsplit("/", 1)[1] for c in broker.namespace_topics(ns.path)],
        created_at_ms=ns.created_at_ms,
    )
    to_wire(ns.policies, d.policies)
    to_wire(broker.namespace_policies(ns.path), d.effective_policies)
    return d


class TenancyCalls:
    """The tenant and namespace calls of `NativeService` (a mixin). When grants are checked,
    creating and deleting tenants needs a superuser; a tenant's calls need a grant on the
    tenant (``tenant:NAME``), a namespace's a grant on it or on its tenant: ``admin`` to
    create, delete or set policies, any grant to describe (a namespace's description lists
    its topics, and its policies apply to every topic in it). Listings show only what the
    caller may describe."""

    broker: Broker
    security: Security

    def _superuser(self, operation: str) -> None:
        self.security.require_superuser(current_principal.get(), operation)

    def _tenant(self, permission: Permission | None, name: str, operation: str) -> None:
        tenant = check_tenant(name)
        self.security.authorize_tenancy(current_principal.get(), permission, tenant, "", operation)

    def _namespace(self, permission: Permission | None, path: str, operation: str) -> None:
        tenant, name = parse_namespace(path)
        self.security.authorize_tenancy(
            current_principal.get(), permission, tenant, f"{tenant}/{name}", operation
        )

    @unary
    async def CreateTenant(self, request: pb.TenantRequest, context: Ctx) -> pb.TenantDescription:
        self._superuser("creating a tenant")
        return describe_tenant(self.broker, await self.broker.create_tenant(request.tenant))

    @unary
    async def DescribeTenant(self, request: pb.TenantRequest, context: Ctx) -> pb.TenantDescription:
        self._tenant(None, request.tenant, "describe")
        return describe_tenant(self.broker, self.broker.describe_tenant(request.tenant))

    @unary
    async def DeleteTenant(
        self, request: pb.TenantRequest, context: Ctx
    ) -> pb.DeleteTenancyResponse:
        self._superuser("deleting a tenant")
        await self.broker.delete_tenant(request.tenant)
        return pb.DeleteTenancyResponse()

    @unary
    async def ListTenants(
        self, request: pb.ListTenantsRequest, context: Ctx
    ) -> pb.ListTenantsResponse:
        me = current_principal.get()
        return pb.ListTenantsResponse(
            tenants=[
                describe_tenant(self.broker, t)
                for t in self.broker.list_tenants()
                if self.security.tenancy_permissions(me, t.name)
            ]
        )

    @unary
    async def CreateNamespace(
        self, request: pb.CreateNamespaceRequest, context: Ctx
    ) -> pb.NamespaceDescription:
        self._namespace(Permission.ADMIN, request.namespace, "create")
        ns = await self.broker.create_namespace(request.namespace, from_wire(request.policies))
        return describe_namespace(self.broker, ns)

    @unary
    async def DescribeNamespace(
        self, request: pb.NamespaceRequest, context: Ctx
    ) -> pb.NamespaceDescription:
        self._namespace(None, request.namespace, "describe")
        return describe_namespace(self.broker, self.broker.describe_namespace(request.namespace))

    @unary
    async def DeleteNamespace(
        self, request: pb.NamespaceRequest, context: Ctx
    ) -> pb.DeleteTenancyResponse:
        self._namespace(Permission.ADMIN, request.namespace, "delete")
        await self.broker.delete_namespace(request.namespace)
        return pb.DeleteTenancyResponse()

    @unary
    async def ListNamespaces(
        self, request: pb.ListNamespacesRequest, context: Ctx
    ) -> pb.ListNamespacesResponse:
        me = current_principal.get()
        found = self.broker.list_namespaces(request.tenant or None)
        return pb.ListNamespacesResponse(
            namespaces=[
                describe_namespace(self.broker, ns)
                for ns in found
                if self.security.tenancy_permissions(me, ns.tenant, ns.path)
            ]
        )

    @unary
    async def SetNamespacePolicies(
        self, request: pb.SetNamespacePoliciesRequest, context: Ctx
    ) -> pb.NamespaceDescription:
        self._namespace(Permission.ADMIN, request.namespace, "set the policies of")
        ns = await self.broker.set_namespace_policies(
            request.namespace, from_wire(request.set), list(request.remove)
        )
        return describe_namespace(self.broker, ns)
