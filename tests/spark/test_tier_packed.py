"""Spark over packed segment objects (``tier.object_bytes``: several blobs per object):
one TierRange task per object, and after a DeleteRecords at a blob boundary inside an
object (the object stays: its later blobs still need it) both `weir.spark.read` and
`format("weir")` return exactly the offsets left, each once: the object's rows below
the start offset are filtered out, not served."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import weir
import weir.spark
from tests.conftest import ServerProcess
from tests.spark.test_tier import SMALL_BLOBS, _records
from tests.spark.topics import produce
from weir.spark.batch_reader import WeirBatchReader
from weir.spark.options import ReaderOptions
from weir.spark.tier_scan import TierRange


@pytest.fixture(scope="module")
def packed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {**SMALL_BLOBS, "WEIR_TIER_OBJECT_BYTES": "200KiB"}
    srv = ServerProcess(tmp_path_factory.mktemp("spark-tier-packed"), env=env)
    srv.start()
    yield srv
    srv.stop()


def test_packed_objects_one_task_each_and_a_partly_deleted_object_is_filtered(
    spark: Any, packed_server: ServerProcess
) -> None:
    from kafka import KafkaAdminClient, TopicPartition

    srv = packed_server
    topic = f"packed-{uuid.uuid4().hex[:6]}"
    with weir.Client(srv.endpoint) as client:
        client.create_topic(topic, partitions=1)
        for round_ in range(8):
            produce(client, topic, {0: _records(0, 100, 100 * round_)})
        assert client.offload_topic(topic, force=True)[0] >= 4
        produce(client, topic, {0: _records(0, 50, 800)})  # a live tail
        segs = client.tier_status(topic).partitions[0].segments
    objects = [s.object_key for s in segs]
    assert len(set(objects)) < len(segs), "no object packs several blobs"
    first_obj = [s for s in segs if s.object_key == objects[0]]
    assert len(first_obj) >= 2
    options = {"endpoint": srv.endpoint, "topic": topic}

    def tier_tasks() -> list[TierRange]:
        reader = WeirBatchReader(ReaderOptions.parse(options, streaming=False))
        return [r for r in reader.partitions() if isinstance(r, TierRange)]

    tasks = tier_tasks()
    assert len(tasks) == len(set(objects)) and all(t.whole for t in tasks)
    # DeleteRecords at the first object's second blob: the first blob's record goes, the
    # object stays for the others
    cut = first_obj[1].first_offset
    tp = TopicPartition(topic, 0)
    admin = KafkaAdminClient(bootstrap_servers=srv.kafka, request_timeout_ms=30_000)
    try:
        assert admin.delete_records({tp: cut})[tp]["low_watermark"] == cut
    finally:
        admin.close()
    with weir.Client(srv.endpoint) as client:
        st = client.tier_status(topic).partitions[0]
        end = st.end_offset
    assert st.segments[0].object_key == objects[0] and st.segments[0].first_offset == cut
    assert st.segments[0].object_offsets[0] < cut  # the object still holds the rows below
    tasks = tier_tasks()
    assert tasks[0].start == cut and not tasks[0].whole
    want = list(range(cut, end))
    df = weir.spark.read(spark, options)
    assert sorted(r.offset for r in df.select("offset").collect()) == want
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "InMemoryFileIndex(1 paths)" in plan, plan  # the cut object, filtered
    python = spark.read.format("weir").options(**options).load()
    assert sorted(r.offset for r in python.select("offset").collect()) == want
