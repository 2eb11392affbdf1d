"""Authorization: grants of produce / consume / admin on topic patterns, and superusers.

A grant names a principal (a user, a JWT subject, a client certificate's name, or
``*`` for every authenticated principal), a permission and a resource. A resource is
a topic pattern, named as clients name topics (``orders`` is
``public/default/orders``, ``shop/orders`` is ``public/shop/orders``) with ``*``
matching within one part: ``shop/*`` is every topic of namespace ``shop``,
``acme/*/*`` every topic of tenant ``acme``, and ``*`` alone every topic; or a
tenant, ``tenant:acme``, or a namespace, ``namespace:acme/shop`` (``namespace:shop``
is ``public/shop``), which may also hold ``*``. A grant on a tenant or namespace
applies to every topic in it, now and later (inheritance), and also to the tenancy
calls on it: ``admin`` on ``tenant:acme`` lets its holder create, delete and set
the policies of acme's namespaces, and describe acme; ``admin`` on a namespace lets
it describe the namespace, set its policies and delete it. Creating and deleting
tenants stays with superusers. The kind is part of each stored grant's key.

What each permission allows:

- ``produce``: write to the topic;
- ``consume``: read it (with or without a consumer), commit offsets, describe its consumers;
- ``admin``: create, alter and drop it.

Any permission on a topic lets the principal see it (describe it, find it in a
listing); a topic the principal has no grant on is reported as unknown, exactly as
one that does not exist, so names do not leak. Superusers (``auth.superusers``)
may do everything, including managing users and grants.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

from weir.broker.tenancy.names import DEFAULT_NAMESPACE, DEFAULT_TENANT
from weir.errors import BadRequestError
from weir.storage.kv import KV, Op, delete, put

PREFIX = b"grant/"
_PATTERN_PART = re.compile(r"^[A-Za-z0-9_.\-*]{1,200}$")
_PRINCIPAL = re.compile(r"^(\*|[^\s\x00]{1,256})$")
EVERYONE = "*"


class Permission(Enum):
    PRODUCE = "produce"
    CONSUME = "consume"
    ADMIN = "admin"

    @classmethod
    def parse(cls, text: str) -> Permission:
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise BadRequestError(
                f"unknown permission {text[:40]!r}: use produce, consume or admin"
            ) from None


TOPIC, NAMESPACE, TENANT = "topic", "namespace", "tenant"
_KIND_PREFIXES = {f"{TENANT}:": TENANT, f"{NAMESPACE}:": NAMESPACE, f"{TOPIC}:": TOPIC}


def _parts(text: str, what: str, most: int) -> list[str]:
    parts = text.split("/") if text else []
    if not 1 <= len(parts) <= most or not all(_PATTERN_PART.match(x) for x in parts):
        raise BadRequestError(
            f"bad {what} {text[:200]!r}: a name or pattern of letters, digits, '_', '-', "
            "'.' and '*'"
        )
    return parts


def canonical_resource(resource: str) -> tuple[str, str]:
    """The kind and canonical pattern of a resource as a user wrote it: a topic pattern, or
    ``tenant:NAME`` / ``namespace:[TENANT/]NAME``."""
    text = (resource or "").strip()
    for prefix, kind in _KIND_PREFIXES.items():
        if text.lower().startswith(prefix):
            body = text[len(prefix) :].strip().strip("/")
            if kind == TENANT:
                return kind, "/".join(_parts(body, "tenant", 1))
            if kind == NAMESPACE:
                parts = _parts(body, "namespace", 2)
                return kind, "/".join(parts if len(parts) == 2 else [DEFAULT_TENANT, *parts])
            return kind, canonical_pattern(body)
    return TOPIC, canonical_pattern(text)


def canonical_pattern(pattern: str) -> str:
    """``tenant/namespace/topic`` with ``*`` wildcards, from a pattern as a user wrote it."""
    p = (pattern or "").strip().strip("/")
    if p == "*":
        return "*/*/*"
    parts = p.split("/") if p else []
    if not 1 <= len(parts) <= 3 or not all(_PATTERN_PART.match(x) for x in parts):
        raise BadRequestError(
            f"bad resource {pattern[:200]!r}: a topic name or pattern such as 'orders', "
            "'shop/*', 'acme/*/*' or '*'"
        )
    if len(parts) == 1:
        parts = [DEFAULT_TENANT, DEFAULT_NAMESPACE, *parts]
    elif len(parts) == 2:
        parts = [DEFAULT_TENANT, *parts]
    return "/".join(parts)


def short_resource(kind: str, canonical: str) -> str:
    """A resource as `canonical_resource` reads it back, in its shortest form."""
    if kind == TOPIC:
        return short_pattern(canonical)
    return f"{kind}:{canonical}"


def short_pattern(canonical: str) -> str:
    if canonical == "*/*/*":
        return "*"
    for prefix in (f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}/", f"{DEFAULT_TENANT}/"):
        if canonical.startswith(prefix):
            return canonical[len(prefix) :]  # the shortest form that means the same
    return canonical


def _compile(canonical: str) -> re.Pattern[str]:
    parts = [
        "[^/]*".join(re.escape(piece) for piece in part.split("*")) for part in canonical.split("/")
    ]
    return re.compile("^" + "/".join(parts) + "$")


@dataclass(frozen=True)
class Grant:
    principal: str
    permission: Permission
    resource: str  # canonical pattern
    kind: str = "topic"

    @property
    def key(self) -> bytes:
        doc = [self.kind, self.principal, self.permission.value, self.resource]
        return PREFIX + json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_key(cls, key: bytes) -> Grant:
        kind, principal, permission, resource = json.loads(key[len(PREFIX) :])
        return cls(principal, Permission(permission), resource, kind)

    @property
    def topic_pattern(self) -> str:
        """The topics the grant covers, as a canonical topic pattern (a tenant's or a
        namespace's are every topic in it)."""
        if self.kind == TENANT:
            return f"{self.resource}/*/*"
        if self.kind == NAMESPACE:
            return f"{self.resource}/*"
        return self.resource

    def matches(self, topic: str) -> bool:
        return bool(_compile(self.topic_pattern).match(topic))

    def covers_namespace(self, namespace: str) -> bool:
        """Whether this tenant or namespace grant covers ``namespace`` (``tenant/name``)."""
        if self.kind == TENANT:
            return bool(_compile(self.resource).match(namespace.split("/")[0]))
        if self.kind == NAMESPACE:
            return bool(_compile(self.resource).match(namespace))
        return False

    def covers_tenant(self, tenant: str) -> bool:
        return self.kind == TENANT and bool(_compile(self.resource).match(tenant))


def make_grant(principal: str, permission: str, resource: str) -> Grant:
    if not _PRINCIPAL.match(principal or ""):
        raise BadRequestError(f"bad principal {principal[:260]!r}")
    kind, canonical = canonical_resource(resource)
    return Grant(principal, Permission.parse(permission), canonical, kind)


class Grants:
    """The grants of the data directory (``grant/...`` keys of the server table)."""

    def __init__(self, kv: KV, table: str, commit: Callable[[list[Op]], object]) -> None:
        self._table = table
        self._commit = commit
        self._grants: set[Grant] = set()
        for key, _ in kv.scan(table, PREFIX, PREFIX[:-1] + b"0"):
            self._grants.add(Grant.from_key(key))
        self._matchers: dict[str, re.Pattern[str]] = {}

    def add(self, grant: Grant) -> bool:
        if grant in self._grants:
            return False
        self._commit([put(self._table, grant.key, b"")])
        self._grants.add(grant)
        return True

    def remove(self, grant: Grant) -> bool:
        if grant not in self._grants:
            return False
        self._commit([delete(self._table, grant.key)])
        self._grants.discard(grant)
        return True

    def remove_principal(self, principal: str) -> int:
        gone = [g for g in self._grants if g.principal == principal]
        if gone:
            self._commit([delete(self._table, g.key) for g in gone])
            self._grants.difference_update(gone)
        return len(gone)

    def list(self, principal: str = "") -> list[Grant]:
        found = (g for g in self._grants if not principal or g.principal == principal)
        return sorted(found, key=lambda g: (g.principal, g.resource, g.permission.value))

    def _matcher(self, resource: str) -> re.Pattern[str]:
        m = self._matchers.get(resource)
        if m is None:
            m = self._matchers[resource] = _compile(resource)
        return m

    def permissions(self, principal: str, topic: str) -> set[Permission]:
        """What ``principal`` may do on ``topic`` (canonical name) by its grants."""
        out: set[Permission] = set()
        for g in self._grants:
            if g.principal in (principal, EVERYONE) and self._matcher(g.topic_pattern).match(topic):
                out.add(g.permission)
        return out

    def tenancy_permissions(
        self, principal: str, tenant: str, namespace: str = ""
    ) -> set[Permission]:
        """What ``principal`` may do on a tenant (``namespace`` empty) or on one of its
        namespaces (``tenant/name``), by its tenant grants and, for a namespace, by its
        namespace grants. Topic grants give nothing here."""
        out: set[Permission] = set()
        for g in self._grants:
            if g.principal not in (principal, EVERYONE):
                continue
            if g.covers_namespace(namespace) if namespace else g.covers_tenant(tenant):
                out.add(g.permission)
        return out

    def principals(self) -> Iterable[str]:
        return {g.principal for g in self._grants}
