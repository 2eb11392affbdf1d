"""Spark over a half-offloaded topic (both tier back ends): the plan reads offloaded
offsets straight from the object store (TierRange tasks) and only the live tail through
the broker; the DataFrame has every offset exactly once, equal to what the SDK reads;
a TierRange task reads with the broker stopped; the stream source far behind plans the
same cut."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import weir
import weir.spark
from tests.conftest import ServerProcess
from tests.spark.topics import Rec, produce, read_topic
from tests.tiered.conftest import CREDS, S3Server, make_bucket, s3_server  # noqa: F401
from weir.errors import BadRequestError
from weir.spark import tier_files
from weir.spark.batch_reader import WeirBatchReader
from weir.spark.offsets import to_json
from weir.spark.options import ReaderOptions
from weir.spark.scan import TopicRange
from weir.spark.stream_reader import WeirStreamReader
from weir.spark.tier_scan import TierRange

SMALL_BLOBS = {"WEIR_STORAGE_LOW_WATERMARK": "48KiB", "WEIR_STORAGE_MAX_BLOB_SIZE": "64KiB"}


# Spark over S3 reads through the same S3Storage the tier's own S3 tests cover; it costs a
# Spark stage over HTTP more, so it runs with the soak (make soak), local in the default run
@pytest.fixture(scope="module", params=["local", pytest.param("s3", marks=pytest.mark.slow)])
def tier_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    env = dict(SMALL_BLOBS)
    opts: dict[str, str] = {}
    if request.param == "s3":
        s3: S3Server = request.getfixturevalue("s3_server")
        bucket = f"spark-{uuid.uuid4().hex[:10]}"
        make_bucket(s3.endpoint, bucket)
        env.update(
            WEIR_TIER_BACKEND="s3",
            WEIR_TIER_S3_ENDPOINT=s3.endpoint,
            WEIR_TIER_S3_BUCKET=bucket,
            WEIR_TIER_S3_ACCESS_KEY=CREDS["access_key"],
            WEIR_TIER_S3_SECRET_KEY=CREDS["secret_key"],
        )
        opts = {"tier.accessKey": CREDS["access_key"], "tier.secretKey": CREDS["secret_key"]}
    srv = ServerProcess(tmp_path_factory.mktemp(f"spark-tier-{request.param}"), env=env)
    srv.start()
    yield srv, opts
    srv.stop()


def _records(p: int, n: int, base: int = 0) -> list[Rec]:
    """Values that compress on even partitions, that do not on odd ones (the segment
    objects' ``value`` column is zstd for the first, plain for the second)."""
    return [
        Rec(
            value=b"v%d-%d:" % (p, base + i)
            + (b"x" * 700 if p % 2 == 0 else random.Random(p << 32 | base + i).randbytes(700)),
            key=b"k%d" % (i % 5) if i % 4 else None,
            headers={"i": str(base + i)} if i % 3 == 0 else {},
            created_at_ms=1_700_000_000_000 + base + i,
        )
        for i in range(n)
    ]


def _full(row: Any) -> tuple[Any, ...]:
    """Every column of a row, comparable (headers as sorted pairs)."""
    d = row.asDict()
    d["headers"] = sorted((d["headers"] or {}).items())
    return tuple(bytes(v) if isinstance(v, bytearray) else v for v in d.values())


def half_offloaded(client: weir.Client, topic: str) -> None:
    """Two partitions: 600 records each written and offloaded, then 150 more (live)."""
    client.create_topic(topic, partitions=2)
    for round_ in range(6):
        produce(client, topic, {p: _records(p, 100, 100 * round_) for p in range(2)})
    assert sum(client.offload_topic(topic, force=True)) >= 4
    produce(client, topic, {p: _records(p, 150, 600) for p in range(2)})


def test_half_offloaded_topic_every_offset_once_and_plan_reads_the_store(
    spark: Any, tier_server: tuple[ServerProcess, dict[str, str]]
) -> None:
    srv, opts = tier_server
    topic = f"half-{uuid.uuid4().hex[:6]}"
    with weir.Client(srv.endpoint) as client:
        half_offloaded(client, topic)
        expected = {
            (p, m.offset): (m.data, bytes(m.key or b""), dict(m.headers))
            for p, msgs in read_topic(client, topic).items()
            for m in msgs
        }
        st = client.tier_status(topic)
    assert len(expected) == 1500
    # the plan: offloaded offsets from the store, only the rest through the broker
    options = {"endpoint": srv.endpoint, "topic": topic, **{k.lower(): v for k, v in opts.items()}}
    reader = WeirBatchReader(ReaderOptions.parse(options, streaming=False))
    plan = reader.partitions()
    tier = [r for r in plan if isinstance(r, TierRange)]
    broker = [r for r in plan if isinstance(r, TopicRange)]
    assert tier and broker
    for p in st.partitions:
        offloaded = sum(r.end - r.start for r in tier if r.partition == p.partition)
        assert offloaded == p.first_local_offset - p.start_offset > 0
        assert all(r.start >= p.first_local_offset for r in broker if r.partition == p.partition)
    assert "object store" in repr(tier[0])
    # the stream source, far behind (a micro-batch from 0 to the end), plans the same cut
    stream = WeirStreamReader(ReaderOptions.parse(options, streaming=True))
    try:
        ends = {(topic, p.partition): p.end_offset for p in st.partitions}
        micro = stream.partitions(to_json({tp: 0 for tp in ends}), to_json(ends))
    finally:
        stream.stop()
    assert sorted(
        (r.partition, r.start, r.end) for r in micro if isinstance(r, TierRange)
    ) == sorted((r.partition, r.start, r.end) for r in tier)
    # the DataFrame: every offset exactly once, as the SDK reads it
    r = spark.read.format("weir").option("endpoint", srv.endpoint).option("topic", topic)
    for k, v in opts.items():
        r = r.option(k, v)
    rows = r.load().collect()
    keys = [(row.partition, row.offset) for row in rows]
    assert len(keys) == len(set(keys)) == 1500
    got = {
        (row.partition, row.offset): (
            bytes(row.value),
            bytes(row.key) if row.key is not None else b"",
            dict(row.headers or {}),
        )
        for row in rows
    }
    assert got == {k: (d, key, h) for k, (d, key, h) in expected.items()}
    assert {row.topic for row in rows} == {topic}
    # weir.spark.read: the same rows, the offloaded part read by Spark's own Parquet scan of
    # the store's files (local directory) and only the live tail by the Python source
    df = weir.spark.read(spark, {"endpoint": srv.endpoint, "topic": topic, **opts})
    plan_text = df._jdf.queryExecution().executedPlan().toString()
    native = [(row.partition, row.offset, bytes(row.value)) for row in df.collect()]
    assert sorted(native) == sorted((p, o, v[0]) for (p, o), v in got.items())
    # every column as the Python source gives it, whichever way the live tail is read: on
    # the driver (small: the default) or by the Python source (driverTailBytes=0)
    assert sorted(map(_full, df.collect())) == sorted(map(_full, rows))
    if st.store["backend"] == "local":
        assert "(Python)" not in plan_text, plan_text  # no Python worker in the query
    by_source = weir.spark.read(
        spark, {"endpoint": srv.endpoint, "topic": topic, **opts}, driverTailBytes="0"
    )
    assert "BatchScan weir" in by_source._jdf.queryExecution().executedPlan().toString()
    assert sorted(map(_full, by_source.collect())) == sorted(map(_full, rows))
    # a tail over the budget (300 rows of ~700 B here) goes to the Python source too
    over = weir.spark.read(spark, endpoint=srv.endpoint, topic=topic, driverTailBytes="4096")
    assert "BatchScan weir" in over._jdf.queryExecution().executedPlan().toString()
    with pytest.raises(BadRequestError, match="driverTailBytes"):
        weir.spark.read(spark, endpoint=srv.endpoint, topic=topic, driverTailBytes="-1")
    if st.store["backend"] == "local":
        assert "FileScan parquet" in plan_text, plan_text
        # every object is read whole: one scan of all of them, and no offset filter
        assert f"InMemoryFileIndex({len({r.object_key for r in tier})} paths)" in plan_text
        assert "PushedFilters: []" in plan_text, plan_text
        # the files' rows are exactly the offloaded offsets, the Python source's the rest
        _, files, rest = tier_files.plan({"endpoint": srv.endpoint, "topic": topic})
        assert sorted((r.partition, r.start, r.end) for r in files) == sorted(
            (r.partition, r.start, r.end) for r in tier
        )
        assert sorted((tp[1], s, e) for tp, s, e in rest) == sorted(
            (r.partition, r.start, r.end) for r in broker
        )
        # a range that starts and ends inside objects: those two are scanned with the
        # offset filter, the objects between them whole, and each planned offset read once
        objs = sorted((r for r in tier if r.partition == 0), key=lambda r: r.start)
        # Objects are cut where commits were (a round of 100 may be several under load):
        # start and end inside the first and last objects that have room to cut into.
        roomy = [i for i, r in enumerate(objs) if r.end - r.start >= 2]
        assert len(roomy) >= 2, objs
        first, last = objs[roomy[0]], objs[roomy[-1]]
        lo = first.start + (first.end - first.start) // 2
        hi = last.start + (last.end - last.start) // 2
        whole = roomy[-1] - roomy[0] - 1
        cut = weir.spark.read(
            spark,
            {
                "endpoint": srv.endpoint,
                "topic": topic,
                "startingOffsets": json.dumps({topic: {"0": lo, "1": -1}}),
                "endingOffsets": json.dumps({topic: {"0": hi, "1": -1}}),
                **opts,
            },
        )
        cut_plan = cut._jdf.queryExecution().executedPlan().toString()
        assert "InMemoryFileIndex(2 paths)" in cut_plan, cut_plan
        if whole:
            assert f"InMemoryFileIndex({whole} paths)" in cut_plan, cut_plan
        assert "PushedFilters: [IsNotNull(partition), EqualTo(partition,0)" in cut_plan, cut_plan
        got_cut = sorted((row.partition, row.offset) for row in cut.collect())
        assert got_cut == [(0, o) for o in range(lo, hi)]
    else:  # no S3 connector in this Spark: the Python source reads the store
        assert "FileScan" not in plan_text, plan_text
    # a TierRange task needs no broker: read one with the server stopped
    srv.stop()
    try:
        batches = list(reader.read(tier[0]))
        assert sum(b.num_rows for b in batches) == tier[0].end - tier[0].start
        assert batches[0].column("offset")[0].as_py() == tier[0].start
    finally:
        srv.start()


def test_spark_parquet_scan_refuses_a_damaged_object(
    spark: Any, tier_server: tuple[ServerProcess, dict[str, str]]
) -> None:
    """A byte flipped inside an offloaded object's ``value`` pages: `weir.spark.read`'s
    Parquet scan checks the page checksums the segment was written with and fails the
    query, rather than serving the damaged value (the values do not compress, so they are
    stored without a codec: without the checksums Spark reads the flipped byte as data)."""
    import os

    import pyarrow.parquet as pq

    srv, opts = tier_server
    if opts:
        pytest.skip("Spark's own Parquet scan reads the local-directory store only")
    topic = f"flip-{uuid.uuid4().hex[:6]}"
    with weir.Client(srv.endpoint) as client:
        client.create_topic(topic, partitions=1)
        for _ in range(3):
            produce(client, topic, {0: [Rec(value=os.urandom(700)) for _ in range(100)]})
        assert client.offload_topic(topic, force=True)[0] >= 1
        st = client.tier_status(topic)
    seg = st.partitions[0].segments[0]
    obj = Path(st.store["path"]) / seg.object_key
    col = pq.ParquetFile(obj).metadata.row_group(0).column(4)  # value
    assert col.path_in_schema == "value"
    data = bytearray(obj.read_bytes())
    data[col.data_page_offset + col.total_compressed_size // 2] ^= 0x5A
    obj.write_bytes(data)
    df = weir.spark.read(spark, endpoint=srv.endpoint, topic=topic)
    with pytest.raises(Exception, match=r"(?s)FAILED_READ_FILE.*checksum verification failed"):
        df.select("value").collect()


def test_spark_reads_objects_written_with_zstd_everywhere(
    spark: Any, tier_server: tuple[ServerProcess, dict[str, str]]
) -> None:
    """Objects offloaded before the codec choice (zstd on every column) read the same:
    each object of a half-offloaded topic rewritten so (same rows, row groups and
    metadata), `weir.spark.read` gives every column as before."""
    import pyarrow.parquet as pq

    srv, opts = tier_server
    if opts:
        pytest.skip("Spark's own Parquet scan reads the local-directory store only")
    topic = f"oldcodec-{uuid.uuid4().hex[:6]}"
    with weir.Client(srv.endpoint) as client:
        half_offloaded(client, topic)
        st = client.tier_status(topic)
    want = sorted(map(_full, weir.spark.read(spark, endpoint=srv.endpoint, topic=topic).collect()))
    keys = {s.object_key for p in st.partitions for s in p.segments}
    codecs = set()
    for key in keys:
        path = Path(st.store["path"]) / key
        f = pq.ParquetFile(path)
        codecs.add(f.metadata.row_group(0).column(4).compression)
        tables = [f.read_row_group(i) for i in range(f.num_row_groups)]
        with pq.ParquetWriter(
            path.with_suffix(".old"),
            f.schema_arrow,
            compression="zstd",
            use_dictionary=["topic", "producer_id"],
            write_statistics=["offset", "written_at", "created_at"],
            write_page_checksum=True,
        ) as w:
            for t in tables:
                w.write_table(t, row_group_size=t.num_rows)
        path.with_suffix(".old").replace(path)
        assert pq.ParquetFile(path).metadata.row_group(0).column(4).compression == "ZSTD"
    assert codecs == {"ZSTD", "UNCOMPRESSED"}  # both kinds of value column were there
    got = sorted(map(_full, weir.spark.read(spark, endpoint=srv.endpoint, topic=topic).collect()))
    assert got == want and len(got) == 1500
