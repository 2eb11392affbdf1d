"""`NamespaceCatalog`: the cluster's tenants and namespaces (with their policies) in
ZooKeeper, and `ClusterTenancy`, the broker's `Tenancy` over it.

In embedded mode tenants and namespaces are rows of the broker's LMDB; a cluster's
brokers must agree on them (a topic's retention follows its namespace's policies on
whichever broker owns it), so in replicated mode they live under ``{root}/cluster``:

- ``tenants/{tenant}``: persistent, ``{"created_at_ms": ...}``;
- ``tenants/{tenant}/{namespace}``: persistent, ``{"created_at_ms", "policies"}``;
  the node's version is the namespace record's version;
- ``tenants`` itself: its data changes in the same transaction as every change below
  it; brokers watch it and read the catalog again.

Namespaces are children of their tenant's node, so ZooKeeper itself keeps the rules
a race between admins could break: a tenant that still has a namespace cannot be
deleted (its node has children), a namespace cannot be created in a tenant deleted
meanwhile (no parent), a name is created once (the other admin gets
`AlreadyExistsError`). A policy change is read-modify-write on the namespace node's
version, retried on a conflict: two admins changing one namespace at once both get
their change, applied one after the other to the latest record.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
)
from kazoo.exceptions import NotEmptyError as ZkNotEmptyError

from weir.broker.cluster.claims import cluster_path
from weir.broker.tenancy.names import (
    DEFAULT_NAMESPACE,
    DEFAULT_TENANT,
    check_tenant,
    parse_namespace,
)
from weir.broker.tenancy.policies import Policies
from weir.broker.tenancy.registry import Commit, Namespace, Tenancy, Tenant
from weir.errors import (
    AlreadyExistsError,
    BadRequestError,
    NotEmptyError,
    UnknownNamespaceError,
    UnknownTenantError,
)
from weir.storage.kv import Op


def tenants_path(root: str) -> str:
    return f"{cluster_path(root)}/tenants"


def _tenant_node(root: str, tenant: str) -> str:
    return f"{tenants_path(root)}/{quote(tenant, safe='')}"


def _namespace_node(root: str, tenant: str, name: str) -> str:
    return f"{_tenant_node(root, tenant)}/{quote(name, safe='')}"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _namespace_doc(ns: Namespace) -> bytes:
    doc = {"created_at_ms": ns.created_at_ms, "policies": dict(ns.policies)}
    return json.dumps(doc, sort_keys=True).encode()


def _namespace_of(tenant: str, name: str, raw: bytes) -> Namespace:
    doc = json.loads(raw or b"{}")
    return Namespace(tenant, name, Policies(doc.get("policies", {})), doc.get("created_at_ms", 0))


def _failure(results: list[Any]) -> Exception | None:
    failed = [r for r in results if isinstance(r, Exception)]
    if not failed:
        return None
    return next((r for r in failed if not isinstance(r, RolledBackError)), failed[0])


class NamespaceCatalog:
    """Tenants and namespaces of the cluster (kazoo's blocking calls, off the event loop)."""

    def __init__(self, zk: KazooClient, root: str) -> None:
        self.zk = zk
        self.root = root

    @property
    def path(self) -> str:
        """The node brokers watch (its data changes with every change of the catalog)."""
        return tenants_path(self.root)

    async def ensure_layout(self) -> None:
        """The tenants node and ``public/default`` (they always exist)."""
        await asyncio.to_thread(self.zk.ensure_path, self.path)
        now = json.dumps({"created_at_ms": _now_ms()}).encode()
        with contextlib.suppress(NodeExistsError):
            await asyncio.to_thread(self.zk.create, _tenant_node(self.root, DEFAULT_TENANT), now)
        ns = Namespace(DEFAULT_TENANT, DEFAULT_NAMESPACE, Policies(), _now_ms())
        with contextlib.suppress(NodeExistsError):
            await asyncio.to_thread(
                self.zk.create,
                _namespace_node(self.root, DEFAULT_TENANT, DEFAULT_NAMESPACE),
                _namespace_doc(ns),
            )

    async def load(self) -> tuple[dict[str, Tenant], dict[str, Namespace]]:
        """Every tenant and namespace of the cluster."""
        return await asyncio.to_thread(self._load)

    def _load(self) -> tuple[dict[str, Tenant], dict[str, Namespace]]:
        tenants: dict[str, Tenant] = {}
        namespaces: dict[str, Namespace] = {}
        try:
            children = self.zk.get_children(self.path)
        except NoNodeError:
            return tenants, namespaces
        for qt in children:
            tenant = unquote(qt)
            try:
                raw, _ = self.zk.get(_tenant_node(self.root, tenant))
                names = self.zk.get_children(_tenant_node(self.root, tenant))
            except NoNodeError:
                continue  # deleted meanwhile
            tenants[tenant] = Tenant(tenant, json.loads(raw or b"{}").get("created_at_ms", 0))
            for qn in names:
                name = unquote(qn)
                try:
                    raw, _ = self.zk.get(_namespace_node(self.root, tenant, name))
                except NoNodeError:
                    continue
                namespaces[f"{tenant}/{name}"] = _namespace_of(tenant, name, raw)
        return tenants, namespaces

    async def _commit(self, ops: Callable[[Any], None], what: str) -> list[Any]:
        """Run ``ops`` on a transaction that also touches the watched node."""
        tx = self.zk.transaction()
        ops(tx)
        tx.set_data(self.path, what.encode())
        return list(await asyncio.to_thread(tx.commit))

    async def create_tenant(self, tenant: Tenant) -> None:
        doc = json.dumps({"created_at_ms": tenant.created_at_ms}).encode()
        results = await self._commit(
            lambda tx: tx.create(_tenant_node(self.root, tenant.name), doc),
            f"+tenant {tenant.name}",
        )
        if isinstance(results[0], NodeExistsError):
            raise AlreadyExistsError(f"tenant {tenant.name!r} already exists")
        failed = _failure(results)
        if failed is not None:
            raise failed

    async def delete_tenant(self, name: str) -> None:
        results = await self._commit(
            lambda tx: tx.delete(_tenant_node(self.root, name)), f"-tenant {name}"
        )
        if isinstance(results[0], NoNodeError):
            raise UnknownTenantError(f"tenant {name!r} does not exist")
        if isinstance(results[0], ZkNotEmptyError):
            held = await self._namespace_names(name)
            raise NotEmptyError(
                f"tenant {name!r} is not empty: it has namespaces {', '.join(held)}; "
                "delete them first"
            )
        failed = _failure(results)
        if failed is not None:
            raise failed

    async def _namespace_names(self, tenant: str) -> list[str]:
        try:
            names = await asyncio.to_thread(self.zk.get_children, _tenant_node(self.root, tenant))
        except NoNodeError:
            return []
        return sorted(unquote(n) for n in names)

    async def create_namespace(self, ns: Namespace) -> None:
        results = await self._commit(
            lambda tx: tx.create(
                _namespace_node(self.root, ns.tenant, ns.name), _namespace_doc(ns)
            ),
            f"+namespace {ns.path}",
        )
        if isinstance(results[0], NodeExistsError):
            raise AlreadyExistsError(f"namespace {ns.path} already exists")
        if isinstance(results[0], NoNodeError):
            raise UnknownTenantError(f"tenant {ns.tenant!r} does not exist")
        failed = _failure(results)
        if failed is not None:
            raise failed

    async def get_namespace(self, tenant: str, name: str) -> tuple[Namespace, int] | None:
        try:
            raw, stat = await asyncio.to_thread(
                self.zk.get, _namespace_node(self.root, tenant, name)
            )
        except NoNodeError:
            return None
        return _namespace_of(tenant, name, raw), int(stat.version)

    async def delete_namespace(self, tenant: str, name: str, version: int = -1) -> None:
        """Delete the namespace (at ``version``: BadVersionError if it changed since)."""
        node = _namespace_node(self.root, tenant, name)
        results = await self._commit(
            lambda tx: tx.delete(node, version=version), f"-namespace {tenant}/{name}"
        )
        if isinstance(results[0], NoNodeError):
            raise UnknownNamespaceError(f"namespace {tenant}/{name} does not exist")
        failed = _failure(results)
        if failed is not None:
            raise failed

    async def update_namespace(
        self, tenant: str, name: str, change: Callable[[Namespace], Namespace]
    ) -> Namespace:
        """Apply ``change`` to the latest record and store it if nobody changed it since it
        was read (else read again and reapply)."""
        node = _namespace_node(self.root, tenant, name)
        while True:
            got = await self.get_namespace(tenant, name)
            if got is None:
                raise UnknownNamespaceError(f"namespace {tenant}/{name} does not exist")
            old, version = got
            new = change(old)
            doc = _namespace_doc(new)

            def store(tx: Any, doc: bytes = doc, version: int = version) -> None:
                tx.set_data(node, doc, version=version)

            results = await self._commit(store, f"~namespace {tenant}/{name} {version + 1}")
            if isinstance(results[0], BadVersionError):
                continue  # another admin changed it: apply the change to theirs
            if isinstance(results[0], NoNodeError):
                raise UnknownNamespaceError(f"namespace {tenant}/{name} does not exist")
            failed = _failure(results)
            if failed is not None:
                raise failed
            return new


class ClusterTenancy(Tenancy):
    """`Tenancy` whose changes go to the `NamespaceCatalog` (checked there, so that two
    brokers' admins cannot break the rules between them); reads are of the view loaded
    at open and refreshed by the catalog's watch (`load`)."""

    def __init__(self, catalog: NamespaceCatalog) -> None:
        self.catalog = catalog
        self.tenants = {}
        self.namespaces = {}

    async def load(self) -> None:
        self.tenants, self.namespaces = await self.catalog.load()

    def adopt(self, namespace_paths: Iterable[str]) -> list[Op]:
        """Nothing to adopt: the catalog has ``public/default`` and a topic is only ever
        created in a namespace of the catalog."""
        return []

    async def create_tenant(self, name: str, commit: Commit) -> Tenant:
        t = Tenant(check_tenant(name), _now_ms())
        await self.catalog.create_tenant(t)
        self.tenants[t.name] = t
        return t

    async def delete_tenant(self, name: str, commit: Commit) -> None:
        name = check_tenant(name)
        if name == DEFAULT_TENANT:
            raise BadRequestError(f"tenant {DEFAULT_TENANT!r} always exists; it cannot be deleted")
        await self.catalog.delete_tenant(name)
        self.tenants.pop(name, None)

    async def create_namespace(
        self, path: str, policies: Mapping[str, Any], commit: Commit
    ) -> Namespace:
        tenant, name = parse_namespace(path)
        ns = Namespace(tenant, name, Policies(policies), _now_ms())
        await self.catalog.create_namespace(ns)
        self.namespaces[ns.path] = ns
        return ns

    async def delete_namespace(self, path: str, topics: list[str], commit: Commit) -> None:
        """``topics``: the namespace's topics as this broker knows them (must be none)."""
        tenant, name = parse_namespace(path)
        got = await self.catalog.get_namespace(tenant, name)
        if got is None:
            raise UnknownNamespaceError(f"namespace {tenant}/{name} does not exist")
        # the checks of the embedded registry (the default namespace, no topics)
        self.namespaces[f"{tenant}/{name}"] = got[0]
        self.tenants.setdefault(tenant, Tenant(tenant))
        await super().delete_namespace(
            path, topics, lambda _ops: self.catalog.delete_namespace(tenant, name)
        )

    async def set_policies(
        self,
        path: str,
        changes: Mapping[str, Any],
        remove: tuple[str, ...],
        commit: Commit,
    ) -> Namespace:
        tenant, name = parse_namespace(path)
        new = await self.catalog.update_namespace(
            tenant,
            name,
            lambda ns: Namespace(
                ns.tenant, ns.name, ns.policies.updated(changes, remove), ns.created_at_ms
            ),
        )
        self.namespaces[new.path] = new
        return new
