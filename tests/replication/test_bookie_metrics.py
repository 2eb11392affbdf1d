"""A bookie's metrics endpoint (``--metrics-listen``): counters of adds, reads and journal
commits, gauges of its ledgers and read-only state, scraped over HTTP as Prometheus does."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from weir.replication.errors import (
    BookieReadOnlyError,
    LedgerFencedError,
    NoSuchEntryError,
)
from weir.replication.ledger.bookie_client import BookieClient
from weir.replication.local_cluster import BookieProcess
from weir.replication.zkserver import ZooKeeperServer

_METRICS = re.compile(r"bookie metrics listening on (\S+):(\d+)")

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def scrape(base: str) -> Samples:
    status, text = get(f"{base}/metrics")
    assert status == 200, text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def served_series(base: str) -> set[str]:
    """weir_bookie_* series names as the doc writes them (counters with _total; without
    prometheus_client's ``*_created`` timestamps)."""
    _, text = get(f"{base}/metrics")
    return {
        f.name + ("_total" if f.type == "counter" else "")
        for f in text_string_to_metric_families(text)
        if f.name.startswith("weir_bookie_") and not f.name.endswith("_created")
    }


def documented_series() -> set[str]:
    """The series docs/replication.md's table of bookie metrics names."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "replication.md").read_text()
    rows = re.findall(r"^\| `weir_bookie_.*$", doc, re.M)
    return {name for row in rows for name in re.findall(r"`(weir_bookie_\w+)", row)}


def metrics_url(bookie: BookieProcess) -> str:
    found = [m for line in bookie.log if (m := _METRICS.search(line))]
    assert found, "".join(bookie.log)
    return f"http://{found[0].group(1)}:{found[0].group(2)}"


async def test_bookie_metrics_count_adds_reads_commits_and_read_only(
    zookeeper: ZooKeeperServer, zk_root: str, tmp_path: Path
) -> None:
    bookie = BookieProcess(
        tmp_path / "bookie",
        zookeeper.hosts,
        zk_root,
        "--metrics-listen",
        "127.0.0.1:0",
        "--max-data-bytes",
        str(1 << 20),
    ).start()
    bc = BookieClient(bookie.address)
    try:
        base = metrics_url(bookie)
        assert get(f"{base}/healthz") == (200, "ok\n")
        assert get(f"{base}/readyz") == (200, "ready\n")
        assert get(f"{base}/nothing")[0] == 404
        m = scrape(base)
        assert m[("weir_bookie_ledgers", ())] == 0
        assert m[("weir_bookie_read_only", ())] == 0
        assert m.get(("weir_bookie_journal_commits_total", ()), 0) == 0

        for entry in range(10):
            await bc.add(7, entry, entry - 1, b"x" * 1000)
        assert (await bc.read(7, 3)).payload == b"x" * 1000
        with pytest.raises(NoSuchEntryError):
            await bc.read(7, 99)
        await bc.read_lac(8, fence=True)  # a recoverer fences ledger 8: the old writer is out
        with pytest.raises(LedgerFencedError):
            await bc.add(8, 0, -1, b"late")
        m = scrape(base)
        assert m[("weir_bookie_adds_total", (("result", "ok"),))] == 10
        assert m[("weir_bookie_adds_total", (("result", "fenced"),))] == 1
        assert m[("weir_bookie_add_bytes_total", ())] == 10_000
        assert m[("weir_bookie_reads_total", (("result", "ok"),))] == 1
        assert m[("weir_bookie_reads_total", (("result", "no_entry"),))] == 1
        commits = m[("weir_bookie_journal_commits_total", ())]
        assert 1 <= commits <= 11  # 10 adds sent one by one and the fence, or fewer groups
        assert m[("weir_bookie_journal_commit_seconds_count", ())] == commits
        assert m[("weir_bookie_journal_commit_seconds_sum", ())] > 0
        assert m[("weir_bookie_ledgers", ())] == 2
        assert m[("weir_bookie_read_only", ())] == 0

        refused = 0
        for entry in range(10, 100):  # 64 KiB each: past 1 MiB the bookie turns read-only
            try:
                await bc.add(7, entry, entry - 1, b"y" * (64 << 10))
            except BookieReadOnlyError:
                refused += 1
                break
        assert refused == 1
        m = scrape(base)
        assert m[("weir_bookie_read_only", ())] == 1
        assert m[("weir_bookie_adds_total", (("result", "read_only"),))] == 1
        assert m[("weir_bookie_adds_total", (("result", "ok"),))] > 10
        assert served_series(base) == documented_series()
    finally:
        await bc.close()
        bookie.stop()
