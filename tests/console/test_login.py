"""The console on a server with authentication on: a login, a session cookie, CSRF on
every form, and pages and actions limited to the principal's grants.

Principals: ``root`` is a superuser; ``viewer`` may consume ``shop-*`` (read-only: no
produce, no admin); ``feeder`` may produce to ``shop-*``; ``ops`` administers ``shop-*``.
Over plain HTTP (what a browser cannot show: cookie flags, refused posts) and in the
real headless Chromium (the login form, what each principal is offered).
"""

from __future__ import annotations

import datetime as dt
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from selenium.webdriver.common.by import By

from tests.cli.conftest import metrics_url
from tests.conftest import ServerProcess
from tests.console.test_browser import errors, page_url, shot, text, visit, wait_url
from weir.client import Client
from weir.console.app import _next
from weir.security.jwt_tokens import create_token

ROOT, ROOT_PW = "root", "root-password"
PASSWORD = "console-test-password"
JWT_SECRET = "console-test-jwt-secret-of-some-length"
GRANTS = {
    "viewer": [("consume", "shop-*")],
    "feeder": [("produce", "shop-*")],
    "ops": [("admin", "shop-*"), ("consume", "shop-*")],
}


@pytest.fixture(scope="module")
def auth_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {
        "WEIR_AUTH_USERS": f"{ROOT}:{ROOT_PW}",
        "WEIR_AUTH_ALLOW_ANONYMOUS": "false",
        "WEIR_AUTH_SUPERUSERS": ROOT,
        "WEIR_AUTH_JWT_SECRET": JWT_SECRET,
    }
    srv = ServerProcess(
        tmp_path_factory.mktemp("console-auth"), "--metrics-listen", "127.0.0.1:0", env=env
    )
    srv.start()
    with root_client(srv) as r:
        for name, grants in GRANTS.items():
            r.add_user(name, PASSWORD)
            for permission, pattern in grants:
                r.grant(name, permission, pattern)
        for t in ("shop-orders", "secret-payroll"):
            r.create_topic(t, 1, consumers=["c"])
            with r.writer(t) as w:
                w.write(b"first")
    yield srv
    srv.stop()


def root_client(srv: ServerProcess) -> Client:
    return Client(srv.endpoint, credentials=(ROOT, ROOT_PW))


@pytest.fixture(scope="module")
def base(auth_console: ServerProcess) -> str:
    return metrics_url(auth_console) + "/console"


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


OPENER = urllib.request.build_opener(NoRedirect)


class Browser:
    """Plain HTTP with one session cookie, as a browser keeps it."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.cookie = ""
        self.set_cookie = ""

    def go(
        self, path: str, form: dict[str, str] | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], str]:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        sent = dict(headers or {})
        if self.cookie:
            sent["Cookie"] = self.cookie
        req = urllib.request.Request(self.base + path, data=data, headers=sent)
        try:
            with OPENER.open(req, timeout=30) as resp:
                status, got, body = resp.status, resp.headers, resp.read().decode()
        except urllib.error.HTTPError as err:
            status, got, body = err.code, err.headers, err.read().decode()
        cookie = got.get("Set-Cookie", "")
        if cookie:
            self.set_cookie = cookie
            value = cookie.split(";", 1)[0]
            self.cookie = "" if value.endswith("=") or "Max-Age=0" in cookie else value
        return status, dict(got), body

    def login(self, user: str, password: str) -> None:
        status, _, _ = self.go("/login", {"user": user, "password": password})
        assert status == 303, status
        assert self.cookie.startswith("weir_console=")

    def csrf(self, path: str = "/topics") -> str:
        status, _, body = self.go(path)
        assert status == 200, (status, body[:300])
        m = re.search(r'name="csrf" value="([^"]+)"', body)
        assert m, "no CSRF field on " + path
        return m.group(1)


def test_nothing_is_served_before_a_login(base: str, auth_console: ServerProcess) -> None:
    anon = Browser(base)
    status, headers, _ = anon.go("/topics?q=shop")
    assert status == 303
    where = urllib.parse.urlsplit(headers["Location"])
    assert where.path == "/console/login"
    assert urllib.parse.parse_qs(where.query) == {"next": ["/console/topics?q=shop"]}
    status, _, body = anon.go("/login")
    assert status == 200 and 'id="login"' in body
    for path in ("/rates", "/lag?topic=shop-orders"):
        assert anon.go(path)[0] == 401
    status, headers, _ = anon.go("/live", headers={"HX-Request": "true"})
    assert status == 401 and headers["HX-Redirect"].startswith("/console/login")
    status, _, _ = anon.go("/topic/delete", {"name": "shop-orders", "confirm": "shop-orders"})
    assert status == 401
    with root_client(auth_console) as r:
        assert r.describe_topic("shop-orders").partitions == 1
    assert anon.go("/static/console.js")[0] == 200  # the page's own files need no login


def test_a_wrong_password_gets_no_session(base: str) -> None:
    b = Browser(base)
    status, _, body = b.go("/login", {"user": "viewer", "password": "wrong-password"})
    assert status == 401
    assert "Invalid user or password" in body
    assert b.cookie == ""
    status, _, body = b.go("/login", {"user": "nobody-at-all", "password": "x" * 12})
    assert status == 401 and "Invalid user or password" in body  # the same for no such user


def test_the_session_cookie_is_httponly_strict_and_scoped(base: str) -> None:
    b = Browser(base)
    status, headers, _ = b.go(
        "/login", {"user": ROOT, "password": ROOT_PW, "next": "/console/topics"}
    )
    assert status == 303 and headers["Location"] == "/console/topics"
    flags = [f.strip().lower() for f in b.set_cookie.split(";")]
    assert "httponly" in flags and "samesite=strict" in flags and "path=/console" in flags
    assert b.go("/topics")[0] == 200
    # a login never sends the browser to another site
    other = Browser(base)
    for target in (
        "https://evil.example/",
        "//evil.example/console",
        "/console/../x\\evil",
        "/console\r\nSet-Cookie: a=b",
    ):
        status, headers, _ = other.go("/login", {"user": ROOT, "password": ROOT_PW, "next": target})
        assert status == 303 and headers["Location"] == "/console", target


def test_a_form_without_the_sessions_csrf_token_is_refused(
    base: str, auth_console: ServerProcess
) -> None:
    b = Browser(base)
    b.login(ROOT, ROOT_PW)
    with root_client(auth_console) as r:
        r.create_topic("shop-csrf", 1)
    form = {"name": "shop-csrf", "confirm": "shop-csrf"}
    for token in ("", "forged"):
        status, _, body = b.go("/topic/delete", {**form, "csrf": token})
        assert (status, body) == (403, "this form is stale: reload the page\n")
    with root_client(auth_console) as r:
        assert r.describe_topic("shop-csrf").partitions == 1
    status, _, _ = b.go("/topic/delete", {**form, "csrf": b.csrf()})
    assert status == 303
    with root_client(auth_console) as r:
        assert "shop-csrf" not in [t.name for t in r.list_topics()]


def test_a_read_only_user_sees_its_topics_and_cannot_produce_or_delete(
    base: str, auth_console: ServerProcess
) -> None:
    b = Browser(base)
    b.login("viewer", PASSWORD)
    _, _, topics = b.go("/topics")
    assert "shop-orders" in topics and "secret-payroll" not in topics
    assert 'id="create-topic"' not in topics
    status, _, page = b.go("/topic?name=shop-orders")
    assert status == 200 and 'id="delete-topic"' not in page and 'id="alter-topic"' not in page
    status, _, page = b.go("/messages?topic=shop-orders&partition=0")
    assert status == 200 and ">first</pre>" in page and 'id="write-message"' not in page
    # a topic without a grant is refused the same whether or not it exists
    for name in ("secret-payroll", "no-such-topic"):
        status, _, page = b.go("/topic?" + urllib.parse.urlencode({"name": name}))
        assert status == 403 and "needs a grant (&#39;viewer&#39; has none)" in page

    csrf = b.csrf()
    status, _, page = b.go(
        "/topic/delete", {"name": "shop-orders", "confirm": "shop-orders", "csrf": csrf}
    )
    assert status == 403 and "drop topic &#39;shop-orders&#39; needs the admin permission" in page
    status, _, page = b.go(
        "/messages/write", {"topic": "shop-orders", "partition": "0", "value": "x", "csrf": csrf}
    )
    assert status == 403 and "needs the produce permission" in page
    status, _, page = b.go("/topics/create", {"name": "shop-new", "csrf": csrf})
    assert status == 403
    with root_client(auth_console) as r:
        assert r.describe_topic("shop-orders").partitions == 1
        assert r.describe_consumer("shop-orders", "c").partitions[0].end_offset == 1
        assert "shop-new" not in [t.name for t in r.list_topics()]
    # what it may do, it does: move its consumer
    status, _, _ = b.go(
        "/consumers/seek",
        {"topic": "shop-orders", "consumer": "c", "to": "end", "csrf": csrf},
    )
    assert status == 303
    _, _, consumers = b.go("/consumers")
    assert 'data-topic="shop-orders"' in consumers and "secret-payroll" not in consumers


def test_a_user_limited_to_some_groups_moves_only_those(
    base: str, auth_console: ServerProcess
) -> None:
    """A group grant (``group:shop-*``) limits the consumers the console moves for its holder:
    another group's offset is refused with a 403 naming the group, and stays where it was."""
    with root_client(auth_console) as r:
        r.add_user("grouped", PASSWORD)
        r.grant("grouped", "consume", "shop-*")
        r.grant("grouped", "consume", "group:shop-*")
        r.commit_offset("shop-orders", 0, "shop-g", 0)
        r.commit_offset("shop-orders", 0, "other-g", 0)
    b = Browser(base)
    b.login("grouped", PASSWORD)
    csrf = b.csrf()
    form = {"topic": "shop-orders", "to": "end", "csrf": csrf}
    status, _, page = b.go("/consumers/seek", {**form, "consumer": "other-g"})
    assert status == 403, status
    assert "commit an offset of group &#39;other-g&#39; needs the consume permission" in page
    status, _, _ = b.go("/consumers/seek", {**form, "consumer": "shop-g"})
    assert status == 303
    with root_client(auth_console) as r:
        assert r.describe_consumer("shop-orders", "other-g").partitions[0].committed_offset == 0
        assert r.describe_consumer("shop-orders", "shop-g").partitions[0].committed_offset == 1


def test_a_producer_may_write_but_not_read(base: str, auth_console: ServerProcess) -> None:
    b = Browser(base)
    b.login("feeder", PASSWORD)
    csrf = b.csrf()
    status, _, page = b.go("/messages?topic=shop-orders&partition=0")
    assert status == 200 and 'id="no-read"' in page and 'id="write-message"' in page
    assert ">first</pre>" not in page  # what is stored is not shown
    status, _, page = b.go("/messages?topic=shop-orders&partition=0&offset=0")
    assert ">first</pre>" not in page
    status, _, page = b.go(
        "/messages/write",
        {"topic": "shop-orders", "partition": "0", "value": "from feeder", "csrf": csrf},
    )
    assert status == 303
    with root_client(auth_console) as r:
        msgs = [m.data for c in r.read_range("shop-orders", 0, 0, 10) for m in c.messages()]
    assert b"from feeder" in msgs


def test_a_token_logs_in_and_a_deleted_user_is_logged_out(
    base: str, auth_console: ServerProcess
) -> None:
    b = Browser(base)
    token = create_token("viewer", dt.timedelta(minutes=10), secret=JWT_SECRET)
    status, _, _ = b.go("/login", {"token": token})
    assert status == 303
    _, _, page = b.go("/topics")
    assert 'id="who">viewer<' in page
    status, _, body = Browser(base).go("/login", {"token": token[:-4] + "AAAA"})
    assert status == 401 and "invalid auth token" in body

    with root_client(auth_console) as r:
        r.add_user("shortlived", PASSWORD)
        r.grant("shortlived", "consume", "shop-*")
    gone = Browser(base)
    gone.login("shortlived", PASSWORD)
    assert gone.go("/topics")[0] == 200
    with root_client(auth_console) as r:
        r.delete_user("shortlived")
    status, headers, _ = gone.go("/topics")
    assert status == 303 and headers["Location"].startswith("/console/login")


def test_logout_ends_the_session(base: str) -> None:
    b = Browser(base)
    b.login("viewer", PASSWORD)
    old = b.cookie
    csrf = b.csrf()
    status, headers, _ = b.go("/logout", {"csrf": csrf})
    assert status == 303 and headers["Location"] == "/console/login"
    b.cookie = old  # a copy of the old cookie is worth nothing now
    assert b.go("/topics")[0] == 303


def test_login_and_grants_in_the_browser(browser: Any, base: str, shots: Path) -> None:
    visit(browser, base + "/topics")
    wait_url(browser, "/console/login")
    assert errors(browser) == []
    shot(browser, shots, "login")
    form = browser.find_element(By.ID, "login")
    form.find_element(By.NAME, "user").send_keys("ops")
    form.find_element(By.NAME, "password").send_keys(PASSWORD)
    form.find_element(By.CSS_SELECTOR, "button").click()
    wait_url(browser, "/console/topics")
    assert text(browser, "#who") == "ops"
    assert browser.find_element(By.ID, "create-topic")
    assert "secret-payroll" not in text(browser, "main")
    assert browser.get_cookie("weir_console")["httpOnly"] is True
    assert browser.execute_script("return document.cookie") == ""  # scripts cannot read it
    visit(browser, page_url(base, "/topic", name="shop-orders"))
    assert browser.find_element(By.ID, "delete-topic")  # ops administers shop-*
    assert errors(browser) == []

    browser.find_element(By.CSS_SELECTOR, "#logout button").click()
    wait_url(browser, "/console/login")
    form = browser.find_element(By.ID, "login")
    form.find_element(By.NAME, "user").send_keys("viewer")
    form.find_element(By.NAME, "password").send_keys(PASSWORD)
    form.find_element(By.CSS_SELECTOR, "button").click()
    wait_url(browser, "/console")
    visit(browser, page_url(base, "/topic", name="shop-orders"))
    assert not browser.find_elements(By.ID, "delete-topic")
    assert not browser.find_elements(By.ID, "alter-topic")
    visit(browser, page_url(base, "/messages", topic="shop-orders", partition=0))
    assert not browser.find_elements(By.ID, "write-message")
    assert errors(browser) == []
    shot(browser, shots, "read-only-messages")
    browser.find_element(By.CSS_SELECTOR, "#logout button").click()
    wait_url(browser, "/console/login")


def test_an_open_page_of_a_deleted_user_goes_to_the_login(
    browser: Any, base: str, auth_console: ServerProcess
) -> None:
    with root_client(auth_console) as r:
        r.add_user("leaving", PASSWORD)
        r.grant("leaving", "consume", "shop-*")
    visit(browser, base + "/login")
    form = browser.find_element(By.ID, "login")
    form.find_element(By.NAME, "user").send_keys("leaving")
    form.find_element(By.NAME, "password").send_keys(PASSWORD)
    form.find_element(By.CSS_SELECTOR, "button").click()
    wait_url(browser, "/console")
    visit(browser, page_url(base, "/topic", name="shop-orders"))
    assert text(browser, "#who") == "leaving"
    with root_client(auth_console) as r:
        r.delete_user("leaving")
    wait_url(browser, "/console/login")  # the next live refresh (every 5 s) is refused


@given(st.text(max_size=80) | st.sampled_from(["/console", "//x", "/console//evil.example"]))
def test_after_a_login_the_browser_stays_on_the_console(target: str) -> None:
    where = _next({"next": "/console" + target}) if target[:1] == "/" else _next({"next": target})
    split = urllib.parse.urlsplit(where)
    assert where.startswith("/console") and not split.scheme and not split.netloc
    assert "\\" not in where and where.isprintable() and " " not in where


def test_sessions_expire_and_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from weir.console import sessions as mod

    class Req:
        def __init__(self, sid: str) -> None:
            self.cookies = {mod.COOKIE: sid}

    store = mod.Sessions()
    old = store.open("a", "token-a")
    assert store.of(Req(old.id)) is old  # type: ignore[arg-type]
    old.created -= mod.MAX_AGE_S + 1
    assert store.of(Req(old.id)) is None  # type: ignore[arg-type]
    assert len(store) == 0
    monkeypatch.setattr(mod, "MAX_SESSIONS", 3)
    opened = [store.open(f"u{i}", "t") for i in range(5)]
    assert len(store) == 3
    assert store.of(Req(opened[0].id)) is None  # type: ignore[arg-type]  # the oldest went
    assert store.of(Req(opened[-1].id)) is opened[-1]  # type: ignore[arg-type]
    assert not opened[-1].csrf_ok("") and opened[-1].csrf_ok(opened[-1].csrf)
