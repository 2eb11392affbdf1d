"""The console's subscription pages in a real headless Chromium: the numbers equal what
`weir subscription list|describe` prints, the admin actions ask first and then do what
the SDK then sees, and hostile subscription names are shown as text."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from tests.cli.conftest import Weir
from tests.conftest import ServerProcess
from tests.console.test_browser import (
    WAIT_S,
    confirm,
    errors,
    page_url,
    shot,
    text,
    visit,
    wait,
    wait_url,
)
from weir.client import Client
from weir.client.subscription_sync import SubscriptionConsumer

HOSTILE_SUB = "<img src=x onerror=\"window.pwned='sub'\">"


@pytest.fixture(scope="module")
def jobs(client: Client) -> Iterator[SubscriptionConsumer]:
    """Topic ``jobs``: 6 + 4 messages; ``audit`` (no consumer, from the start), ``workers``
    (shared, one consumer that received all 10 and acknowledged 3), and a registered
    consumer ``billing`` that committed 2 of partition 0."""
    client.create_topic("jobs", 2, consumers=["billing"])
    for p, n in ((0, 6), (1, 4)):
        with client.writer("jobs", partition=p) as w:
            w.write_many([b"job"] * n)
    client.commit_offset("jobs", 0, "billing", 2)
    client.create_subscription("jobs", "audit", initial_position="earliest")
    worker = client.subscribe(
        "jobs", "workers", type="shared", initial_position="earliest", consumer_name="w1"
    )
    got: list[Any] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < 10 and time.monotonic() < deadline:
        got.extend(worker.receive_batch(timeout=0.2))
    assert len(got) == 10
    worker.acknowledge(got[:3])
    yield worker
    worker.close()


def cli(console_server: ServerProcess, *args: str) -> Any:
    return Weir(console_server.endpoint)("subscription", *args, "--json").json()


def test_the_list_shows_what_the_cli_lists(
    browser: Any,
    console_url: str,
    console_server: ServerProcess,
    jobs: SubscriptionConsumer,
    shots: Path,
) -> None:
    listed = {s["name"]: s for s in cli(console_server, "list", "jobs")}
    assert set(listed) == {"audit", "billing", "workers"}
    assert (listed["workers"]["backlog"], listed["workers"]["unacked"]) == (7, 7)

    for url in (
        page_url(console_url, "/subscriptions"),
        page_url(console_url, "/subscriptions", topic="jobs"),
    ):
        visit(browser, url)
        for name, s in listed.items():
            row = browser.find_element(
                By.CSS_SELECTOR, f'#subscriptions tr[data-topic="jobs"][data-subscription="{name}"]'
            )
            assert row.find_element(By.CSS_SELECTOR, ".type").text == s["type"] + (
                " (consumer)" if s["consumer"] else ""
            )
            assert int(row.find_element(By.CSS_SELECTOR, ".backlog").text) == s["backlog"]
            assert int(row.find_element(By.CSS_SELECTOR, ".unacked").text) == s["unacked"]
            assert int(row.find_element(By.CSS_SELECTOR, ".consumers").text) == len(s["consumers"])
        assert errors(browser) == []
    shot(browser, shots, "subscriptions")

    visit(browser, page_url(console_url, "/topic", name="jobs"))  # the topic page lists them too
    for name, s in listed.items():
        row = browser.find_element(
            By.CSS_SELECTOR, f'#topic-subscriptions tr[data-subscription="{name}"]'
        )
        assert int(row.find_element(By.CSS_SELECTOR, ".backlog").text) == s["backlog"]
    assert errors(browser) == []


def test_the_detail_shows_what_the_cli_describes(
    browser: Any,
    console_url: str,
    console_server: ServerProcess,
    jobs: SubscriptionConsumer,
    shots: Path,
) -> None:
    for name in ("workers", "billing"):
        described = cli(console_server, "describe", "jobs", name)
        visit(browser, page_url(console_url, "/subscription", topic="jobs", name=name))
        assert text(browser, "#subscription-name") == name
        assert int(text(browser, "#sub-backlog")) == described["backlog"]
        assert int(text(browser, "#sub-unacked")) == described["unacked"]
        for p in described["partitions"]:
            row = browser.find_element(
                By.CSS_SELECTOR, f'#sub-partitions tr[data-partition="{p["partition"]}"]'
            )
            assert int(row.find_element(By.CSS_SELECTOR, ".mark").text) == p["mark_delete"]
            assert int(row.find_element(By.CSS_SELECTOR, ".backlog").text) == p["backlog"]
            assert int(row.find_element(By.CSS_SELECTOR, ".unacked").text) == p["unacked"]
        names = [
            e.text for e in browser.find_elements(By.CSS_SELECTOR, "#sub-consumers .consumer-name")
        ]
        assert names == [c["name"] or "\u2013" for c in described["consumers"]]
        assert errors(browser) == []
        shot(browser, shots, f"subscription-{name}")


def test_skip_seek_and_delete_ask_first_then_act(
    browser: Any, console_url: str, client: Client, jobs: SubscriptionConsumer
) -> None:
    def backlog() -> int:
        return client.describe_subscription("jobs", "audit").backlog

    assert backlog() == 10
    visit(browser, page_url(console_url, "/subscription", topic="jobs", name="audit"))
    form = browser.find_element(By.ID, "skip-subscription")
    form.find_element(By.CSS_SELECTOR, "select[name=partition] option[value='0']").click()
    form.find_element(By.NAME, "count").send_keys("2")
    form.find_element(By.CSS_SELECTOR, "button").click()
    assert "Skip messages of subscription audit of jobs?" in confirm(browser, accept=False)
    assert backlog() == 10
    form.find_element(By.CSS_SELECTOR, "button").click()
    confirm(browser, accept=True)
    wait_url(browser, "note=skipped")
    assert "skipped 2 message(s)" in text(browser, "#flash")
    assert backlog() == 8
    assert int(text(browser, "#sub-backlog")) == 8

    form = browser.find_element(By.ID, "seek-subscription")
    form.find_element(By.NAME, "to").send_keys("earliest")
    form.find_element(By.CSS_SELECTOR, "button").click()
    assert "Move subscription audit of jobs?" in confirm(browser, accept=True)
    wait_url(browser, "note=moved")
    assert "moved subscription audit" in text(browser, "#flash")
    assert backlog() == 10

    browser.find_element(By.CSS_SELECTOR, "#delete-subscription button").click()
    assert "Delete subscription audit of jobs" in confirm(browser, accept=False)
    assert "audit" in [s.name for s in client.list_subscriptions("jobs")]
    browser.find_element(By.CSS_SELECTOR, "#delete-subscription button").click()
    confirm(browser, accept=True)
    wait_url(browser, "/console/subscriptions?topic=jobs&note=deleted")
    assert "deleted subscription audit" in text(browser, "#flash")
    assert "audit" not in [s.name for s in client.list_subscriptions("jobs")]
    assert not browser.find_elements(
        By.CSS_SELECTOR, '#subscriptions tr[data-subscription="audit"]'
    )
    assert errors(browser) == []


def test_a_bad_skip_is_refused_by_the_server_too(
    browser: Any, console_url: str, client: Client, jobs: SubscriptionConsumer
) -> None:
    visit(browser, page_url(console_url, "/subscription", topic="jobs", name="workers"))
    form = browser.find_element(By.ID, "skip-subscription")
    browser.execute_script("arguments[0].noValidate = true", form)  # past the browser's check
    form.find_element(By.NAME, "count").send_keys("-3")
    form.find_element(By.CSS_SELECTOR, "button").click()
    confirm(browser, accept=True)
    wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#flash .error"))
    assert "count must not be negative" in text(browser, "#flash .error")
    assert client.describe_subscription("jobs", "workers").backlog == 7


def test_hostile_subscription_names_are_text(
    browser: Any, console_url: str, client: Client
) -> None:
    client.create_topic("hostile-subs", 1)
    client.create_subscription("hostile-subs", HOSTILE_SUB)
    for path, query in (
        ("/subscriptions", {}),
        ("/subscriptions", {"topic": "hostile-subs"}),
        ("/topic", {"name": "hostile-subs"}),
        ("/subscription", {"topic": "hostile-subs", "name": HOSTILE_SUB}),
        ("/subscriptions", {"topic": "<script>window.pwned='q'</script>"}),
    ):
        visit(browser, page_url(console_url, path, **query))
        assert browser.execute_script("return window.pwned") is None, path
        assert not browser.find_elements(By.CSS_SELECTOR, "main script, main img")
    visit(browser, page_url(console_url, "/subscription", topic="hostile-subs", name=HOSTILE_SUB))
    assert text(browser, "#subscription-name") == HOSTILE_SUB
    assert errors(browser) == []


def test_an_unknown_subscription_is_a_404(browser: Any, console_url: str, client: Client) -> None:
    client.create_topic("no-subs", 1)
    visit(browser, page_url(console_url, "/subscriptions", topic="no-subs"))
    assert browser.find_element(By.ID, "no-subscriptions")
    visit(browser, page_url(console_url, "/subscription", topic="no-subs", name="ghost"))
    assert "ghost" in text(browser, "#error")


def test_the_subscription_pages_fit_a_phone_screen(
    browser: Any, console_url: str, jobs: SubscriptionConsumer, shots: Path
) -> None:
    browser.set_window_size(400, 900)
    try:
        for name, path, query in (
            ("subscriptions", "/subscriptions", {}),
            ("subscription", "/subscription", {"topic": "jobs", "name": "workers"}),
        ):
            visit(browser, page_url(console_url, path, **query))
            width = browser.execute_script(
                "return [document.documentElement.scrollWidth, window.innerWidth]"
            )
            assert width[0] <= width[1], (name, width)
            shot(browser, shots, f"phone-{name}")
            assert errors(browser) == []
    finally:
        browser.set_window_size(1280, 900)


def test_seek_to_an_offset_or_a_time_and_skip_all_over_plain_posts(
    console_url: str, client: Client
) -> None:
    from tests.console.test_http import request

    client.create_topic("moved", 2)
    for p in (0, 1):
        with client.writer("moved", partition=p) as w:
            w.write_many([b"m"] * 5)
    client.create_subscription("moved", "cursor", initial_position="earliest")

    def marks() -> list[int]:
        return [p.mark_delete for p in client.describe_subscription("moved", "cursor").partitions]

    form = {"topic": "moved", "name": "cursor"}
    status, _, _ = request(
        console_url + "/subscription/seek", {**form, "to": "3", "partition": "1"}
    )
    assert status == 303 and marks() == [0, 3]
    status, _, _ = request(console_url + "/subscription/skip", {**form, "count": "all"})
    assert status == 303 and marks() == [5, 5]
    status, _, _ = request(
        console_url + "/subscription/seek", {**form, "to": "time:2000-01-01T00:00"}
    )
    assert status == 303 and marks() == [0, 0]
    for bad, says in (
        ({"to": "sideways"}, "offset must be a whole number"),
        ({"to": "1", "partition": "7"}, "partition"),
        ({"to": "time:yesterday"}, "bad time"),
    ):
        status, _, body = request(console_url + "/subscription/seek", {**form, **bad})
        assert status in (400, 404) and says in body, (bad, body[-300:])
    assert marks() == [0, 0]
    status, _, body = request(console_url + "/subscription/delete", form)  # no confirm
    assert status == 400 and "to confirm deleting it" in body
    assert client.describe_subscription("moved", "cursor").backlog == 10
