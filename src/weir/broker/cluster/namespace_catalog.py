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

Deleting a namespace while another admin creates a topic in it: the delete first marks
the namespace ``deleting`` (a version bump), then looks for its topics in the topic
catalog, then deletes the node at the marked version; a topic is created in the same
transaction as a check of the namespace node's version read before (`guard`, refused
when marked). So either the topic was created before the mark (the delete sees it and
is refused with `NotEmptyError`, the mark undone) or its creation fails its check and
sees the mark or the missing node (`UnknownNamespaceError`): never a topic in a deleted
namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
)
from kazoo.exceptions import NotEmptyError as ZkNotEmptyError

from weir.broker.cluster.claims import cluster_path
from weir.broker.cluster.zk_transactions import failure
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
        failed = failure(results)
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
        failed = failure(results)
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
        failed = failure(results)
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

    async def guard(self, tenant: str, name: str) -> tuple[str, int]:
        """The namespace node and its version, for a topic created in it to check in its
        transaction; UnknownNamespaceError if it is gone or being deleted."""
        node = _namespace_node(self.root, tenant, name)
        try:
            raw, stat = await asyncio.to_thread(self.zk.get, node)
        except NoNodeError:
            raise UnknownNamespaceError(f"namespace {tenant}/{name} does not exist") from None
        if json.loads(raw or b"{}").get("deleting"):
            raise UnknownNamespaceError(f"namespace {tenant}/{name} is being deleted")
        return node, int(stat.version)

    async def delete_namespace(
        self, tenant: str, name: str, topics: Callable[[], Awaitable[list[str]]]
    ) -> None:
        """Mark, check ``topics()`` (the namespace's topics in the topic catalog: must be
        none), delete at the marked version (the module docstring says why)."""
        node = _namespace_node(self.root, tenant, name)
        path = f"{tenant}/{name}"
        while True:
            try:
                raw, stat = await asyncio.to_thread(self.zk.get, node)
            except NoNodeError:
                raise UnknownNamespaceError(f"namespace {path} does not exist") from None
            doc = json.loads(raw or b"{}")
            marked = json.dumps({**doc, "deleting": True}, sort_keys=True).encode()
            try:
                stat = await asyncio.to_thread(self.zk.set, node, marked, version=stat.version)
            except BadVersionError:
                continue
            except NoNodeError:
                raise UnknownNamespaceError(f"namespace {path} does not exist") from None
            held = await topics()
            if held:
                unmarked = json.dumps({k: v for k, v in doc.items() if k != "deleting"})
                with contextlib.suppress(BadVersionError, NoNodeError):
                    await asyncio.to_thread(
                        self.zk.set, node, unmarked.encode(), version=stat.version
                    )
                shown = ", ".join(held[:5]) + (
                    f" and {len(held) - 5} more" if len(held) > 5 else ""
                )
                raise NotEmptyError(
                    f"namespace {path} is not empty: it holds {len(held)} topic"
                    f"{'s' if len(held) != 1 else ''} ({shown}); drop them first"
                )
            version = int(stat.version)

            def delete(tx: Any, version: int = version) -> None:
                tx.delete(node, version=version)

            results = await self._commit(delete, f"-namespace {path}")
            if isinstance(results[0], BadVersionError):
                continue  # a policy change meanwhile (it dropped the mark): again
            if isinstance(results[0], NoNodeError):
                raise UnknownNamespaceError(f"namespace {path} does not exist")
            failed = failure(results)
            if failed is not None:
                raise failed
            return

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
            failed = failure(results)
            if failed is not None:
                raise failed
            return new


class ClusterTenancy(Tenancy):
    """`Tenancy` whose changes go to the `NamespaceCatalog` (checked there, so that two
    brokers' admins cannot break the rules between them); reads are of the view loaded
    at open and refreshed by the catalog's watch (`load`)."""

    def __init__(
        self,
        catalog: NamespaceCatalog,
        topic_names: Callable[[], Awaitable[list[str]]] | None = None,
    ) -> None:
        """``topic_names()``: every topic of the cluster (the topic catalog's names), for
        the check that a namespace being deleted holds none."""
        self.catalog = catalog
        self.topic_names = topic_names
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
        """``topics``: the namespace's topics as this broker knows them; the catalog's are
        checked too, in the delete (a topic another broker creates meanwhile)."""
        tenant, name = parse_namespace(path)
        if f"{tenant}/{name}" == f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}":
            raise BadRequestError(f"namespace {tenant}/{name} always exists; it cannot be deleted")
        prefix = f"{tenant}/{name}/"

        async def held() -> list[str]:
            names = topics if self.topic_names is None else await self.topic_names()
            return sorted({n for n in [*names, *topics] if n.startswith(prefix)})

        await self.catalog.delete_namespace(tenant, name, held)
        self.namespaces.pop(f"{tenant}/{name}", None)

    async def guard(self, topic: str) -> tuple[str, int]:
        """For `TopicCatalog.create`: the node of the topic's namespace and its version."""
        tenant, name = parse_namespace(topic.rsplit("/", 1)[0])
        return await self.catalog.guard(tenant, name)

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
