"""The operator's view: /metrics moves with traffic, /healthz and /readyz answer."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.cli.conftest import Weir, metrics_url
from tests.conftest import ServerProcess


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def scrape(server: ServerProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    status, text = get(metrics_url(server) + "/metrics")
    assert status == 200
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_counters_move_after_a_write_and_a_read(metrics_server: ServerProcess) -> None:
    weir = Weir(metrics_server.endpoint)
    assert weir("topic", "create", "watched").code == 0
    before = scrape(metrics_server)
    tp = {"topic": "watched", "partition": "0"}
    assert weir("write", "watched", input="a\nbb\nccc\n").code == 0
    assert weir("read", "watched", "--consumer", "dash", "--count", "2").code == 0
    after = scrape(metrics_server)

    assert (
        value(after, "weir_written_messages_total", **tp)
        - value(before, "weir_written_messages_total", **tp)
        == 3
    )
    assert value(after, "weir_written_bytes_total", **tp) > value(
        before, "weir_written_bytes_total", **tp
    )
    assert value(after, "weir_read_bytes_total", **tp) > value(
        before, "weir_read_bytes_total", **tp
    )
    assert value(after, "weir_group_commit_seconds_count") > value(
        before, "weir_group_commit_seconds_count"
    )
    assert value(after, "weir_group_commit_jobs_sum") > value(before, "weir_group_commit_jobs_sum")
    assert value(after, "weir_partition_end_offset", **tp) == 3
    assert value(after, "weir_partition_head_bytes", **tp) > 0
    assert value(after, "weir_consumer_lag_messages", consumer="dash", **tp) == 1
    assert value(after, "weir_consumer_committed_offset", consumer="dash", **tp) == 2
    assert value(after, "weir_ready") == 1
    assert value(after, "weir_storage_used_bytes") > 0


def test_health_and_readiness(metrics_server: ServerProcess) -> None:
    base = metrics_url(metrics_server)
    assert get(base + "/healthz") == (200, "ok\n")
    assert get(base + "/readyz") == (200, "ready\n")
    assert get(base + "/nothing")[0] == 404


def test_not_ready_while_starting_or_stopping() -> None:
    from weir.metrics import MetricsEndpoint, ServerMetrics

    metrics = ServerMetrics()
    endpoint = MetricsEndpoint(metrics, "127.0.0.1:0", alive=lambda: True)
    assert endpoint.respond("GET", "/readyz")[0] == 503
    assert endpoint.respond("GET", "/healthz")[0] == 200
    assert b"weir_ready 0.0" in endpoint.respond("GET", "/metrics")[2]
    metrics.ready = True
    assert endpoint.respond("GET", "/readyz")[0] == 200
    assert endpoint.respond("POST", "/metrics")[0] == 405
