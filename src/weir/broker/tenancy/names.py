"""Names of tenants, namespaces and topics: ``tenant/namespace/topic``, as in Pulsar.

A single user writes just ``orders``: it means ``public/default/orders``. Two parts
mean ``public/<namespace>/<topic>``. A client that speaks a database path (the YDB
SDK sends ``/local``) has it stripped first: the database is the root, so
``/local/orders`` is ``public/default/orders`` and ``/local/acme/shop/orders`` is
``acme/shop/orders``. Every part is 1 to 200 of letters, digits, ``.``, ``_`` and
``-``, not starting with ``.`` or ``-`` (so no ``..``).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from weir.errors import BadRequestError

DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._\-]{0,199}$")
_RULE = "letters, digits, '.', '_' and '-' (not first), up to 200 characters"


class TopicName(NamedTuple):
    tenant: str
    namespace: str
    local: str

    @property
    def full(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.local}"

    @property
    def namespace_path(self) -> str:
        return f"{self.tenant}/{self.namespace}"


def _check_part(part: str, what: str, name: str) -> None:
    if not part:
        raise BadRequestError(f"bad {what} in {name!r}: a name has no empty parts")
    if not PART.match(part):
        raise BadRequestError(f"bad {what} {part!r} in {name!r}: use {_RULE}")


def _strip_database(path: str, database: str) -> str:
    p = path.strip()
    db = database.strip().rstrip("/")
    if db and (p == db or p.startswith(db + "/")):
        p = p[len(db) :]
    return p.strip("/")


def parse_topic(path: object, database: str = "") -> TopicName:
    """The full name of a topic path as a client wrote it; a clear error for a bad one."""
    if not isinstance(path, str):
        raise BadRequestError(f"topic name must be a string, got {type(path).__name__}")
    p = _strip_database(path, database)
    if not p:
        raise BadRequestError(f"bad topic name {path!r}: it is empty")
    parts = p.split("/")
    if "" in parts:
        raise BadRequestError(f"bad topic name {path!r}: a name has no empty parts")
    if len(parts) > 3:
        raise BadRequestError(
            f"bad topic name {path!r}: {len(parts)} parts; use 'topic', 'namespace/topic' or "
            "'tenant/namespace/topic'"
        )
    for part, what in zip(parts, ("tenant", "namespace", "topic")[3 - len(parts) :], strict=True):
        _check_part(part, f"{what} name" if what != "topic" else "topic name", path)
    if len(parts) == 1:
        return TopicName(DEFAULT_TENANT, DEFAULT_NAMESPACE, parts[0])
    if len(parts) == 2:
        return TopicName(DEFAULT_TENANT, parts[0], parts[1])
    return TopicName(parts[0], parts[1], parts[2])


def parse_namespace(path: object) -> tuple[str, str]:
    """(tenant, namespace) of ``tenant/namespace``; a bare ``namespace`` is in ``public``."""
    if not isinstance(path, str):
        raise BadRequestError(f"namespace name must be a string, got {type(path).__name__}")
    p = path.strip().strip("/")
    if not p:
        raise BadRequestError(f"bad namespace name {path!r}: it is empty")
    parts = p.split("/")
    if "" in parts:
        raise BadRequestError(f"bad namespace name {path!r}: a name has no empty parts")
    if len(parts) > 2:
        raise BadRequestError(
            f"bad namespace name {path!r}: {len(parts)} parts; use 'tenant/namespace' "
            "(or 'namespace', in the tenant 'public')"
        )
    if len(parts) == 1:
        parts = [DEFAULT_TENANT, parts[0]]
    _check_part(parts[0], "tenant name", path)
    _check_part(parts[1], "namespace name", path)
    return parts[0], parts[1]


def check_tenant(name: object) -> str:
    if not isinstance(name, str):
        raise BadRequestError(f"tenant name must be a string, got {type(name).__name__}")
    if "/" in name.strip("/"):
        raise BadRequestError(f"bad tenant name {name!r}: a tenant name has one part (no '/')")
    t = name.strip("/")
    _check_part(t, "tenant name", name)
    return t


def short_name(full: str) -> str:
    """The name a single user typed: the default tenant and namespace are left out."""
    prefix = f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}/"
    return full[len(prefix) :] if full.startswith(prefix) else full
