"""The console over plain HTTP, and its parts on their own: what a browser cannot show
directly (headers, refused posts, the switch that turns it off) and the value rendering."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.cli.conftest import metrics_url
from tests.conftest import ServerProcess
from weir.client import Client
from weir.console.history import RateHistory, Totals
from weir.console.views import parse_headers, parse_time, show_bytes, sparkline
from weir.errors import BadRequestError


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


OPENER = urllib.request.build_opener(NoRedirect)


def request(
    url: str, form: dict[str, str] | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], str]:
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    req = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with OPENER.open(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read().decode()


def test_pages_carry_a_script_policy_and_escape_values(console_url: str, client: Client) -> None:
    client.create_topic("escaped", 1)
    with client.writer("escaped") as w:
        w.write("<script>alert(1)</script>", key="<b>k</b>", headers={"h": "<i>v</i>"})
    status, headers, body = request(console_url + "/messages?topic=escaped&partition=0")
    assert status == 200
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "&lt;b&gt;k&lt;/b&gt;" in body and "&lt;i&gt;v&lt;/i&gt;" in body
    assert "<script>alert" not in body and "<b>k</b>" not in body


def test_a_form_post_from_another_site_is_refused(console_url: str, client: Client) -> None:
    client.create_topic("guarded", 1)
    form = {"name": "guarded", "confirm": "guarded"}
    for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        status, _, body = request(console_url + "/topic/delete", form, headers)
        assert (status, body) == (403, "cross-site form posts are refused\n")
    assert client.describe_topic("guarded").partitions == 1


def test_plain_posts_redirect_and_errors_name_the_problem(console_url: str, client: Client) -> None:
    status, headers, _ = request(
        console_url + "/topics/create", {"name": "plain-post", "partitions": "2"}
    )
    assert status == 303
    assert headers["Location"].startswith("/console/topic?name=plain-post")
    assert client.describe_topic("plain-post").partitions == 2

    status, _, body = request(console_url + "/topics/create", {"name": "x", "partitions": "two"})
    assert status == 400
    assert "partitions must be a whole number, got &#39;two&#39;" in body

    # delete needs the name repeated (the page's form sends it after the dialog)
    status, _, body = request(console_url + "/topic/delete", {"name": "plain-post"})
    assert status == 400 and "to confirm deleting it" in body
    assert client.describe_topic("plain-post").partitions == 2

    status, _, body = request(
        console_url + "/topic/alter", {"name": "plain-post", "partitions": "1"}
    )
    assert status == 400 and "partitions can be added, never removed" in body

    # an htmx post gets the next page's address, or the error as a fragment
    status, headers, _ = request(
        console_url + "/topic/alter",
        {"name": "plain-post", "partitions": "3", "retention_hours": "0"},
        {"HX-Request": "true"},
    )
    assert status == 200 and headers["HX-Redirect"].startswith("/console/topic?name=plain-post")
    info = client.describe_topic("plain-post")
    assert (info.partitions, info.retention_ms) == (3, None)
    status, _, body = request(
        console_url + "/consumers/seek",
        {"topic": "plain-post", "consumer": "nobody", "to": "start"},
        {"HX-Request": "true"},
    )
    assert status == 200
    assert body.strip() == (
        '<p class="error" id="error">consumer &#39;nobody&#39; is not registered on '
        "&#39;plain-post&#39;</p>"
    )


def test_rates_are_columns_for_the_charts(console_url: str) -> None:
    status, headers, body = request(console_url + "/rates")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    cols = json.loads(body)
    assert set(cols) == {
        "at",
        "messages_in",
        "bytes_in",
        "bytes_out",
        "reads_out",
        "commits",
        "commit_ms",
    }
    assert len({len(v) for v in cols.values()}) == 1


def test_the_console_can_be_turned_off(tmp_path: Path) -> None:
    srv = ServerProcess(
        tmp_path, "--metrics-listen", "127.0.0.1:0", env={"WEIR_CONSOLE_ENABLED": "false"}
    )
    srv.start()
    try:
        base = metrics_url(srv)
        assert request(base + "/console")[0] == 404
        assert request(base + "/metrics")[0] == 200
        assert not any("weir console on" in line for line in srv.log)
        assert request(base + "/")[2] == "weir: /metrics /healthz /readyz /admin/v2\n"
    finally:
        srv.stop()


def test_values_are_shown_as_text_json_or_hex() -> None:
    assert show_bytes(b"").kind == "empty"
    assert (show_bytes(b"hello").kind, show_bytes(b"hello").text) == ("text", "hello")
    assert show_bytes(b'{"a":1}').text == '{\n  "a": 1\n}'
    assert show_bytes(b"{not json").kind == "text"
    assert show_bytes("ünïcode".encode()).text == "ünïcode"
    binary = show_bytes(b"\x00\xff\x10")
    assert (binary.kind, binary.text) == ("hex", "00 ff 10")
    assert show_bytes(b"a\x01b").kind == "hex"  # control characters: not text
    big = show_bytes(b"y" * 5000, limit=100)
    assert (big.kind, len(big.text), big.size, big.cut) == ("text", 100, 5000, True)
    split = show_bytes("ééé".encode(), limit=5)  # the cut falls inside the third é
    assert (split.kind, split.text, split.cut) == ("text", "éé", True)
    cut_binary = show_bytes(b"\xff" * 300, limit=4)
    assert (cut_binary.text, cut_binary.cut) == ("ff ff ff ff", True)


def test_forms_parse_times_and_headers() -> None:
    assert parse_time("1970-01-01T00:01") == 60_000
    assert parse_time("2026-11-24T10:00:00Z") == 1_795_514_400_000
    assert parse_time("1795514400000") == 1_795_514_400_000
    assert parse_headers("a=1\n\nb = x=y\n") == {"a": "1", "b": " x=y"}
    with pytest.raises(BadRequestError, match="header line 2: expected name=value"):
        parse_headers("a=1\nnot a header")
    with pytest.raises(BadRequestError, match="bad time"):
        parse_time("yesterday")


def test_rate_history_keeps_one_hour_of_differences() -> None:
    now = [1000.0]
    totals = [Totals(0, 0, 0, 0, 0, 0)]
    history = RateHistory(lambda: totals[0], interval=5, span=15, clock=lambda: now[0])
    assert history.sample() is None  # the first sample only sets the baseline
    for step in range(1, 6):
        now[0] += 5
        totals[0] = Totals(10 * step, 1000 * step, 500 * step, step, 2 * step, 0.01 * step)
        rates = history.sample()
        assert rates is not None
        assert (rates.messages_in, rates.bytes_in, rates.bytes_out) == (2.0, 200.0, 100.0)
        assert rates.commit_ms == pytest.approx(5.0)  # 10 ms over 2 commits
    series = history.series()
    assert series["at"] == [1015.0, 1020.0, 1025.0]  # span / interval samples kept
    assert series["commits"] == [0.4, 0.4, 0.4]


async def test_topic_rates_and_consumer_lags_are_followed_while_they_exist() -> None:
    now = [0.0]
    written = [{("a", "0"): 0.0}]
    lags = [{("a", "c1"): 5}]

    async def current_lags() -> dict[tuple[str, str], int]:
        return lags[0]

    history = RateHistory(
        lambda: Totals(0, 0, 0, 0, 0, 0),
        interval=5,
        span=20,
        clock=lambda: now[0],
        partitions=lambda: written[0],
        lags=current_lags,
    )
    history.sample()
    for step, (topics, lag) in enumerate(
        [
            ({("a", "0"): 20.0, ("a", "1"): 30.0}, {("a", "c1"): 7}),
            (
                {("a", "0"): 30.0, ("a", "1"): 30.0, ("b", "0"): 5.0},
                {("a", "c1"): 2, ("a", "c2"): 1},
            ),
            ({("b", "0"): 10.0}, {("b", "c3"): 0}),  # topic a dropped
        ],
        1,
    ):
        now[0] = 5.0 * step
        written[0], lags[0] = topics, lag
        assert history.sample() is not None
        await history.sample_lags()
        if step == 2:
            assert list(history.topic_rates["a"]) == [10.0, 2.0]
            assert history.partition_rates == {("a", "0"): 2.0, ("a", "1"): 0.0, ("b", "0"): 1.0}
            assert history.lag_series("a") == {
                "at": [5.0, 10.0],
                "c1": [7.0, 2.0],
                "c2": [None, 1.0],
            }
    assert set(history.topic_rates) == {"b"}
    assert list(history.topic_rates["b"]) == [1.0, 1.0]  # from nothing to 5, then 10
    assert history.lag_series("a") == {"at": []}


def test_sparkline_points_span_the_box() -> None:
    assert sparkline([]).points == ""
    line = sparkline([0.0, 2.0, 1.0])
    assert line.points == "0.0,23.0 60.0,1.0 120.0,12.0"
    assert (line.last, line.peak) == (1.0, 2.0)
    assert sparkline([0.0, 0.0]).points == "0.0,23.0 120.0,23.0"


def test_a_loopback_console_answers_only_to_loopback_names(console_url: str) -> None:
    """A site whose name resolves to 127.0.0.1 (DNS rebinding) gets nothing."""
    port = urllib.parse.urlsplit(console_url).port
    status, _, body = request(console_url + "/topics", headers={"Host": f"evil.example:{port}"})
    assert status == 403 and "answers only to loopback names" in body
    for host in (f"localhost:{port}", f"127.0.0.1:{port}"):
        assert request(console_url + "/topics", headers={"Host": host})[0] == 200
    metrics = console_url.removesuffix("/console") + "/metrics"
    assert request(metrics, headers={"Host": f"evil.example:{port}"})[0] == 200  # not console


def test_what_does_not_exist_is_a_404_and_bad_input_a_400(console_url: str, client: Client) -> None:
    client.create_topic("one-partition", 1)
    assert request(console_url + "/topic?name=no-such-topic")[0] == 404
    status, _, body = request(console_url + "/messages?topic=one-partition&partition=5")
    assert status == 404 and "has partitions 0..0, not 5" in body
    status, _, body = request(console_url + "/messages?topic=one-partition&offset=-3")
    assert status == 400 and "offset must not be negative" in body
    status, _, body = request(console_url + "/messages?topic=one-partition&time=soon")
    assert status == 400 and "bad time" in body
    assert request(console_url + "/topic")[0] == 400  # no name


def test_a_partitions_write_rate_shows_after_the_next_sample(
    console_url: str, client: Client
) -> None:
    client.create_topic("rated", 2)
    with client.writer("rated", partition=1) as w:
        w.write_many([b"r"] * 50)
    rate = re.compile(r'<td class="num rate">([0-9.]+)</td>')
    deadline = time.monotonic() + 30  # a sample every 5 s; each rate holds for 5 s
    seen: list[str] = []
    while time.monotonic() < deadline:
        seen = rate.findall(request(console_url + "/topic?name=rated")[2])
        if seen[1] != "0.0":
            break
        time.sleep(0.25)  # polling the page; the condition above ends the wait
    assert seen[0] == "0.0" and float(seen[1]) > 0, seen
