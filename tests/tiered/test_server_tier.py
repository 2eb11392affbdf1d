"""Tiered storage through a real server, on both back ends: `offload` moves sealed blobs
to the object store, local bytes drop, and every reader (the SDK's range reads and
consumer reader, the ydb SDK, a Pulsar consumer) reads the same messages as before, also
after a restart; the offload policy drives the background task; retention deletes the
objects; the CLI's offload and offload-status work."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import weir
from tests.conftest import ROOT, ServerProcess


def produce(client: weir.Client, topic: str, n: int, partitions: int = 2) -> None:
    """``n`` messages of about 1 KB, flushed every 100 (so the partitions get several blobs)."""
    client.create_topic(topic, partitions=partitions)
    with client.writer(topic, producer_id=f"{topic}-w") as w:
        for i in range(n):
            if i and i % 100 == 0:
                w.flush()
            w.write(
                b"m%06d:" % i + bytes([i % 251]) * 900,
                key=f"k{i % 7}",
                headers={"i": str(i)} if i % 3 == 0 else None,
            )


def ranges(client: weir.Client, topic: str, partitions: int) -> list[bytes]:
    out = []
    for p in range(partitions):
        out.append(
            b"".join(bytes(c) for chunk in client.read_range(topic, p, 0) for c in chunk.chunks)
        )
    return out


def consume(
    client: weir.Client, topic: str, n: int
) -> dict[tuple[int, int], tuple[bytes, str, dict[str, str]]]:
    got: dict[tuple[int, int], tuple[bytes, str, dict[str, str]]] = {}
    reader = client.reader(topic, consumer=f"c-{uuid.uuid4().hex[:6]}")
    try:
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            batch = reader.receive_batch(timeout=2)
            if batch is None:
                continue
            for m in batch:
                got[(m.partition, m.offset)] = (m.data, m.key, dict(m.headers))
    finally:
        reader.close()
    return got


def test_offload_then_every_reader_reads_the_same(tier_server: ServerProcess) -> None:
    topic = f"tiered-{uuid.uuid4().hex[:6]}"
    n = 1500
    with weir.Client(tier_server.endpoint) as client:
        produce(client, topic, n)
        before = ranges(client, topic, 2)
        msgs_before = consume(client, topic, n)
        assert len(msgs_before) == n
        copied = client.offload_topic(topic, force=True)
        assert len(copied) == 2 and sum(copied) >= 4
        st = client.tier_status(topic)
        for p in st.partitions:
            assert p.segments and p.first_local_offset > p.start_offset
            assert p.remote_bytes > p.local_bytes
        assert st.store["backend"] in ("local", "s3")
        assert ranges(client, topic, 2) == before
        assert consume(client, topic, n) == msgs_before
    metrics = scrape(tier_server)
    assert metrics["weir_tier_offloaded_objects_total"] >= 4
    assert metrics["weir_tier_fetches_total"] >= 4
    assert metrics["weir_tier_store_errors_total"] == 0
    tier_server.restart()
    with weir.Client(tier_server.endpoint) as client:
        assert ranges(client, topic, 2) == before
        assert client.tier_status(topic).partitions[0].segments
    # the ydb SDK reads the offloaded offsets too
    import ydb

    from tests.ydb.conftest import connect, path, receive

    driver = connect(tier_server)
    try:
        reader = driver.topic_client.reader(path(topic), consumer="ydb-tier")
        try:
            got = receive(reader, n, timeout=60)
        finally:
            reader.close()
    finally:
        driver.stop(timeout=5)
    assert len(got) == n
    assert sorted(m.data for m in got) == sorted(v[0] for v in msgs_before.values())
    _ = ydb


def test_kafka_reads_offloaded_offsets_and_deletes_records_inside_them(
    tier_server: ServerProcess,
) -> None:
    """The Kafka front's fetch reads offloaded blobs (through the actor's read_async); a
    DeleteRecords into the middle of an offloaded blob hides the records below it from
    Kafka and native readers alike, and the rest still comes back byte for byte."""
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    topic = f"ktier-{uuid.uuid4().hex[:6]}"
    n = 500
    with weir.Client(tier_server.endpoint) as client:
        produce(client, topic, n, partitions=1)
        sent = consume(client, topic, n)
        assert client.offload_topic(topic, force=True)[0] >= 2
        first_local = client.tier_status(topic).partitions[0].first_local_offset
    cut = 37
    assert cut < first_local  # inside the first offloaded blob
    tp = TopicPartition(topic, 0)

    def kafka_read(expect: int) -> list[tuple[int, bytes]]:
        consumer = KafkaConsumer(bootstrap_servers=tier_server.kafka, auto_offset_reset="earliest")
        try:
            consumer.assign([tp])
            out: list[tuple[int, bytes]] = []
            deadline = time.monotonic() + 60
            while len(out) < expect and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    out.extend((r.offset, r.value) for r in records)
            return out
        finally:
            consumer.close()

    def expected(start: int) -> list[tuple[int, bytes]]:
        return [(o, sent[(0, o)][0]) for o in range(start, n)]

    assert kafka_read(n) == expected(0)
    admin = KafkaAdminClient(bootstrap_servers=tier_server.kafka, request_timeout_ms=30_000)
    try:
        assert admin.delete_records({tp: cut})[tp]["low_watermark"] == cut
    finally:
        admin.close()
    assert kafka_read(n - cut) == expected(cut)
    with weir.Client(tier_server.endpoint) as client:
        got = [(m.offset, m.data) for c in client.read_range(topic, 0, 0) for m in c.messages()]
    assert got == expected(cut)


def test_policy_drives_background_offload_and_retention_deletes_objects(
    tier_server: ServerProcess,
) -> None:
    topic = f"policy-{uuid.uuid4().hex[:6]}"
    with weir.Client(tier_server.endpoint) as client:
        produce(client, topic, 800, partitions=1)
        client.alter_topic(topic, policies={"offload_threshold_bytes": 100_000})
        # a pass copies the oldest sealed blobs until at most the threshold is local, so
        # reaching it means the pass is over (the head alone is under the 48 KiB watermark)
        deadline = time.monotonic() + 60
        st = client.tier_status(topic)
        while time.monotonic() < deadline and st.partitions[0].local_bytes > 100_000:
            time.sleep(0.2)
            st = client.tier_status(topic)
        p = st.partitions[0]
        assert len(p.segments) > 1, "the background task never offloaded"
        assert p.local_bytes <= 100_000
        keys = [s.object_key for s in p.segments]  # oldest first
        # retention by size counts local and offloaded bytes alike: a budget of one byte
        # more than is local keeps the local blobs and the newest offloaded segment, and
        # deletes every older one (how many bytes each blob holds depends on how the
        # writes were grouped, so the budget is taken from what is there)
        client.alter_topic(topic, retention_bytes=p.local_bytes + 1)
        deadline = time.monotonic() + 60
        left = set(keys)
        while time.monotonic() < deadline and left != {keys[-1]}:
            time.sleep(0.2)
            st = client.tier_status(topic)
            left = {s.object_key for s in st.partitions[0].segments}
        assert left == {keys[-1]}, "retention kept offloaded segments (or dropped the newest)"
        assert st.partitions[0].start_offset == p.segments[-1].first_offset
        assert st.partitions[0].local_bytes == p.local_bytes
        gone = set(keys[:-1])
    objects = list_objects(tier_server)
    if objects is not None:
        deadline = time.monotonic() + 30
        while gone & set(objects) and time.monotonic() < deadline:
            time.sleep(0.2)
            objects = list_objects(tier_server) or []
        assert not gone & set(objects), "the expiration task left deleted segments' objects"


def scrape(srv: ServerProcess) -> dict[str, float]:
    """The server's unlabelled metrics."""
    import urllib.request

    with urllib.request.urlopen(f"{srv.http_url}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def list_objects(srv: ServerProcess) -> list[str] | None:
    """The object keys of the server's local tier (None for S3: checked in test_offload)."""
    root = srv.data_dir / "tier"
    if not root.exists() or (srv.env and srv.env.get("WEIR_TIER_BACKEND") == "s3"):
        return None
    return [p.relative_to(root).as_posix() for p in root.rglob("*.parquet")]


def test_cli_offload_and_status(tier_server: ServerProcess) -> None:
    topic = f"cli-{uuid.uuid4().hex[:6]}"
    with weir.Client(tier_server.endpoint) as client:
        produce(client, topic, 400, partitions=1)

    def cli(*args: str) -> str:
        r = subprocess.run(
            [sys.executable, "-m", "weir.cli", *args, "--endpoint", tier_server.endpoint],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        return r.stdout

    out = cli("topic", "offload", topic, "--force")
    assert "offloaded" in out and "partition 0" in out
    out = cli("topic", "offload-status", topic)
    assert "partition" in out and "store:" in out
    import json

    st = json.loads(cli("topic", "offload-status", topic, "--json"))
    assert st["partitions"][0]["segments"]
    _ = Path


def _messages(client: weir.Client, topic: str, *, committed: bool) -> dict[int, bytes]:
    return {
        m.offset: m.data
        for chunk in client.read_range(topic, 0, 0, read_committed=committed)
        for m in chunk.messages()
    }


def _spark_rows(
    endpoint: str, topic: str, backend: str, *, committed: bool
) -> list[tuple[int, bytes]]:
    """What the Spark source reads (its plan and its tasks, no SparkSession needed)."""
    from tests.tiered.conftest import CREDS
    from weir.spark.batch_reader import WeirBatchReader
    from weir.spark.options import ReaderOptions
    from weir.spark.tier_scan import TierRange

    opts = {"endpoint": endpoint, "topic": topic, "readcommitted": str(committed).lower()}
    if backend == "s3":
        opts.update({"tier.accesskey": CREDS["access_key"], "tier.secretkey": CREDS["secret_key"]})
    reader = WeirBatchReader(ReaderOptions.parse(opts, streaming=False))
    plan = list(reader.partitions())
    assert any(isinstance(r, TierRange) for r in plan), "nothing read from the store"
    rows = []
    for part in plan:
        for b in reader.read(part):  # type: ignore[arg-type]
            offsets, values = b.column("offset").to_pylist(), b.column("value").to_pylist()
            rows.extend(zip(offsets, values, strict=True))
    return rows


def test_offloaded_transactions_read_as_before_and_spark_reads_markers_through_the_broker(
    tier_server: ServerProcess,
) -> None:
    """Offloaded segments holding transaction markers or aborted messages: the broker
    reads them as before (committed and not), tier status marks them ``transactional``,
    and Spark reads those through the broker, so its rows never show a marker or, read
    committed, an aborted message; the segments without any still come from the store."""
    topic = f"txn-tier-{uuid.uuid4().hex[:6]}"
    body = b"x" * 900
    with weir.Client(tier_server.endpoint) as client:
        client.create_topic(topic, partitions=1)

        def plain(tag: str, n: int) -> None:
            with client.writer(topic, partition=0) as w:
                for i in range(n):
                    w.write(b"%s-%d:" % (tag.encode(), i) + body)

        def in_txn(tag: str, n: int, commit: bool) -> None:
            tx = client.transaction().begin()
            w = tx.writer(topic, partition=0)
            for i in range(n):
                w.write(b"%s-%d:" % (tag.encode(), i) + body)
            w.flush()  # stored (uncommitted) before the end
            tx.commit() if commit else tx.abort()

        plain("a", 200)
        in_txn("kept", 100, True)
        in_txn("dropped", 100, False)
        plain("b", 300)
        committed = _messages(client, topic, committed=True)
        everything = _messages(client, topic, committed=False)
        assert len(committed) == 600 and len(everything) == 700  # (two markers: no message)
        assert not any(d.startswith(b"dropped") for d in committed.values())
        assert sum(client.offload_topic(topic, force=True)) >= 4
        st = client.tier_status(topic)
        segs = st.partitions[0].segments
        assert _messages(client, topic, committed=True) == committed
        assert _messages(client, topic, committed=False) == everything
    # transactional: a marker (an offset no reader gets) or an aborted message inside it
    for s in segs:
        hidden = any(o not in committed for o in range(s.first_offset, s.end_offset))
        assert s.transactional == hidden, s
    assert any(s.transactional for s in segs) and any(not s.transactional for s in segs)
    for want, read_committed in ((committed, True), (everything, False)):
        rows = _spark_rows(
            tier_server.endpoint, topic, st.store["backend"], committed=read_committed
        )
        assert sorted(o for o, _ in rows) == sorted(want)  # each once, no marker row
        assert dict(rows) == want
