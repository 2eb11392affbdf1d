"""The security parts on their own: password hashes, the login throttle, JWT checks with each
algorithm, grant patterns, and the authorization rule."""

from __future__ import annotations

import datetime as dt

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from weir.errors import BadRequestError, PermissionDeniedError, UnauthorizedError
from weir.security import BearerToken, Principal, Security, StaticUsers
from weir.security.grants import (
    Grant,
    Permission,
    canonical_pattern,
    make_grant,
    short_resource,
)
from weir.security.jwt_tokens import JwtVerifier, create_token
from weir.security.passwords import hash_password, verify_password
from weir.security.throttle import FREE_FAILURES, MAX_LOCKOUT_S, LoginThrottle


def test_password_hashes_are_salted_scrypt_and_verify() -> None:
    a, b = hash_password("pw-12345678"), hash_password("pw-12345678")
    assert a != b and a.startswith("scrypt$14$8$1$")
    assert verify_password("pw-12345678", a) and not verify_password("pw-12345679", a)
    for broken in ("", "scrypt$", "bcrypt$1$2$3$4$5", a.replace("scrypt$14", "scrypt$x")):
        assert not verify_password("pw-12345678", broken)


def test_the_throttle_locks_out_after_free_failures_and_doubles() -> None:
    now = [1000.0]
    t = LoginThrottle(clock=lambda: now[0])
    keys = ["user:x"]
    for _ in range(FREE_FAILURES - 1):
        t.failed(keys, "bad_password")
        t.check(keys)  # still free
    t.failed(keys, "bad_password")
    with pytest.raises(UnauthorizedError, match="try again in 1 s"):
        t.check(keys)
    now[0] += 1.01
    t.check(keys)
    t.failed(keys, "bad_password")  # the 6th: 2 s
    with pytest.raises(UnauthorizedError, match="try again in 2 s"):
        t.check(keys)
    for _ in range(20):
        t.failed(keys, "bad_password")
    with pytest.raises(UnauthorizedError, match=f"try again in {int(MAX_LOCKOUT_S)} s"):
        t.check(keys)
    t.check(["user:y"])  # others are not affected
    t.succeeded(keys)
    t.check(keys)
    assert t.failures["bad_password"] == FREE_FAILURES + 21 and t.failures["throttled"] == 3


def _pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> tuple[bytes, bytes]:
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public


@pytest.mark.parametrize("kind", ["RS256", "ES256"])
def test_jwts_signed_with_a_private_key_are_checked_with_its_public_key(kind: str) -> None:
    key = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        if kind == "RS256"
        else ec.generate_private_key(ec.SECP256R1())
    )
    private, public = _pem(key)
    verifier = JwtVerifier(public_key=public, audience="svc")
    token = create_token("olga", dt.timedelta(minutes=1), private_key=private, audience="svc")
    assert verifier.authenticate(BearerToken(token)) == Principal("olga", "jwt")
    other, _ = _pem(ec.generate_private_key(ec.SECP256R1()))
    forged = create_token("olga", dt.timedelta(minutes=1), private_key=other, audience="svc")
    with pytest.raises(UnauthorizedError):
        verifier.authenticate(BearerToken(forged))
    hs = create_token("olga", dt.timedelta(minutes=1), secret="s" * 32, audience="svc")
    with pytest.raises(UnauthorizedError, match="signed with 'HS256': not accepted"):
        verifier.authenticate(BearerToken(hs))  # no secret configured: no HS256
    assert verifier.authenticate(BearerToken("abc.123.def")) is None  # not a JWT: not its kind


def test_grant_patterns() -> None:
    assert canonical_pattern("orders") == "public/default/orders"
    assert canonical_pattern("shop/*") == "public/shop/*"
    assert canonical_pattern("*") == "*/*/*"
    for bad in ("", "a/b/c/d", "sp ace", "a/../b/c/d"):
        with pytest.raises(BadRequestError):
            canonical_pattern(bad)
    g = make_grant("ann", "consume", "shop/*")
    assert g == Grant("ann", Permission.CONSUME, "public/shop/*")
    assert g.matches("public/shop/orders") and not g.matches("public/default/orders")
    assert Grant.from_key(g.key) == g
    with pytest.raises(BadRequestError, match="unknown permission 'read'"):
        make_grant("ann", "read", "x")


def test_tenant_and_namespace_resources() -> None:
    """``tenant:`` and ``namespace:`` grants cover every topic inside, and the tenancy calls
    on what they name; a topic grant covers no tenancy call; they survive a store round trip
    and read back as written."""
    t = make_grant("tina", "admin", "tenant:acme")
    assert (t.kind, t.resource) == ("tenant", "acme")
    assert t.matches("acme/shop/orders") and not t.matches("acmex/shop/orders")
    assert t.covers_tenant("acme") and t.covers_namespace("acme/any")
    assert not t.covers_namespace("globex/any")
    n = make_grant("nadia", "produce", "namespace:shop")
    assert (n.kind, n.resource) == ("namespace", "public/shop")
    assert n.matches("public/shop/x") and not n.matches("public/shopping/x")
    assert n.covers_namespace("public/shop") and not n.covers_tenant("public")
    w = make_grant("w", "consume", "namespace:acme/team-*")
    assert w.covers_namespace("acme/team-a") and not w.covers_namespace("acme/ops")
    topic = make_grant("ann", "admin", "acme/*/*")
    assert not topic.covers_tenant("acme") and not topic.covers_namespace("acme/shop")
    for g in (t, n, w):
        assert Grant.from_key(g.key) == g
    assert short_resource(t.kind, t.resource) == "tenant:acme"
    assert short_resource(n.kind, n.resource) == "namespace:public/shop"
    for bad in ("tenant:", "tenant:a/b", "namespace:a/b/c", "namespace:sp ace", "tenant:../x"):
        with pytest.raises(BadRequestError):
            make_grant("ann", "admin", bad)


def test_grants_apply_only_when_anonymous_access_is_off() -> None:
    open_server = Security(StaticUsers({}), allow_anonymous=True)
    anon = Principal("", "anonymous")
    open_server.authorize(anon, Permission.ADMIN, "public/default/x", "drop")  # open: all
    closed = Security(StaticUsers({"root": "pw"}), allow_anonymous=False, superusers=["root"])
    closed.authorize(
        Principal("root", "password"), Permission.ADMIN, "public/default/x", "dropping"
    )
    with pytest.raises(PermissionDeniedError) as err:
        closed.authorize(
            Principal("ann", "jwt"), Permission.PRODUCE, "public/default/x", "write to"
        )
    assert err.value.message == (
        "permission denied: write to topic 'x' needs the produce permission ('ann' has none)"
    )
