"""The web console in a real headless Chromium: what an operator sees and does.

Every page is loaded in the browser with the server's own scripts running, its console
log is read for errors, and what the page says is checked against the SDK and the CLI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from tests.cli.conftest import Weir
from tests.conftest import ServerProcess
from weir.client import Client
from weir.errors import UnknownTopicError

WAIT_S = 20


def wait(driver: Any) -> WebDriverWait[Any]:
    """Waits that look again when a live refresh replaced the element being read."""
    return WebDriverWait(driver, WAIT_S, ignored_exceptions=(StaleElementReferenceException,))


def errors(driver: Any) -> list[str]:
    """Console errors (and CSP refusals, which Chromium logs as errors) since the last call."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def visit(driver: Any, url: str) -> None:
    errors(driver)  # forget what earlier pages logged
    driver.get(url)
    wait(driver).until(lambda d: d.execute_script("return document.readyState") == "complete")


def text(driver: Any, css: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def wait_url(driver: Any, part: str) -> None:
    wait(driver).until(ec.url_contains(part))


def confirm(driver: Any, accept: bool) -> str:
    """Answer the confirmation dialog the last click opened; returns its question."""
    alert = wait(driver).until(ec.alert_is_present())
    question = str(alert.text)
    if accept:
        alert.accept()
    else:
        alert.dismiss()
    return question


def shot(driver: Any, shots: Path, name: str) -> None:
    driver.save_screenshot(str(shots / f"{name}.png"))


def page_url(base: str, path: str, **query: object) -> str:
    return base + path + ("?" + urlencode(query) if query else "")


def test_every_page_loads_without_console_errors(
    browser: Any, console_url: str, client: Client, shots: Path
) -> None:
    client.create_topic("orders", 3, consumers=["billing"], exist_ok=True)
    with client.writer("orders", producer_id="shop-1") as w:
        for i in range(30):
            w.write(f'{{"order": {i}, "total": {i * 10}}}', key=f"customer-{i % 4}")
    client.commit_offset("orders", 0, "billing", 2)

    visit(browser, console_url)
    assert text(browser, "h1") == "Overview"
    # the charts draw from /console/rates (uPlot makes one .uplot per chart)
    wait(browser).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".uplot")) == 4)
    assert text(browser, "#version")
    assert errors(browser) == []
    shot(browser, shots, "overview")

    visit(browser, console_url + "/topics")
    rows = browser.find_elements(By.CSS_SELECTOR, "#topics tbody tr")
    assert any("orders" in r.text and "30" in r.text for r in rows)
    assert errors(browser) == []
    shot(browser, shots, "topics")

    visit(browser, page_url(console_url, "/topic", name="orders"))
    assert text(browser, "#topic-name") == "orders"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")) == 3
    assert "shop-1" in text(browser, "#producers")
    assert errors(browser) == []
    shot(browser, shots, "topic")

    visit(browser, page_url(console_url, "/messages", topic="orders", partition=0))
    assert browser.find_elements(By.CSS_SELECTOR, "#messages tbody tr")
    assert browser.find_elements(By.CSS_SELECTOR, "#messages pre.json")
    assert errors(browser) == []
    shot(browser, shots, "messages")

    visit(browser, console_url + "/consumers")
    assert browser.find_element(By.CSS_SELECTOR, '#all-consumers tr[data-consumer="billing"]')
    assert errors(browser) == []
    shot(browser, shots, "consumers")


def test_a_topic_created_in_the_console_exists_for_the_sdk(
    browser: Any, console_url: str, client: Client
) -> None:
    visit(browser, console_url + "/topics")
    form = browser.find_element(By.ID, "create-topic")
    form.find_element(By.NAME, "name").send_keys("made-in-browser")
    partitions = form.find_element(By.NAME, "partitions")
    partitions.clear()
    partitions.send_keys("3")
    form.find_element(By.NAME, "retention_hours").send_keys("2")
    form.find_element(By.NAME, "consumers").send_keys("audit")
    form.find_element(By.CSS_SELECTOR, "button").click()
    wait_url(browser, "/console/topic?name=made-in-browser")
    assert "created topic made-in-browser" in text(browser, "#flash")

    info = client.describe_topic("made-in-browser")
    assert info.partitions == 3
    assert info.retention_ms == 2 * 3_600_000
    assert [c.name for c in info.consumers] == ["audit"]
    assert errors(browser) == []


def test_a_bad_form_shows_the_servers_error_and_changes_nothing(
    browser: Any, console_url: str, client: Client
) -> None:
    visit(browser, console_url + "/topics")
    form = browser.find_element(By.ID, "create-topic")
    # the browser checks the name's pattern first; a script can skip that, the server cannot
    browser.execute_script("arguments[0].noValidate = true", form)
    form.find_element(By.NAME, "name").send_keys("bad name<b>")
    form.find_element(By.CSS_SELECTOR, "button").click()
    wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#flash .error"))
    assert "bad topic name 'bad name<b>'" in text(browser, "#flash .error")
    assert "/console/topics" in browser.current_url
    assert all(t.name != "bad name<b>" for t in client.list_topics())


def test_messages_written_with_the_sdk_appear_with_their_headers(
    browser: Any, console_url: str, client: Client
) -> None:
    client.create_topic("browsed", 1)
    with client.writer("browsed", producer_id="sensor-7") as w:
        w.write("plain text value", key="k1", headers={"trace-id": "abc123", "kind": "reading"})
        w.write(b"\x00\x01\xfe\xff binary", key="k2")
        w.write('{"a": [1, 2], "b": "x"}', key="k3")
        w.write("x" * 10_000, key="k4")

    visit(browser, page_url(console_url, "/messages", topic="browsed", partition=0, offset=0))
    rows = {
        int(r.get_attribute("data-offset")): r
        for r in browser.find_elements(By.CSS_SELECTOR, "#messages tbody tr")
    }
    assert sorted(rows) == [0, 1, 2, 3]
    first = rows[0]
    assert first.find_element(By.CSS_SELECTOR, ".headers").text.split() == [
        "kind",
        "reading",
        "trace-id",
        "abc123",
    ]
    assert first.find_element(By.CSS_SELECTOR, ".value pre").text == "plain text value"
    assert "sensor-7 / 1" in first.find_element(By.CSS_SELECTOR, ".producer").text
    assert rows[1].find_element(By.CSS_SELECTOR, ".value pre.hex").text.startswith("00 01 fe ff")
    assert rows[2].find_element(By.CSS_SELECTOR, ".value pre.json").text == (
        '{\n  "a": [\n    1,\n    2\n  ],\n  "b": "x"\n}'
    )
    big = rows[3].find_element(By.CSS_SELECTOR, ".value")
    assert "first 4096 of 10000 bytes shown" in big.text
    assert errors(browser) == []


def test_paging_forward_and_back(browser: Any, console_url: str, client: Client) -> None:
    client.create_topic("paged", 1)
    with client.writer("paged") as w:
        w.write_many([f"m{i}" for i in range(45)])
    visit(
        browser, page_url(console_url, "/messages", topic="paged", partition=0, offset=0, limit=20)
    )

    def offsets() -> list[int]:
        return [
            int(r.get_attribute("data-offset"))
            for r in browser.find_elements(By.CSS_SELECTOR, "#messages tbody tr")
        ]

    assert offsets() == list(range(20))
    assert not browser.find_elements(By.ID, "prev")
    browser.find_element(By.ID, "next").click()
    wait(browser).until(lambda d: offsets()[:1] == [20])
    browser.find_element(By.ID, "next").click()
    wait(browser).until(lambda d: offsets() == list(range(40, 45)))
    assert not browser.find_elements(By.ID, "next")
    browser.find_element(By.ID, "prev").click()
    wait(browser).until(lambda d: offsets() == list(range(20, 40)))


def test_a_test_message_written_in_the_console_is_read_by_the_sdk(
    browser: Any, console_url: str, client: Client
) -> None:
    client.create_topic("hand-written", 2)
    visit(browser, page_url(console_url, "/messages", topic="hand-written", partition=1))
    assert browser.find_element(By.ID, "no-messages")
    form = browser.find_element(By.ID, "write-message")
    form.find_element(By.NAME, "key").send_keys("by-hand")
    form.find_element(By.NAME, "headers").send_keys("source=console\nticket=OPS-1")
    form.find_element(By.NAME, "value").send_keys("hello from the browser")
    form.find_element(By.CSS_SELECTOR, "button").click()
    wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, '#messages tr[data-offset="0"]'))

    (msg,) = [m for c in client.read_range("hand-written", 1, 0, 1) for m in c.messages()]
    assert (msg.data, msg.key) == (b"hello from the browser", b"by-hand")
    assert msg.headers == {"source": "console", "ticket": "OPS-1"}


def test_lag_shown_equals_weir_consumer_describe(
    browser: Any, console_url: str, client: Client, console_server: ServerProcess
) -> None:
    client.create_topic("lagging", 2, consumers=["slow", "fast"])
    for p, n in ((0, 7), (1, 5)):
        with client.writer("lagging", partition=p) as w:
            w.write_many([b"x"] * n)
    client.commit_offset("lagging", 0, "slow", 3)
    client.commit_offset("lagging", 0, "fast", 7)
    client.commit_offset("lagging", 1, "fast", 4)

    weir = Weir(console_server.endpoint)
    expected = {
        c: weir("consumer", "describe", "lagging", c, "--json").json()["lag"]
        for c in ("slow", "fast")
    }
    assert expected == {"slow": 9, "fast": 1}

    visit(browser, console_url + "/consumers")
    for consumer, lag in expected.items():
        row = browser.find_element(
            By.CSS_SELECTOR, f'#all-consumers tr[data-topic="lagging"][data-consumer="{consumer}"]'
        )
        assert int(row.find_element(By.CSS_SELECTOR, ".lag").text) == lag
    shown = [
        int(r.find_element(By.CSS_SELECTOR, ".lag").text)
        for r in browser.find_elements(By.CSS_SELECTOR, "#all-consumers tbody tr")
    ]
    assert shown == sorted(shown, reverse=True)  # most behind first

    visit(browser, page_url(console_url, "/topic", name="lagging"))
    for consumer, lag in expected.items():
        row = browser.find_element(By.CSS_SELECTOR, f'#consumers tr[data-consumer="{consumer}"]')
        assert int(row.find_element(By.CSS_SELECTOR, ".lag").text) == lag


def test_seek_asks_first_then_moves_the_consumer(
    browser: Any, console_url: str, client: Client
) -> None:
    client.create_topic("rewound", 1, consumers=["replayer"])
    with client.writer("rewound") as w:
        w.write_many([b"x"] * 6)
    client.commit_offset("rewound", 0, "replayer", 6)
    visit(browser, console_url + "/consumers")

    def seek_form() -> Any:
        return browser.find_element(
            By.CSS_SELECTOR, '#all-consumers tr[data-topic="rewound"] form.seek'
        )

    seek_form().find_element(By.NAME, "to").send_keys("start")
    seek_form().find_element(By.CSS_SELECTOR, "button").click()
    assert "Move consumer replayer of rewound?" in confirm(browser, accept=False)
    assert client.describe_consumer("rewound", "replayer").lag == 0  # not moved

    seek_form().find_element(By.CSS_SELECTOR, "button").click()
    confirm(browser, accept=True)
    wait_url(browser, "note=moved")
    assert client.describe_consumer("rewound", "replayer").lag == 6
    row = browser.find_element(By.CSS_SELECTOR, '#all-consumers tr[data-topic="rewound"]')
    assert row.find_element(By.CSS_SELECTOR, ".lag").text == "6"


def test_delete_asks_for_confirmation_then_removes(
    browser: Any, console_url: str, client: Client
) -> None:
    client.create_topic("doomed", 1)
    visit(browser, page_url(console_url, "/topic", name="doomed"))
    browser.find_element(By.CSS_SELECTOR, "#delete-topic button").click()
    assert "Delete topic doomed" in confirm(browser, accept=False)
    assert client.describe_topic("doomed").partitions == 1  # still there

    browser.find_element(By.CSS_SELECTOR, "#delete-topic button").click()
    confirm(browser, accept=True)
    wait_url(browser, "/console/topics?note=deleted")
    assert "deleted topic doomed" in text(browser, "#flash")
    with pytest.raises(UnknownTopicError):
        client.describe_topic("doomed")

    visit(browser, page_url(console_url, "/topic", name="doomed"))  # an old link
    assert "topic 'doomed' does not exist" in text(browser, "#error")


HOSTILE = {
    "key": "<script>window.pwned = 'key'</script>",
    "value": "<img src=x onerror=\"window.pwned='value'\"><svg onload=\"window.pwned='svg'\">",
    "header": "<img src=y onerror=\"window.pwned='header'\">",
    "producer": "<script>window.pwned='producer'</script>",
}


def test_hostile_content_is_shown_as_text_never_run(
    browser: Any, console_url: str, client: Client
) -> None:
    client.create_topic("hostile", 1, consumers=["victim"])
    with client.writer("hostile", producer_id=HOSTILE["producer"]) as w:
        w.write(HOSTILE["value"], key=HOSTILE["key"], headers={"<b>h</b>": HOSTILE["header"]})
    client.commit_offset("hostile", 0, "victim", 0)

    for path, query in (
        ("/messages", {"topic": "hostile", "partition": 0, "offset": 0}),
        ("/topic", {"name": "hostile"}),
        ("/consumers", {}),
        ("/topics", {"q": "<script>window.pwned='search'</script>"}),
        ("/topic", {"name": "<script>window.pwned='name'</script>"}),
    ):
        visit(browser, page_url(console_url, path, **query))
        assert browser.execute_script("return window.pwned") is None, path
        assert not browser.find_elements(
            By.CSS_SELECTOR, "main script, main img, main svg:not(.spark)"
        )

    visit(browser, page_url(console_url, "/messages", topic="hostile", partition=0, offset=0))
    row = browser.find_element(By.CSS_SELECTOR, '#messages tr[data-offset="0"]')
    assert row.find_element(By.CSS_SELECTOR, ".key pre").text == HOSTILE["key"]
    assert row.find_element(By.CSS_SELECTOR, ".value pre").text == HOSTILE["value"]
    assert HOSTILE["header"] in row.find_element(By.CSS_SELECTOR, ".headers").text
    assert "<b>h</b>" in row.find_element(By.CSS_SELECTOR, ".headers").text
    assert HOSTILE["producer"] in row.find_element(By.CSS_SELECTOR, ".producer").text
    # a test message written through the console is no different
    form = browser.find_element(By.ID, "write-message")
    form.find_element(By.NAME, "value").send_keys("<script>window.pwned='form'</script>")
    form.find_element(By.CSS_SELECTOR, "button").click()
    wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, '#messages tr[data-offset="1"]'))
    assert browser.execute_script("return window.pwned") is None
    assert errors(browser) == []


def test_live_numbers_move_without_a_reload(browser: Any, console_url: str, client: Client) -> None:
    client.create_topic("live", 1, consumers=["watcher"])
    visit(browser, page_url(console_url, "/topic", name="live"))
    browser.execute_script("window.sameDocument = true")

    def end_offset() -> str:
        return text(browser, "#partitions tbody tr td:nth-child(3)")

    assert end_offset() == "0"
    with client.writer("live") as w:
        w.write_many([b"a", b"b", b"c"])
    wait(browser).until(lambda d: end_offset() == "3")  # the 5 s refresh
    lag = browser.find_element(By.CSS_SELECTOR, '#consumers tr[data-consumer="watcher"] .lag')
    assert lag.text == "3"
    assert browser.execute_script("return window.sameDocument") is True  # no reload
    # the lag chart draws from the server's samples of the consumer's lag
    wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#lag-chart .uplot"))
    assert errors(browser) == []

    visit(browser, console_url + "/topics")  # a write-rate sparkline once sampled
    wait(browser).until(
        lambda d: d.find_elements(By.XPATH, "//tr[td/a='live']//*[local-name()='polyline']")
    )
    assert errors(browser) == []


def test_a_move_being_typed_survives_the_live_refresh(
    browser: Any, console_url: str, client: Client
) -> None:
    client.create_topic("typing", 1, consumers=["typist"])
    visit(browser, console_url + "/consumers")
    row = '#all-consumers tr[data-topic="typing"]'
    browser.find_element(By.CSS_SELECTOR, row + " input[name=to]").send_keys("end")
    with client.writer("typing") as w:
        w.write_many([b"x"] * 4)
    wait(browser).until(lambda d: d.find_element(By.CSS_SELECTOR, row + " .lag").text == "4")
    assert (
        browser.find_element(By.CSS_SELECTOR, row + " input[name=to]").get_attribute("value")
        == "end"
    )


def test_a_topic_deleted_meanwhile_says_so(browser: Any, console_url: str, client: Client) -> None:
    client.create_topic("vanishing", 1)
    visit(browser, page_url(console_url, "/topic", name="vanishing"))
    assert text(browser, "#status") == ""
    client.drop_topic("vanishing")
    wait(browser).until(lambda d: "deleted meanwhile" in text(d, "#status"))


def test_every_page_fits_a_phone_screen(
    browser: Any, console_url: str, client: Client, shots: Path
) -> None:
    client.create_topic("narrow", 2, consumers=["pocket"], exist_ok=True)
    with client.writer("narrow", partition=0) as w:
        w.write('{"wide": "' + "w" * 300 + '"}', key="k" * 100, headers={"h": "v" * 200})
    browser.set_window_size(400, 900)
    try:
        for name, path, query in (
            ("overview", "", {}),
            ("topics", "/topics", {}),
            ("topic", "/topic", {"name": "narrow"}),
            ("messages", "/messages", {"topic": "narrow", "partition": 0, "offset": 0}),
            ("consumers", "/consumers", {}),
        ):
            visit(browser, page_url(console_url, path, **query))
            width = browser.execute_script(
                "return [document.documentElement.scrollWidth, window.innerWidth]"
            )
            assert width[0] <= width[1], (name, width)  # wide tables scroll inside
            shot(browser, shots, f"phone-{name}")
            assert errors(browser) == []
    finally:
        browser.set_window_size(1280, 900)


def test_a_server_gone_away_is_said_on_the_open_page(browser: Any, tmp_path: Path) -> None:
    from tests.cli.conftest import metrics_url

    srv = ServerProcess(tmp_path, "--metrics-listen", "127.0.0.1:0").start()
    try:
        visit(browser, metrics_url(srv) + "/console")
        assert text(browser, "#status") == ""
        srv.stop()
        wait(browser).until(lambda d: "unreachable" in text(d, "#status"))
    finally:
        srv.stop()
