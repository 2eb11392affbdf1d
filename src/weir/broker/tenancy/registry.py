"""Tenants and namespaces: durable objects in the ``namespaces`` table.

A tenant holds namespaces; a namespace holds topics and the policies they inherit.
``public/default`` always exists (a single user never has to think about
either). A topic can only be created in a namespace that exists, and a tenant or
namespace that still holds something cannot be deleted.

Data directories from before tenants existed hold topics under full names
already (``public/default/orders`` for ``orders``); `Tenancy.adopt` creates the
tenant and namespace of every such topic at open, so they keep serving as before.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from weir.broker.tenancy.names import (
    DEFAULT_NAMESPACE,
    DEFAULT_TENANT,
    check_tenant,
    parse_namespace,
)
from weir.broker.tenancy.policies import Policies
from weir.errors import (
    AlreadyExistsError,
    BadRequestError,
    NotEmptyError,
    UnknownNamespaceError,
    UnknownTenantError,
)
from weir.storage.kv import KV, Op, delete, put

NAMESPACES = "namespaces"
_TENANT = b"t/"
_NAMESPACE = b"n/"


@dataclass(frozen=True)
class Tenant:
    name: str
    created_at_ms: int = 0


@dataclass(frozen=True)
class Namespace:
    tenant: str
    name: str
    policies: Policies = field(default_factory=Policies)
    created_at_ms: int = 0

    @property
    def path(self) -> str:
        return f"{self.tenant}/{self.name}"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _tenant_op(t: Tenant) -> Op:
    return put(
        NAMESPACES,
        _TENANT + t.name.encode(),
        json.dumps({"created_at_ms": t.created_at_ms}).encode(),
    )


def _namespace_op(ns: Namespace) -> Op:
    doc = {"created_at_ms": ns.created_at_ms, "policies": dict(ns.policies)}
    return put(NAMESPACES, _NAMESPACE + ns.path.encode(), json.dumps(doc, sort_keys=True).encode())


Commit = Callable[[Sequence[Op]], Awaitable[None]]


class Tenancy:
    """The tenants and namespaces of one broker. Changes are made under the broker's
    registry lock (the caller's), so checks and commits cannot interleave."""

    def __init__(self, kv: KV) -> None:
        self.tenants: dict[str, Tenant] = {}
        self.namespaces: dict[str, Namespace] = {}
        for k, v in kv.scan(NAMESPACES):
            key = bytes(k)
            doc = json.loads(bytes(v))
            if key.startswith(_TENANT):
                name = key[len(_TENANT) :].decode()
                self.tenants[name] = Tenant(name, doc.get("created_at_ms", 0))
            elif key.startswith(_NAMESPACE):
                tenant, name = key[len(_NAMESPACE) :].decode().split("/", 1)
                self.namespaces[f"{tenant}/{name}"] = Namespace(
                    tenant, name, Policies(doc.get("policies", {})), doc.get("created_at_ms", 0)
                )

    def adopt(self, namespace_paths: Iterable[str]) -> list[Op]:
        """Ops that create ``public/default`` and every namespace (and tenant) named, if
        missing: for a new data directory, and for topics stored before tenants existed."""
        ops: list[Op] = []
        now = _now_ms()
        for path in [f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}", *namespace_paths]:
            tenant, name = path.split("/", 1)
            if tenant not in self.tenants:
                self.tenants[tenant] = t = Tenant(tenant, now)
                ops.append(_tenant_op(t))
            if path not in self.namespaces:
                self.namespaces[path] = ns = Namespace(tenant, name, Policies(), now)
                ops.append(_namespace_op(ns))
        return ops

    # ---------------------------------------------------------------- reads

    def tenant(self, name: str) -> Tenant:
        t = self.tenants.get(check_tenant(name))
        if t is None:
            raise UnknownTenantError(f"tenant {name!r} does not exist")
        return t

    def namespace(self, path: str) -> Namespace:
        tenant, name = parse_namespace(path)
        self.tenant(tenant)
        ns = self.namespaces.get(f"{tenant}/{name}")
        if ns is None:
            raise UnknownNamespaceError(
                f"namespace {tenant}/{name} does not exist; create it first "
                f"(weir namespace create {tenant}/{name})"
            )
        return ns

    def list_namespaces(self, tenant: str | None = None) -> list[Namespace]:
        if tenant is not None:
            self.tenant(tenant)
        return [
            ns for p, ns in sorted(self.namespaces.items()) if tenant is None or ns.tenant == tenant
        ]

    # ---------------------------------------------------------------- changes

    async def create_tenant(self, name: str, commit: Commit) -> Tenant:
        name = check_tenant(name)
        if name in self.tenants:
            raise AlreadyExistsError(f"tenant {name!r} already exists")
        t = Tenant(name, _now_ms())
        await commit([_tenant_op(t)])
        self.tenants[name] = t
        return t

    async def delete_tenant(self, name: str, commit: Commit) -> None:
        t = self.tenant(name)
        if t.name == DEFAULT_TENANT:
            raise BadRequestError(f"tenant {DEFAULT_TENANT!r} always exists; it cannot be deleted")
        held = [ns.name for ns in self.list_namespaces(t.name)]
        if held:
            raise NotEmptyError(
                f"tenant {t.name!r} is not empty: it has namespaces {', '.join(held)}; "
                "delete them first"
            )
        await commit([delete(NAMESPACES, _TENANT + t.name.encode())])
        del self.tenants[t.name]

    async def create_namespace(
        self, path: str, policies: Mapping[str, Any], commit: Commit
    ) -> Namespace:
        tenant, name = parse_namespace(path)
        self.tenant(tenant)
        if f"{tenant}/{name}" in self.namespaces:
            raise AlreadyExistsError(f"namespace {tenant}/{name} already exists")
        ns = Namespace(tenant, name, Policies(policies), _now_ms())
        await commit([_namespace_op(ns)])
        self.namespaces[ns.path] = ns
        return ns

    async def delete_namespace(self, path: str, topics: list[str], commit: Commit) -> None:
        """Delete a namespace; ``topics`` are the names of the topics it holds (must be none)."""
        ns = self.namespace(path)
        if ns.path == f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}":
            raise BadRequestError(f"namespace {ns.path} always exists; it cannot be deleted")
        if topics:
            shown = ", ".join(topics[:5]) + (
                f" and {len(topics) - 5} more" if len(topics) > 5 else ""
            )
            raise NotEmptyError(
                f"namespace {ns.path} is not empty: it holds {len(topics)} topic"
                f"{'s' if len(topics) != 1 else ''} ({shown}); drop them first"
            )
        await commit([delete(NAMESPACES, _NAMESPACE + ns.path.encode())])
        del self.namespaces[ns.path]

    async def set_policies(
        self,
        path: str,
        changes: Mapping[str, Any],
        remove: tuple[str, ...],
        commit: Commit,
    ) -> Namespace:
        ns = self.namespace(path)
        new = Namespace(ns.tenant, ns.name, ns.policies.updated(changes, remove), ns.created_at_ms)
        await commit([_namespace_op(new)])
        self.namespaces[new.path] = new
        return new
