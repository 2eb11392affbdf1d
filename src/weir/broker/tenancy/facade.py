"""The broker's calls for tenants, namespaces and policies (a mixin of `Broker`).

Kept apart from broker.py so that the facade stays thin: the registry and the
policy rules live in this package; here they meet the broker's topics, lock and
group commit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from weir.broker.config import BrokerConfig
from weir.broker.state import BrokerState
from weir.broker.tenancy.names import parse_topic
from weir.broker.tenancy.policies import Policies, effective
from weir.broker.tenancy.registry import Namespace, Tenant
from weir.broker.topics import PERSISTENT, TopicConfig
from weir.errors import UnknownTopicError


def server_policies(config: BrokerConfig) -> dict[str, Any]:
    """The server's values of every policy: what applies where nothing else is set."""
    return {
        "retention_ms": config.default_retention_ms,
        "retention_bytes": config.default_retention_bytes,
        "message_ttl_ms": None,
        "backlog_quota_bytes": None,
        "backlog_quota_policy": "producer_exception",
        "deduplication": True,
        "offload_threshold_bytes": None,
        "offload_threshold_ms": None,
        "offload_deletion_lag_ms": None,
        "large_payload_threshold_bytes": None,
        "max_message_bytes": config.max_message_bytes,
        "max_producers_per_topic": None,
        "max_consumers_per_topic": None,
        "compaction_threshold_bytes": None,
        "compaction_delete_retention_ms": config.compaction_delete_retention_ms,
        "default_partitions": config.default_partitions,
        "auto_create_topics": config.auto_create_topics,
    }


class TenancyFacade(BrokerState):
    """Tenant and namespace administration, policy resolution and auto-creation."""

    if TYPE_CHECKING:  # provided by `weir.broker.topic_admin.TopicAdmin`

        def _apply_topic_config(self, cfg: TopicConfig) -> None: ...
        async def create_topic(self, name: str, *, kind: str = PERSISTENT) -> TopicConfig: ...

    # ---------------------------------------------------------------- policies

    def namespace_policies(self, namespace_path: str) -> dict[str, Any]:
        """What the topics of a namespace inherit: the server's values under its own."""
        ns = self.tenancy.namespaces.get(namespace_path)
        return effective(server_policies(self.config), ns.policies if ns else Policies())

    def topic_policies(self, cfg: TopicConfig) -> dict[str, Any]:
        """The policies that hold for a topic: server, then namespace, then its own."""
        path = cfg.name.rsplit("/", 1)[0]
        return effective(self.namespace_policies(path), cfg.policies)

    def policies_of(self, topic: str, database: str = "") -> dict[str, Any]:
        return self.topic_policies(self.topic(topic, database))

    def resolved(self, cfg: TopicConfig) -> TopicConfig:
        """``cfg`` with its effective retention (the fields the partitions read)."""
        p = self.topic_policies(cfg)
        if (cfg.retention_ms, cfg.retention_bytes) == (p["retention_ms"], p["retention_bytes"]):
            return cfg
        return dataclasses.replace(
            cfg, retention_ms=p["retention_ms"], retention_bytes=p["retention_bytes"]
        )

    # ---------------------------------------------------------------- auto-creation

    async def topic_for_use(
        self, name: str, database: str = "", *, kind: str = PERSISTENT
    ) -> TopicConfig:
        """The topic a producer or consumer names; an unknown one is created (of ``kind``)
        when its namespace's auto_create_topics policy (else topics.auto_create) allows."""
        try:
            return self.topic(name, database)
        except UnknownTopicError:
            full = parse_topic(name, database)
            ns = self.tenancy.namespace(full.namespace_path)
            if not self.namespace_policies(ns.path)["auto_create_topics"]:
                raise
        try:
            return await self.create_topic(full.full, kind=kind)
        except Exception:
            if full.full not in self._topics and self.cluster is not None:
                # another broker created it: the catalog's watch may not have brought it yet
                await self.cluster.refresh()
            if full.full in self._topics:  # another session created it first
                return self._topics[full.full]
            raise

    # ---------------------------------------------------------------- admin

    def list_tenants(self) -> list[Tenant]:
        return [t for _, t in sorted(self.tenancy.tenants.items())]

    def describe_tenant(self, name: str) -> Tenant:
        return self.tenancy.tenant(name)

    async def create_tenant(self, name: str) -> Tenant:
        self._check_open()
        async with self._lock:
            return await self.tenancy.create_tenant(name, self._commit)

    async def delete_tenant(self, name: str) -> None:
        self._check_open()
        async with self._lock:
            await self.tenancy.delete_tenant(name, self._commit)

    def list_namespaces(self, tenant: str | None = None) -> list[Namespace]:
        return self.tenancy.list_namespaces(tenant)

    def describe_namespace(self, path: str) -> Namespace:
        return self.tenancy.namespace(path)

    def namespace_topics(self, path: str) -> list[TopicConfig]:
        ns = self.tenancy.namespace(path)
        return [c for n, c in sorted(self._topics.items()) if n.startswith(ns.path + "/")]

    async def create_namespace(
        self, path: str, policies: Mapping[str, Any] | None = None
    ) -> Namespace:
        self._check_open()
        async with self._lock:
            return await self.tenancy.create_namespace(path, policies or {}, self._commit)

    async def delete_namespace(self, path: str) -> None:
        self._check_open()
        async with self._lock:
            held = [c.name for c in self.namespace_topics(path)]
            await self.tenancy.delete_namespace(path, held, self._commit)

    async def set_namespace_policies(
        self,
        path: str,
        changes: Mapping[str, Any] | None = None,
        remove: Iterable[str] = (),
    ) -> Namespace:
        """Set (and with ``remove``, unset) policies of a namespace; its topics follow at
        once, except where a topic sets its own."""
        self._check_open()
        async with self._lock:
            ns = await self.tenancy.set_policies(path, changes or {}, tuple(remove), self._commit)
            for cfg in self.namespace_topics(ns.path):
                self._apply_topic_config(self.resolved(cfg))
        return ns

    async def _namespaces_changed(self) -> None:
        """Replicated mode: another broker changed tenants or namespaces (the view is read
        again already): every topic follows its namespace's policies again."""
        if self._closed:
            return
        async with self._lock:
            for cfg in list(self._topics.values()):
                self._apply_topic_config(self.resolved(cfg))
