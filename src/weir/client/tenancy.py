"""Admin calls for tenants, namespaces and their policies: the asyncio ones and their
sync twins (same names), mixed into `weir.aio.Client` and `weir.Client`.

Policies are plain dicts: ``{"retention_ms": 3_600_000, "deduplication": False,
"max_producers_per_topic": None}`` (None: no limit). Keys and meanings: docs/topics.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from weir.client.admin import NamespaceInfo, TenantInfo, namespace_info, tenant_info
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.policy_values import to_wire

if TYPE_CHECKING:
    from weir.client.aio import Client as AioClient
    from weir.client.connection import Connection


class AsyncTenancyCalls:
    if TYPE_CHECKING:

        @property
        def conn(self) -> Connection: ...

    async def create_tenant(self, name: str, *, timeout: float | None = 30.0) -> TenantInfo:
        req = pb.TenantRequest(tenant=name)
        return tenant_info(await self.conn.call("CreateTenant", req, timeout))

    async def describe_tenant(self, name: str, *, timeout: float | None = 30.0) -> TenantInfo:
        req = pb.TenantRequest(tenant=name)
        return tenant_info(await self.conn.call("DescribeTenant", req, timeout))

    async def delete_tenant(self, name: str, *, timeout: float | None = 30.0) -> None:
        """Delete a tenant; one that still has namespaces is refused (NotEmptyError)."""
        await self.conn.call("DeleteTenant", pb.TenantRequest(tenant=name), timeout)

    async def list_tenants(self, *, timeout: float | None = 30.0) -> list[TenantInfo]:
        resp = await self.conn.call("ListTenants", pb.ListTenantsRequest(), timeout)
        return [tenant_info(t) for t in resp.tenants]

    async def create_namespace(
        self,
        name: str,
        policies: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = 30.0,
    ) -> NamespaceInfo:
        """Create ``tenant/namespace`` (a bare name is in the tenant ``public``)."""
        req = pb.CreateNamespaceRequest(namespace=name)
        to_wire(policies or {}, req.policies)
        return namespace_info(await self.conn.call("CreateNamespace", req, timeout))

    async def describe_namespace(self, name: str, *, timeout: float | None = 30.0) -> NamespaceInfo:
        req = pb.NamespaceRequest(namespace=name)
        return namespace_info(await self.conn.call("DescribeNamespace", req, timeout))

    async def delete_namespace(self, name: str, *, timeout: float | None = 30.0) -> None:
        """Delete a namespace; one that still holds topics is refused (NotEmptyError)."""
        await self.conn.call("DeleteNamespace", pb.NamespaceRequest(namespace=name), timeout)

    async def list_namespaces(
        self, tenant: str = "", *, timeout: float | None = 30.0
    ) -> list[NamespaceInfo]:
        req = pb.ListNamespacesRequest(tenant=tenant)
        resp = await self.conn.call("ListNamespaces", req, timeout)
        return [namespace_info(ns) for ns in resp.namespaces]

    async def set_namespace_policies(
        self,
        name: str,
        policies: Mapping[str, Any] | None = None,
        *,
        remove: Iterable[str] = (),
        timeout: float | None = 30.0,
    ) -> NamespaceInfo:
        """Set policies (and unset those in ``remove``); the namespace's topics follow at
        once, except where a topic sets its own. A bad key or value changes nothing."""
        req = pb.SetNamespacePoliciesRequest(namespace=name, remove=list(remove))
        to_wire(policies or {}, req.set)
        return namespace_info(await self.conn.call("SetNamespacePolicies", req, timeout))


class SyncTenancyCalls:
    """The blocking twins of `AsyncTenancyCalls`."""

    if TYPE_CHECKING:
        _aio: AioClient

        def _run(self, coro: Any, timeout: float | None = None) -> Any: ...

    def create_tenant(self, name: str, *, timeout: float | None = 30.0) -> TenantInfo:
        return self._run(self._aio.create_tenant(name, timeout=timeout))  # type: ignore[no-any-return]

    def describe_tenant(self, name: str, *, timeout: float | None = 30.0) -> TenantInfo:
        return self._run(self._aio.describe_tenant(name, timeout=timeout))  # type: ignore[no-any-return]

    def delete_tenant(self, name: str, *, timeout: float | None = 30.0) -> None:
        self._run(self._aio.delete_tenant(name, timeout=timeout))

    def list_tenants(self, *, timeout: float | None = 30.0) -> list[TenantInfo]:
        return self._run(self._aio.list_tenants(timeout=timeout))  # type: ignore[no-any-return]

    def create_namespace(
        self,
        name: str,
        policies: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = 30.0,
    ) -> NamespaceInfo:
        return self._run(self._aio.create_namespace(name, policies, timeout=timeout))  # type: ignore[no-any-return]

    def describe_namespace(self, name: str, *, timeout: float | None = 30.0) -> NamespaceInfo:
        return self._run(self._aio.describe_namespace(name, timeout=timeout))  # type: ignore[no-any-return]

    def delete_namespace(self, name: str, *, timeout: float | None = 30.0) -> None:
        self._run(self._aio.delete_namespace(name, timeout=timeout))

    def list_namespaces(
        self, tenant: str = "", *, timeout: float | None = 30.0
    ) -> list[NamespaceInfo]:
        return self._run(self._aio.list_namespaces(tenant, timeout=timeout))  # type: ignore[no-any-return]

    def set_namespace_policies(
        self,
        name: str,
        policies: Mapping[str, Any] | None = None,
        *,
        remove: Iterable[str] = (),
        timeout: float | None = 30.0,
    ) -> NamespaceInfo:
        return self._run(  # type: ignore[no-any-return]
            self._aio.set_namespace_policies(name, policies, remove=remove, timeout=timeout)
        )
