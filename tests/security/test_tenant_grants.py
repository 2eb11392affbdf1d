"""Grants on tenants and namespaces: operations x resources x principals, through the weir SDK
on a real server with anonymous access off.

``tina`` administers tenant ``acme`` (``tenant:acme``), ``nadia`` namespace ``acme/shop``
(``namespace:acme/shop``), ``pablo`` may produce and ``cora`` consume there, and ``gus``
administers tenant ``globex``. A tenant or namespace grant covers every topic in it (made
before or after the grant) and the tenancy calls on it; creating and deleting tenants stays
with superusers. A refusal is a PermissionDeniedError that names the operation and the
resource, and changes nothing. A JWT whose subject is one tenant's admin is refused on the
other tenant.
"""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator

import pytest

import weir
from tests.conftest import ServerProcess
from tests.security.conftest import root, superuser_server
from weir.errors import PermissionDeniedError
from weir.security.jwt_tokens import create_token

PASSWORD = "tenant-grant-password"
SECRET = "a-tenant-grant-test-secret-of-32-bytes"
GRANTS = {
    "tina": [("admin", "tenant:acme")],
    "nadia": [("admin", "namespace:acme/shop")],
    "pablo": [("produce", "namespace:acme/shop")],
    "cora": [("consume", "namespace:acme/shop")],
    "gus": [("admin", "tenant:globex")],
}
NAMESPACES = ["acme/shop", "acme/ops", "globex/x"]


def held(principal: str, namespace: str) -> set[str]:
    """The permissions the table gives ``principal`` on ``namespace`` and its topics."""
    out = set()
    for permission, resource in GRANTS[principal]:
        kind, _, name = resource.partition(":")
        if (kind == "tenant" and namespace.split("/")[0] == name) or namespace == name:
            out.add(permission)
    return out


def held_on_tenant(principal: str, tenant: str) -> set[str]:
    return {p for p, r in GRANTS[principal] if r == f"tenant:{tenant}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = superuser_server(tmp_path_factory, "tenant-grants", WEIR_AUTH_JWT_SECRET=SECRET)
    with root(srv) as r:
        r.create_tenant("acme")
        r.create_tenant("globex")
        for ns in NAMESPACES:
            r.create_namespace(ns)
        for name, grants in GRANTS.items():
            r.add_user(name, PASSWORD)
            for permission, resource in grants:
                assert r.grant(name, permission, resource)
        for ns in NAMESPACES:  # made after the grants: inheritance covers later topics
            r.create_topic(f"{ns}/t", partitions=1)
            with r.writer(f"{ns}/t", producer_id="seed") as w:
                w.write(b"seed")
    yield srv
    srv.stop()


def _write(c: weir.Client, topic: str) -> None:
    with c.writer(topic, producer_id="w") as w:
        w.write(b"x")
        w.flush(timeout=20)


def _read(c: weir.Client, topic: str) -> None:
    with c.reader(topic, consumer=f"r{uuid.uuid4().hex[:8]}") as r:
        assert r.receive_batch(timeout=20) is not None


def _made(srv: ServerProcess, namespace: str) -> str:
    """A namespace of that name that exists, empty (made by root)."""
    with root(srv) as r:
        r.create_namespace(namespace)
    return namespace


def _unmade(srv: ServerProcess, namespace: str) -> None:
    with root(srv) as r:
        r.delete_namespace(namespace)


# operation -> (the permission it needs, None: any grant; the call on namespace NS)
Call = Callable[[weir.Client, str, ServerProcess], object]
NAMESPACE_OPERATIONS: dict[str, tuple[str | None, Call]] = {
    "describe namespace": (None, lambda c, ns, s: c.describe_namespace(ns)),
    "set policies": (
        "admin",
        lambda c, ns, s: c.set_namespace_policies(ns, {"retention_ms": 3_600_000}),
    ),
    "create namespace": ("admin", lambda c, ns, s: c.create_namespace(ns + "-new")),
    "delete namespace": (None, lambda c, ns, s: c.delete_namespace(ns + "-gone")),
    "create topic": ("admin", lambda c, ns, s: c.create_topic(f"{ns}/new")),
    "drop topic": ("admin", lambda c, ns, s: c.drop_topic(f"{ns}/dropped")),
    "describe topic": (None, lambda c, ns, s: c.describe_topic(f"{ns}/t")),
    "write": ("produce", lambda c, ns, s: _write(c, f"{ns}/t")),
    "read": ("consume", lambda c, ns, s: _read(c, f"{ns}/t")),
}


def expected(principal: str, op: str, ns: str) -> bool:
    needs = NAMESPACE_OPERATIONS[op][0]
    if op in ("create namespace", "delete namespace"):
        # the new (or doomed) namespace is a sibling: only a tenant grant covers it
        return "admin" in held_on_tenant(principal, ns.split("/")[0])
    have = held(principal, ns)
    return bool(have) if needs is None else needs in have


@pytest.mark.parametrize("principal", sorted(GRANTS))
def test_tenant_and_namespace_grants_allow_exactly_what_they_name(
    server: ServerProcess, principal: str
) -> None:
    with weir.Client(server.endpoint, credentials=(principal, PASSWORD)) as c:
        for ns in NAMESPACES:
            for op, (_needs, call) in NAMESPACE_OPERATIONS.items():
                if op == "delete namespace":
                    _made(server, ns + "-gone")
                if op == "drop topic":
                    with root(server) as r:
                        r.create_topic(f"{ns}/dropped", partitions=1)
                allowed = expected(principal, op, ns)
                try:
                    call(c, ns, server)
                except PermissionDeniedError as err:
                    assert not allowed, (principal, op, ns, err.message)
                    assert "permission denied" in err.message and principal in err.message
                    assert ns.split("/")[0] in err.message, err.message  # names the resource
                else:
                    assert allowed, (principal, op, ns, "was allowed")
                with root(server) as r:  # put things back; a refusal changed nothing
                    names = {n.name for n in r.list_namespaces(ns.split("/")[0])}
                    if op == "create namespace":
                        assert (ns + "-new" in names) == allowed
                        if allowed:
                            r.delete_namespace(ns + "-new")
                    if op == "delete namespace":
                        assert (ns + "-gone" in names) == (not allowed)
                        if not allowed:
                            r.delete_namespace(ns + "-gone")
                    if op == "create topic" and allowed:
                        r.drop_topic(f"{ns}/new")
                    if op == "drop topic" and not allowed:
                        r.drop_topic(f"{ns}/dropped")
        # listings show what the principal may describe, and only that
        for tenant in ("acme", "globex"):
            mine = {n.name for n in c.list_namespaces(tenant)}
            assert mine == {
                ns for ns in NAMESPACES if ns.startswith(tenant) and held(principal, ns)
            }
        assert {t.name for t in c.list_tenants()} & {"acme", "globex"} == {
            t for t in ("acme", "globex") if held_on_tenant(principal, t)
        }
        for tenant in ("acme", "globex"):
            if held_on_tenant(principal, tenant):
                assert c.describe_tenant(tenant).name == tenant
            else:
                with pytest.raises(PermissionDeniedError, match=f"tenant '{tenant}'"):
                    c.describe_tenant(tenant)
        # tenants themselves stay with superusers
        with pytest.raises(PermissionDeniedError, match="superuser"):
            c.create_tenant("initech")
        with pytest.raises(PermissionDeniedError, match="superuser"):
            c.delete_tenant("acme")


def test_a_token_for_one_tenant_is_refused_on_another(server: ServerProcess) -> None:
    """A JWT whose subject administers acme works in acme and nowhere else."""
    token = create_token("tina", dt.timedelta(minutes=5), secret=SECRET)
    with weir.Client(server.endpoint, credentials=weir.Token(token)) as c:
        c.create_topic("acme/ops/by-token")  # admin, not produce: tina writes nowhere
        assert c.describe_namespace("acme/ops").name == "acme/ops"
        for refused in (
            lambda: c.create_topic("globex/x/by-token"),
            lambda: _write(c, "globex/x/t"),
            lambda: _read(c, "globex/x/t"),
            lambda: c.describe_namespace("globex/x"),
            lambda: c.create_namespace("globex/mine"),
            lambda: c.set_namespace_policies("globex/x", {"retention_ms": 1234}),
        ):
            with pytest.raises(PermissionDeniedError, match="globex"):
                refused()
    with root(server) as r:
        assert r.describe_topic("globex/x/t").messages == 1  # nothing written there
        assert "globex/mine" not in {n.name for n in r.list_namespaces("globex")}
        assert r.describe_namespace("globex/x").policies.get("retention_ms") != 1234
        r.drop_topic("acme/ops/by-token")


def test_grants_list_tenant_and_namespace_resources_as_given(server: ServerProcess) -> None:
    with root(server) as r:
        shown = {(g.principal, g.permission, g.resource) for g in r.list_grants()}
    assert ("tina", "admin", "tenant:acme") in shown
    assert ("nadia", "admin", "namespace:acme/shop") in shown


def _curl(srv: ServerProcess, method: str, path: str, user: str) -> tuple[int, str]:
    out = subprocess.run(
        [
            "curl", "-sS", "--max-time", "15", "-X", method, "-u", f"{user}:{PASSWORD}",
            "-o", "-", "-w", "\n%{http_code}", f"{srv.http_url}/admin/v2{path}",
        ],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    body, _, code = out.stdout.rpartition("\n")
    return int(code), body


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_pulsar_admin_rest_answers_a_tenant_admin_by_its_grants(
    server: ServerProcess,
) -> None:
    """curl as tina (admin of acme) on the Pulsar admin REST: acme's namespaces are hers to
    make, remove and set policies on; globex's are not (403), nor are they listed."""
    assert _curl(server, "GET", "/tenants", "tina") == (200, '["acme"]')
    assert _curl(server, "PUT", "/namespaces/acme/rest", "tina")[0] == 204
    assert _curl(server, "GET", "/namespaces/acme/rest/deduplication", "tina")[0] == 200
    assert _curl(server, "DELETE", "/namespaces/acme/rest", "tina")[0] == 204
    code, body = _curl(server, "PUT", "/namespaces/globex/rest", "tina")
    assert code == 403 and "globex" in body, body
    assert _curl(server, "GET", "/namespaces/globex", "tina") == (200, "[]")
    assert _curl(server, "GET", "/namespaces/globex/x/deduplication", "tina")[0] == 403
    assert _curl(server, "GET", "/tenants/globex", "tina")[0] == 403
    assert _curl(server, "GET", "/namespaces/acme", "nadia") == (200, '["acme/shop"]')
    with root(server) as r:
        assert "globex/rest" not in {n.name for n in r.list_namespaces("globex")}
