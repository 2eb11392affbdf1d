"""The native front's calls for tenants, namespaces and their policies (a mixin of
`NativeService`): each translates one message into one broker call."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import grpc

from weir.broker.tenancy import Namespace, Tenant
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.policy_values import from_wire, to_wire
from weir.protocols.native.unary import unary
from weir.security import Security, current_principal

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
    """The tenant and namespace calls of `NativeService` (a mixin). They need a superuser
    when grants are checked: a namespace's description lists its topics, and its policies
    apply to every topic in it."""

    broker: Broker
    security: Security

    def _superuser(self, operation: str) -> None:
        self.security.require_superuser(current_principal.get(), operation)

    @unary
    async def CreateTenant(self, request: pb.TenantRequest, context: Ctx) -> pb.TenantDescription:
        self._superuser("creating a tenant")
        return describe_tenant(self.broker, await self.broker.create_tenant(request.tenant))

    @unary
    async def DescribeTenant(self, request: pb.TenantRequest, context: Ctx) -> pb.TenantDescription:
        self._superuser("describing a tenant")
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
        self._superuser("listing tenants")
        return pb.ListTenantsResponse(
            tenants=[describe_tenant(self.broker, t) for t in self.broker.list_tenants()]
        )

    @unary
    async def CreateNamespace(
        self, request: pb.CreateNamespaceRequest, context: Ctx
    ) -> pb.NamespaceDescription:
        self._superuser("creating a namespace")
        ns = await self.broker.create_namespace(request.namespace, from_wire(request.policies))
        return describe_namespace(self.broker, ns)

    @unary
    async def DescribeNamespace(
        self, request: pb.NamespaceRequest, context: Ctx
    ) -> pb.NamespaceDescription:
        self._superuser("describing a namespace")
        return describe_namespace(self.broker, self.broker.describe_namespace(request.namespace))

    @unary
    async def DeleteNamespace(
        self, request: pb.NamespaceRequest, context: Ctx
    ) -> pb.DeleteTenancyResponse:
        self._superuser("deleting a namespace")
        await self.broker.delete_namespace(request.namespace)
        return pb.DeleteTenancyResponse()

    @unary
    async def ListNamespaces(
        self, request: pb.ListNamespacesRequest, context: Ctx
    ) -> pb.ListNamespacesResponse:
        self._superuser("listing namespaces")
        found = self.broker.list_namespaces(request.tenant or None)
        return pb.ListNamespacesResponse(
            namespaces=[describe_namespace(self.broker, ns) for ns in found]
        )

    @unary
    async def SetNamespacePolicies(
        self, request: pb.SetNamespacePoliciesRequest, context: Ctx
    ) -> pb.NamespaceDescription:
        self._superuser("setting namespace policies")
        ns = await self.broker.set_namespace_policies(
            request.namespace, from_wire(request.set), list(request.remove)
        )
        return describe_namespace(self.broker, ns)
