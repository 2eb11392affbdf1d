"""Authorization: grants of produce / consume / admin on topic patterns, and superusers.

A grant names a principal (a user, a JWT subject, a client certificate's name, or
``*`` for every authenticated principal), a permission and a resource pattern.
Resources are topics for now, named as clients name them (``orders`` is
``public/default/orders``, ``shop/orders`` is ``public/shop/orders``) with ``*``
matching within one part: ``shop/*`` is every topic of namespace ``shop``,
``acme/*/*`` every topic of tenant ``acme``, and ``*`` alone every topic. A
tenant or namespace resource kind can be added beside ``topic`` without changing
stored grants (the kind is part of the key).

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

    def matches(self, topic: str) -> bool:
        return bool(_compile(self.resource).match(topic))


def make_grant(principal: str, permission: str, resource: str) -> Grant:
    if not _PRINCIPAL.match(principal or ""):
        raise BadRequestError(f"bad principal {principal[:260]!r}")
    return Grant(principal, Permission.parse(permission), canonical_pattern(resource))


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
            if g.principal in (principal, EVERYONE) and self._matcher(g.resource).match(topic):
                out.add(g.permission)
        return out

    def principals(self) -> Iterable[str]:
        return {g.principal for g in self._grants}
