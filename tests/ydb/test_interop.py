"""One topic, two SDKs: what the ydb SDK writes the weir SDK reads, and the reverse."""

from __future__ import annotations

import datetime as dt

import ydb

import weir
from tests.conftest import ServerProcess
from tests.ydb.conftest import path, receive


def test_ydb_sdk_writes_weir_sdk_reads(
    shared_server: ServerProcess, driver: ydb.Driver, topic_name: str
) -> None:
    tc = driver.topic_client
    tc.create_topic(path(topic_name), min_active_partitions=1)
    created = dt.datetime(2026, 3, 4, 5, 6, 7, 890000)
    with tc.writer(
        path(topic_name), producer_id="ydb-side", codec=ydb.TopicCodec.GZIP, auto_created_at=False
    ) as w:
        w.write(
            [
                ydb.TopicWriterMessage(
                    b"from ydb %d" % i,
                    created_at=created,
                    metadata_items={"trace": b"t-%d" % i, "raw": b"\xff\xfe"},
                )
                for i in range(50)
            ]
        )
    client = weir.Client(shared_server.endpoint)
    try:
        msgs = list(client.read_range(topic_name, 0, 0, 50))
        messages = [m for chunk in msgs for m in chunk.messages()]
    finally:
        client.close()
    assert [m.data for m in messages] == [b"from ydb %d" % i for i in range(50)]  # gunzipped
    first = messages[0]
    assert first.producer_id == "ydb-side" and [m.seq_no for m in messages] == list(range(1, 51))
    assert first.headers["trace"] == "t-0"
    assert first.headers["raw"].encode("utf-8", "surrogateescape") == b"\xff\xfe"
    assert first.created_at == created.replace(tzinfo=dt.UTC)
    assert [m.offset for m in messages] == list(range(50))


def test_weir_sdk_writes_ydb_sdk_reads(
    shared_server: ServerProcess, driver: ydb.Driver, topic_name: str
) -> None:
    client = weir.Client(shared_server.endpoint)
    try:
        client.create_topic(topic_name, partitions=1)
        for codec in ("zstd", "raw"):
            with client.writer(topic_name, producer_id=f"weir-{codec}", codec=codec) as w:
                for i in range(100):
                    w.write(
                        b"from weir %d" % i,
                        key=f"group-{i % 3}",
                        headers={"n": str(i)} if i % 2 else None,
                    )
    finally:
        client.close()
    reader = driver.topic_client.reader(path(topic_name), consumer="ydb-reader")
    try:
        msgs = receive(reader, 200, commit=True)
    finally:
        reader.close()
    assert [m.data for m in msgs] == [b"from weir %d" % i for i in range(100)] * 2  # decompressed
    assert [m.producer_id for m in msgs] == ["weir-zstd"] * 100 + ["weir-raw"] * 100
    assert msgs[4].message_group_id == "group-1"
    assert msgs[5].metadata_items == {"n": b"5"} and msgs[4].metadata_items == {}
    assert [m.seqno for m in msgs[:3]] == [1, 2, 3]
    assert [m.offset for m in msgs] == list(range(200))
