"""Stored users (scrypt hashes in the data directory), JWTs (HS256, RS256, ES256), the client
certificate as principal, and slowed-down failed logins, on a real server with the weir
SDK, the `weir` CLI and the `ydb` SDK."""

from __future__ import annotations

import datetime as dt
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
import ydb
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

import weir
from tests.cli.conftest import Weir, metrics_url, one_line_error
from tests.conftest import ServerProcess
from tests.security.certs import Authority
from tests.ydb.conftest import DATABASE
from weir.errors import BadRequestError, PermissionDeniedError, UnauthorizedError
from weir.security.jwt_tokens import create_token

ADMIN, ADMIN_PW = "admin", "admin-password"
SECRET = "a-test-secret-of-32-bytes-or-more!!"
AUDIENCE = "weir-tests"


def _pem_private(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_public(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("jwt-keys")
    ec_key = ec.generate_private_key(ec.SECP256R1())
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = ec.generate_private_key(ec.SECP256R1())
    out = {
        "ec": d / "ec.key",
        "ec.pub": d / "ec.pub",
        "rsa": d / "rsa.key",
        "other": d / "other.key",
    }
    out["ec"].write_bytes(_pem_private(ec_key))
    out["ec.pub"].write_bytes(_pem_public(ec_key))
    out["rsa"].write_bytes(_pem_private(rsa_key))
    out["other"].write_bytes(_pem_private(other))
    return out


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, keys: dict[str, Path]
) -> Iterator[ServerProcess]:
    env = {
        "WEIR_AUTH_USERS": f"{ADMIN}:{ADMIN_PW}",
        "WEIR_AUTH_ALLOW_ANONYMOUS": "false",
        "WEIR_AUTH_SUPERUSERS": ADMIN,
        "WEIR_AUTH_JWT_SECRET": SECRET,
        "WEIR_AUTH_JWT_PUBLIC_KEY_FILE": str(keys["ec.pub"]),
    }
    srv = ServerProcess(
        tmp_path_factory.mktemp("users-server"), "--metrics-listen", "127.0.0.1:0", env=env
    )
    srv.start()
    yield srv
    srv.stop()


def admin(srv: ServerProcess) -> weir.Client:
    return weir.Client(srv.endpoint, credentials=(ADMIN, ADMIN_PW))


# ---------------------------------------------------------------------------- stored users


def test_a_stored_user_logs_in_until_its_password_changes_or_it_is_deleted(
    server: ServerProcess, topic_name: str
) -> None:
    with admin(server) as a:
        a.add_user("carol", "carol-password-1")
        a.create_topic(topic_name)
        assert [
            (u.user, u.source, u.superuser) for u in a.list_users() if u.user in ("carol", ADMIN)
        ] == [
            (ADMIN, "config", True),
            ("carol", "stored", False),
        ]
        carol = weir.Client(server.endpoint, credentials=("carol", "carol-password-1"))
        try:
            assert carol.whoami() == weir.client.security_admin.Identity("carol", "token", False)
            a.set_password("carol", "carol-password-2")
            # the token carol's client holds is revoked; its login again uses the old password
            with pytest.raises(UnauthorizedError, match="Invalid user or password"):
                carol.whoami()
        finally:
            carol.close()
        with weir.Client(server.endpoint, credentials=("carol", "carol-password-2")) as carol2:
            assert carol2.whoami().principal == "carol"
            a.delete_user("carol")
            with pytest.raises(UnauthorizedError):
                carol2.whoami()
        assert "carol" not in [u.user for u in a.list_users()]


def test_user_management_is_for_superusers_and_checks_its_input(server: ServerProcess) -> None:
    with admin(server) as a:
        a.add_user("dave", "dave-password")
        with pytest.raises(weir.errors.AlreadyExistsError, match="already exists"):
            a.add_user("dave", "another-password")
        with pytest.raises(BadRequestError, match="8 to 1024 characters"):
            a.add_user("erin", "short")
        with pytest.raises(BadRequestError, match="bad user name"):
            a.add_user("no spaces", "long-enough-pw")
        with pytest.raises(BadRequestError, match="static user of the config"):
            a.add_user(ADMIN, "long-enough-pw")
        with pytest.raises(weir.errors.NotFoundError, match="does not exist"):
            a.delete_user("nobody")
    with weir.Client(server.endpoint, credentials=("dave", "dave-password")) as dave:
        for call, operation in [
            (lambda: dave.add_user("x1", "long-enough-pw"), "adding a user"),
            (lambda: dave.delete_user(ADMIN), "deleting a user"),
            (dave.list_users, "listing users"),
            (
                lambda: dave.set_password(ADMIN, "long-enough-pw"),
                "changing another user's password",
            ),
            (lambda: dave.grant("dave", "admin", "*"), "granting a permission"),
        ]:
            with pytest.raises(PermissionDeniedError, match=f"{operation} needs a superuser"):
                call()
        dave.set_password("dave", "dave-password-2")  # a user changes its own


def test_passwords_are_stored_hashed(tmp_path: Path) -> None:
    env = {"WEIR_AUTH_USERS": f"{ADMIN}:{ADMIN_PW}", "WEIR_AUTH_SUPERUSERS": ADMIN}
    srv = ServerProcess(tmp_path / "data", env=env)
    srv.start()
    try:
        with admin(srv) as a:
            a.add_user("frank", "frank-plaintext-password")
    finally:
        srv.stop()
    data = b"".join(p.read_bytes() for p in (tmp_path / "data").rglob("*.mdb"))
    assert b"frank-plaintext-password" not in data
    assert b"scrypt$" in data
    srv.start()  # the user survives a restart
    try:
        with weir.Client(srv.endpoint, credentials=("frank", "frank-plaintext-password")) as f:
            assert f.whoami().principal == "frank"
    finally:
        srv.stop()


def test_the_cli_manages_users_without_showing_passwords(server: ServerProcess) -> None:
    cli = Weir(server.endpoint)
    as_admin = {"WEIR_USER": ADMIN, "WEIR_PASSWORD": ADMIN_PW}
    r = cli("user", "add", "gina", "--password-stdin", input="gina-password\n", env=as_admin)
    assert (r.code, r.text) == (0, "added user gina\n"), r.err
    r = cli("user", "list", "--json", env=as_admin)
    users = {u["user"]: u for u in r.json()}
    assert users["gina"]["source"] == "stored" and "password" not in str(users)
    r = cli("whoami", env={"WEIR_USER": "gina", "WEIR_PASSWORD": "gina-password"})
    assert (r.code, r.text) == (0, "gina (token)\n"), r.err
    r = cli("user", "passwd", "gina", "--password-stdin", input="gina-password-2\n", env=as_admin)
    assert r.code == 0, r.err
    r = cli("whoami", env={"WEIR_USER": "gina", "WEIR_PASSWORD": "gina-password"})
    assert r.code == 1 and "Invalid user or password" in one_line_error(r)
    r = cli("user", "add", "hank", env=as_admin)  # no terminal, no --password-stdin
    assert (r.code, one_line_error(r)) == (
        2,
        "error: give the new password on stdin with --password-stdin",
    )
    r = cli("user", "delete", "gina", env=as_admin)
    assert (r.code, r.text) == (0, "deleted user gina\n"), r.err
    for result in (r,):
        assert "gina-password" not in result.err + result.text


# ---------------------------------------------------------------------------- JWT


def test_hs256_tokens_prove_their_subject_until_they_expire(server: ServerProcess) -> None:
    good = create_token("ivan", dt.timedelta(minutes=5), secret=SECRET)
    with weir.Client(server.endpoint, credentials=weir.Token(good)) as c:
        assert c.whoami() == weir.client.security_admin.Identity("ivan", "jwt", False)
    expired = create_token("ivan", dt.timedelta(seconds=-5), secret=SECRET)
    head, body, sig = good.split(".")
    tampered_claims = jwt.utils.base64url_encode(
        jwt.utils.base64url_decode(body).replace(b'"ivan"', b'"root"')
    ).decode()
    bad = {
        "expired": (expired, "expired"),
        "tampered": (f"{head}.{tampered_claims}.{sig}", "invalid auth token"),
        "other secret": (
            create_token(
                "ivan", dt.timedelta(minutes=5), secret="another-secret-32-bytes-long!!!!"
            ),
            "invalid auth token",
        ),
        "no exp": (jwt.encode({"sub": "ivan"}, SECRET, algorithm="HS256"), "no 'exp' claim"),
        "alg none": (
            jwt.encode({"sub": "ivan", "exp": 2**40}, None, algorithm="none"),  # type: ignore[arg-type]
            "not accepted",
        ),
        "garbage": ("eyJhbGciOi.garbage.x", "malformed auth token"),
        "oversized": ("eyJ" + "A" * 6000 + ".x.y", "too long"),
    }
    for case, (token, message) in bad.items():
        with (
            weir.Client(server.endpoint, credentials=weir.Token(token)) as c,
            pytest.raises(UnauthorizedError) as err,
        ):
            c.whoami()
            assert message in err.value.message, (case, err.value.message)


def test_rs256_and_es256_tokens_are_checked_with_the_public_key(
    server: ServerProcess, keys: dict[str, Path]
) -> None:
    es = create_token("judy", dt.timedelta(minutes=5), private_key=keys["ec"].read_bytes())
    assert jwt.get_unverified_header(es)["alg"] == "ES256"
    with weir.Client(server.endpoint, credentials=weir.Token(es)) as c:
        assert c.whoami().principal == "judy"
    forged = create_token("judy", dt.timedelta(minutes=5), private_key=keys["other"].read_bytes())
    # an RS256 token from a key the server does not know (its public key is EC)
    rs = create_token("judy", dt.timedelta(minutes=5), private_key=keys["rsa"].read_bytes())
    assert jwt.get_unverified_header(rs)["alg"] == "RS256"
    for token, message in (
        (forged, "invalid auth token"),
        (rs, "signed with 'RS256': not accepted"),
    ):
        with (
            weir.Client(server.endpoint, credentials=weir.Token(token)) as c,
            pytest.raises(UnauthorizedError, match=message),
        ):
            c.whoami()


def test_the_audience_is_checked_when_configured(tmp_path: Path) -> None:
    env = {
        "WEIR_AUTH_ALLOW_ANONYMOUS": "false",
        "WEIR_AUTH_JWT_SECRET": SECRET,
        "WEIR_AUTH_JWT_AUDIENCE": AUDIENCE,
    }
    srv = ServerProcess(tmp_path / "data", env=env)
    srv.start()
    try:
        ok = create_token("kim", dt.timedelta(minutes=5), secret=SECRET, audience=AUDIENCE)
        with weir.Client(srv.endpoint, credentials=weir.Token(ok)) as c:
            assert c.whoami().principal == "kim"
        for aud in ("another-service", ""):
            token = create_token("kim", dt.timedelta(minutes=5), secret=SECRET, audience=aud)
            with (
                weir.Client(srv.endpoint, credentials=weir.Token(token)) as c,
                pytest.raises(UnauthorizedError, match=r"audience|'aud'"),
            ):
                c.whoami()
    finally:
        srv.stop()


def test_weir_token_create_signs_what_the_server_accepts(
    server: ServerProcess, keys: dict[str, Path]
) -> None:
    cli = Weir(server.endpoint)
    r = cli(
        "token",
        "create",
        "--subject",
        "liam",
        "--expires",
        "10m",
        env={"WEIR_AUTH_JWT_SECRET": SECRET},
    )
    assert r.code == 0, r.err
    token = r.text.strip()
    claims = jwt.decode(token, SECRET, algorithms=["HS256"])
    assert claims["sub"] == "liam" and 500 < claims["exp"] - claims["iat"] <= 600
    r = cli("whoami", env={"WEIR_TOKEN": token})
    assert (r.code, r.text) == (0, "liam (jwt)\n"), r.err
    r = cli(
        "token", "create", "--subject", "liam", "--expires", "1h", "--private-key", str(keys["ec"])
    )
    assert r.code == 0, r.err
    assert cli("whoami", env={"WEIR_TOKEN": r.text.strip()}).text == "liam (jwt)\n"
    r = cli("token", "create", "--subject", "liam", "--expires", "1h")
    assert r.code == 2 and "nothing to sign with" in one_line_error(r)
    r = cli("whoami", env={"WEIR_TOKEN": token[:-4] + "AAAA"})
    assert r.code == 1 and "invalid auth token" in one_line_error(r)


def test_every_client_command_takes_a_token_and_never_shows_it(
    server: ServerProcess, topic_name: str
) -> None:
    """`--token` / WEIR_TOKEN on the shared client options: a good JWT runs the command (a
    unary call, a write stream, a read stream); a refused one is a one-line error naming the
    token option; the token shows in no output, help text or server log."""
    cli = Weir(server.endpoint)
    good = create_token(ADMIN, dt.timedelta(minutes=5), secret=SECRET)
    r = cli("topic", "create", topic_name, "--token", good)
    assert r.code == 0, r.err
    r = cli("write", topic_name, "--token", good, input="one\ntwo\n")
    assert r.code == 0, r.err
    r = cli("read", topic_name, "-n", "2", env={"WEIR_TOKEN": good})
    assert (r.code, r.text) == (0, "one\ntwo\n"), r.err
    r = cli("whoami", "--token", good)
    assert (r.code, r.text) == (0, f"{ADMIN} (jwt, superuser)\n"), r.err
    outputs = [r]
    head, body, sig = good.split(".")
    refused = {
        "expired": (
            create_token(ADMIN, dt.timedelta(seconds=-5), secret=SECRET),
            "auth token expired",
        ),
        "tampered": (f"{head}.{body}.{sig[:-4]}AAAA", "invalid auth token"),
        "other secret": (
            create_token(ADMIN, dt.timedelta(minutes=5), secret="another-secret-32-bytes-long!!!!"),
            "invalid auth token",
        ),
        "garbage": ("not-a-token", "malformed auth token"),
    }
    for case, (token, reason) in refused.items():
        for how in (["--token", token], []):
            r = cli("topic", "describe", topic_name, *how, env={"WEIR_TOKEN": token})
            assert r.code == 1, (case, r.err)
            assert one_line_error(r) == (
                f"error: the server refused the token (--token / WEIR_TOKEN): {reason}"
            ), case
            outputs.append(r)
    r = cli("write", topic_name, "--token", refused["expired"][0], input="three\n")
    assert r.code == 1 and "refused the token" in one_line_error(r), r.err
    outputs.append(r)
    r = cli("whoami", "--token", good, "--user", ADMIN, env={"WEIR_PASSWORD": ADMIN_PW})
    assert (r.code, one_line_error(r)) == (
        2,
        "error: --token (WEIR_TOKEN) and --user (WEIR_USER): give one, not both",
    )
    r = cli("topic", "list", "--help", env={"WEIR_TOKEN": good})
    assert r.code == 0 and "--token" in r.text and "WEIR_TOKEN" in r.text
    outputs.append(r)
    tokens = [good] + [token for token, _ in refused.values()]
    seen = "".join(server.log) + "".join(o.text + o.err for o in outputs)
    for token in tokens:
        for part in token.split("."):
            if len(part) > 8:
                assert part not in seen


def test_the_ydb_sdk_sends_a_jwt_as_its_access_token(
    server: ServerProcess, topic_name: str
) -> None:
    token = create_token(ADMIN, dt.timedelta(minutes=5), secret=SECRET)
    driver = ydb.Driver(
        endpoint=f"grpc://{server.endpoint}",
        database=DATABASE,
        credentials=ydb.AccessTokenCredentials(token),  # type: ignore[no-untyped-call]
    )
    try:
        driver.wait(timeout=15, fail_fast=True)
        driver.topic_client.create_topic(f"{DATABASE}/{topic_name}")
        assert driver.topic_client.describe_topic(f"{DATABASE}/{topic_name}").partitions
    finally:
        driver.stop(timeout=5)
    expired = create_token(ADMIN, dt.timedelta(seconds=-1), secret=SECRET)
    driver = ydb.Driver(
        endpoint=f"grpc://{server.endpoint}",
        database=DATABASE,
        credentials=ydb.AccessTokenCredentials(expired),  # type: ignore[no-untyped-call]
    )
    try:
        with pytest.raises(ydb.issues.Error) as err:
            driver.wait(timeout=15, fail_fast=True)
            driver.topic_client.describe_topic(f"{DATABASE}/{topic_name}")
        assert "expired" in str(err.value) or "UNAUTHORIZED" in str(err.value).upper(), err.value
    finally:
        driver.stop(timeout=5)


# ---------------------------------------------------------------------------- mTLS principal


def test_the_client_certificate_names_the_principal(tmp_path: Path) -> None:
    ca = Authority(tmp_path / "ca")
    cert = ca.issue("server", stem="server")
    mona = ca.issue("mona", server=False)
    env = {
        "WEIR_TLS_CERT_FILE": str(cert.cert),
        "WEIR_TLS_KEY_FILE": str(cert.key),
        "WEIR_TLS_CLIENT_CA_FILE": str(ca.path),
        "WEIR_AUTH_ALLOW_ANONYMOUS": "false",
        "WEIR_AUTH_USERS": f"{ADMIN}:{ADMIN_PW}",
        "WEIR_AUTH_SUPERUSERS": ADMIN,
    }
    srv = ServerProcess(tmp_path / "data", env=env)
    srv.start()
    try:
        tls = weir.Tls(ca=ca.path, cert=mona.cert, key=mona.key)
        with weir.Client(srv.endpoint, tls=tls) as c:
            assert c.whoami() == weir.client.security_admin.Identity("mona", "mtls", False)
        # a login on the same connection takes precedence over the certificate
        with weir.Client(srv.endpoint, tls=tls, credentials=(ADMIN, ADMIN_PW)) as c:
            assert c.whoami().principal == ADMIN
    finally:
        srv.stop()


# ---------------------------------------------------------------------------- brute force


def test_failed_logins_are_slowed_down_and_counted(server: ServerProcess) -> None:
    with admin(server) as a:
        a.add_user("nina", "nina-password")
    for _ in range(5):
        with (
            weir.Client(server.endpoint, credentials=("nina", "wrong-guess")) as c,
            pytest.raises(UnauthorizedError, match="Invalid user or password"),
        ):
            c.whoami()
    # now even the right password is refused, unchecked, for a while
    with (
        weir.Client(server.endpoint, credentials=("nina", "nina-password")) as c,
        pytest.raises(UnauthorizedError, match="too many failed logins: try again in"),
    ):
        c.whoami()
    # other users are not locked out
    with admin(server) as a:
        assert a.whoami().principal == ADMIN
    text = urllib.request.urlopen(metrics_url(server) + "/metrics", timeout=10).read().decode()
    counts = {
        line.split('"')[1]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("weir_auth_failures_total{")
    }
    assert counts["bad_password"] >= 5 and counts["throttled"] >= 1, counts
    assert "nina-password" not in text and "wrong-guess" not in "".join(server.log)
