"""Secure defaults: an open server (no authentication) listens on loopback only and says so;
a non-loopback address without authentication needs --insecure; secrets are never logged
or shown."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

import weir
from tests.cli.conftest import Weir, one_line_error
from tests.conftest import ServerProcess
from weir.errors import UnauthorizedError
from weir.security.jwt_tokens import create_token

OPEN_NOTE = "weir: no authentication (auth.allow_anonymous = true)"


def test_an_open_server_refuses_a_non_loopback_address(tmp_path: Path) -> None:
    cli = Weir()
    for address in ("0.0.0.0:0", "[::]:0"):
        r = cli("serve", "--data-dir", str(tmp_path / "data"), "--listen", address)
        assert r.code == 2, r.err
        assert one_line_error(r).startswith(
            f"error: refusing to listen on {address} without authentication"
        )
        assert "--insecure" in r.err
    assert not (tmp_path / "data").exists()


def test_an_open_server_says_it_is_open_and_on_loopback(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data")
    srv.start()
    try:
        assert any(line.startswith(OPEN_NOTE) and "loopback only" in line for line in srv.log)
    finally:
        srv.stop()


def test_insecure_lets_an_open_server_listen_everywhere_with_a_warning(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", "--listen", "0.0.0.0:0", "--insecure")
    srv.start()
    try:
        warning = [line for line in srv.log if "WARNING: no authentication" in line]
        assert warning and "--insecure" in warning[0], srv.log
        with weir.Client(srv.endpoint) as c:  # reached over loopback
            c.list_topics()
    finally:
        srv.stop()


def test_a_server_with_authentication_listens_anywhere_without_insecure(tmp_path: Path) -> None:
    env = {"WEIR_AUTH_USERS": "root:root-password", "WEIR_AUTH_ALLOW_ANONYMOUS": "false"}
    srv = ServerProcess(tmp_path / "data", "--listen", "0.0.0.0:0", env=env)
    srv.start()
    try:
        assert not any("no authentication" in line for line in srv.log), srv.log
        with weir.Client(srv.endpoint, credentials=("root", "root-password")) as c:
            c.list_topics()
    finally:
        srv.stop()


SECRETS = ["static-pw-Zq8", "jwt-secret-of-thirty-two-bytes-Zq8", "stored-pw-Zq8", "wrong-pw-Zq8"]


def test_secrets_are_never_logged_or_shown(tmp_path: Path) -> None:
    env = {
        "WEIR_AUTH_USERS": f"root:{SECRETS[0]}",
        "WEIR_AUTH_ALLOW_ANONYMOUS": "false",
        "WEIR_AUTH_SUPERUSERS": "root",
        "WEIR_AUTH_JWT_SECRET": SECRETS[1],
        "WEIR_LOG_AUDIT_FILE": str(tmp_path / "audit.jsonl"),
    }
    srv = ServerProcess(tmp_path / "data", "--log-level", "debug", env=env)
    srv.start()
    try:
        with weir.Client(srv.endpoint, credentials=("root", SECRETS[0])) as c:
            c.add_user("user1", SECRETS[2])
        with (
            weir.Client(srv.endpoint, credentials=("user1", SECRETS[3])) as c,
            pytest.raises(UnauthorizedError),
        ):
            c.whoami()
        token = create_token("svc", dt.timedelta(minutes=1), secret=SECRETS[1])
        with weir.Client(srv.endpoint, credentials=weir.Token(token)) as c:
            c.whoami()
            with pytest.raises(weir.errors.PermissionDeniedError):
                c.create_topic("audited")
        with weir.Client(srv.endpoint, credentials=("root", SECRETS[0])) as c:
            c.create_topic("audited")
            c.grant("svc", "produce", "audited")
            c.drop_topic("audited")
        cli = Weir(srv.endpoint)
        shown = cli("config", "check", env=env)
        shown_json = cli("config", "check", "--json", env=env)
        r = cli(
            "user",
            "add",
            "user2",
            "--password-stdin",
            input=SECRETS[2] + "\n",
            env={"WEIR_USER": "root", "WEIR_PASSWORD": SECRETS[0]},
        )
        assert r.code == 0, r.err
    finally:
        srv.stop()
    everything = "".join(srv.log) + shown.text + shown.err + shown_json.text + r.text + r.err
    for secret in [*SECRETS, token]:
        assert secret not in everything, secret
    assert 'root = "<hidden>"' in shown.text and 'jwt_secret = "<set>"' in shown.text
    audit_text = (tmp_path / "audit.jsonl").read_text()
    for secret in [*SECRETS, token]:
        assert secret not in audit_text, secret
    events = [json.loads(line) for line in audit_text.splitlines()]
    seen = [(e["audit"], e.get("user") or e.get("principal"), e.get("operation")) for e in events]
    for expected in [
        ("user_added", "user1", None),
        ("login_failed", "user1", None),
        ("denied", "svc", "create"),
        ("admin_allowed", "root", "create"),
        ("granted", "svc", None),
        ("admin_allowed", "root", "drop"),
        ("user_added", "user2", None),
    ]:
        assert expected in seen, (expected, seen)
    assert all("ts" in e or "time" in e for e in events), events[0]
