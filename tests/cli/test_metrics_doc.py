"""docs/observability.md lists exactly the series /metrics serves, and each one moves."""

from __future__ import annotations

import re
import subprocess
import sys
import time

from prometheus_client.parser import text_string_to_metric_families

from tests.cli.conftest import Weir, metrics_url
from tests.cli.test_metrics import get
from tests.conftest import ROOT, ServerProcess
from weir.client.sync import Client

DOC = ROOT / "docs" / "observability.md"


def documented() -> dict[str, str]:
    """Series name -> its table row, from the doc's tables."""
    return {
        m.group(1): m.group(0)
        for m in re.finditer(r"^\| `(weir_\w+)` \|.*$", DOC.read_text(), re.M)
    }


def served(server: ServerProcess) -> dict[str, int]:
    """Series name, as the doc writes it (counters with _total) -> how many samples."""
    status, text = get(metrics_url(server) + "/metrics")
    assert status == 200
    out = {}
    for family in text_string_to_metric_families(text):
        name = family.name + ("_total" if family.type == "counter" else "")
        if name.startswith("weir_"):
            out[name] = len(family.samples)
    return out


def test_every_documented_series_is_served_with_samples(metrics_server: ServerProcess) -> None:
    doc = documented()
    for row in doc.values():  # it said weir_consumer_commits_total was not reported
        assert not re.search(r"not report|until it does", row), row
    weir = Weir(metrics_server.endpoint)
    with Client(metrics_server.endpoint) as client:
        client.create_topic("doc-series", 1, consumers=["doc-reader"])
        for _ in range(2):  # the second writer resends seq_no 1: a dedup skip
            with client.writer("doc-series", producer_id="doc-p") as w:
                w.write(b"one", seq_no=1)
        assert weir("read", "doc-series", "--consumer", "doc-reader").code == 0  # commits
        client.create_topic("doc-full", 1, max_partition_messages=1)
        with client.writer("doc-series", producer_id="doc-k") as w:
            w.write(b"v", key=b"k")
        client.compact("doc-series", wait=True)  # weir_compacted_messages
        client.create_topic("doc-live", 1, kind="non-persistent")
        with client.writer("doc-live") as w:  # delivered and dropped series, both 0
            w.write(b"nobody listens")
    # a write past the partition's message limit is refused (overflow), again and again
    writer = subprocess.Popen(
        [sys.executable, "-m", "weir.cli", "write", "doc-full", "--partition", "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=weir.env(),
        cwd=ROOT,
    )
    try:
        assert writer.stdin is not None
        writer.stdin.write(b"a\nb\n")
        writer.stdin.close()
        deadline = time.monotonic() + 60
        while True:
            have = served(metrics_server)
            missing = sorted(n for n in doc if not have.get(n))
            if not missing:
                break
            assert time.monotonic() < deadline, f"documented, served without samples: {missing}"
            time.sleep(0.2)
    finally:
        writer.kill()
        writer.wait(30)
    undocumented = sorted(set(have) - set(doc))
    assert not undocumented, f"served, missing from docs/observability.md: {undocumented}"
