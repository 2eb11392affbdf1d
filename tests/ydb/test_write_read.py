"""The ydb SDK writes and reads through weir: many producers, shared consumers, codecs, metadata."""

from __future__ import annotations

import datetime as dt
import gzip
import threading
import time
from collections import Counter, defaultdict

import ydb

from tests.ydb.conftest import nothing_more, path, receive

PRODUCERS = 8
PER_PRODUCER = 12_500  # 100,000 messages in all


def read_shared(
    readers: list[ydb.TopicReader], expected: int, timeout: float = 120
) -> list[list[tuple[int, int, bytes, int, str]]]:
    """Each reader in its own thread takes batches of its live partition sessions and commits
    them, until together they saw ``expected`` distinct messages."""
    seen: list[list[tuple[int, int, bytes, int, str]]] = [[] for _ in readers]
    distinct: set[tuple[int, int]] = set()
    lock = threading.Lock()
    done = threading.Event()
    deadline = time.monotonic() + timeout

    def run(i: int, reader: ydb.TopicReader) -> None:
        while not done.is_set() and time.monotonic() < deadline:
            try:
                batch = reader.receive_batch(timeout=0.2)
            except TimeoutError:
                continue
            if not batch.alive:  # its partition moved to the other reader: it re-reads them
                continue
            rows = [
                (m.partition_id, m.offset, m.data, m.seqno, m.producer_id) for m in batch.messages
            ]
            seen[i].extend(rows)
            reader.commit(batch)
            with lock:
                distinct.update((r[0], r[1]) for r in rows)
                if len(distinct) >= expected:
                    done.set()

    threads = [threading.Thread(target=run, args=(i, r)) for i, r in enumerate(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 10)
    return seen


def test_100k_messages_from_8_producers_read_by_two_readers_then_nothing_twice(
    driver: ydb.Driver, topic_name: str
) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    tc.create_topic(topic, min_active_partitions=4, consumers=["shared"])
    writers = [
        tc.writer(topic, producer_id=f"producer-{k}", codec=ydb.TopicCodec.RAW)
        for k in range(PRODUCERS)
    ]
    for start in range(0, PER_PRODUCER, 500):
        for k, w in enumerate(writers):
            w.write([ydb.TopicWriterMessage(b"%d:%d" % (k, i)) for i in range(start, start + 500)])
    for w in writers:
        w.close()
    info = tc.describe_topic(topic)
    assert sum(p.partition_stats.partition_end for p in info.partitions) == 100_000
    assert len({p.partition_id for p in info.partitions}) == 4

    readers = [tc.reader(topic, consumer="shared") for _ in range(2)]
    seen = read_shared(readers, 100_000)
    for r in readers:
        r.close()  # waits for every commit's answer

    rows = seen[0] + seen[1]
    assert seen[0] and seen[1], "both readers of the consumer got partitions"
    by_position = {(p, o): (data, seq, pid) for p, o, data, seq, pid in rows}
    assert len(by_position) == 100_000
    expected = {b"%d:%d" % (k, i) for k in range(PRODUCERS) for i in range(PER_PRODUCER)}
    assert {v[0] for v in by_position.values()} == expected, "nothing missing"
    per_producer: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for (p, _), (data, seq, pid) in sorted(by_position.items()):
        per_producer[pid].append((p, seq, int(data.split(b":")[1])))
    for pid, items in per_producer.items():
        assert len({p for p, _, _ in items}) == 1, f"{pid} is pinned to one partition"
        assert [s for _, s, _ in items] == list(range(1, PER_PRODUCER + 1))
        assert [i for _, _, i in items] == list(range(PER_PRODUCER)), "in write order"

    described = tc.describe_consumer(topic, "shared")
    assert [p.partition_stats.partition_end for p in described.partitions] == [
        p.partition_consumer_stats.committed_offset for p in described.partitions
    ]
    # Reopened after the commits: nothing is read a second time.
    again = tc.reader(topic, consumer="shared")
    try:
        assert nothing_more(again, 2.0)
        # ... and what is written next is read exactly once.
        with tc.writer(topic, producer_id="producer-0") as w:
            w.write(ydb.TopicWriterMessage(b"after"))
        late = receive(again, 1, commit=True)
        assert [m.data for m in late] == [b"after"]
        assert late[0].seqno == PER_PRODUCER + 1
        assert nothing_more(again, 1.0)
    finally:
        again.close()


def test_gzip_and_raw_codecs_round_trip_and_reach_readers_as_written(
    driver: ydb.Driver, topic_name: str
) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    tc.create_topic(topic, consumers=["c"])
    text = [b"compressible text, message %d " % i * 4 for i in range(300)]
    with tc.writer(topic, producer_id="gz", codec=ydb.TopicCodec.GZIP) as w:
        w.write([ydb.TopicWriterMessage(t) for t in text[:100]])
    with tc.writer(topic, producer_id="raw", codec=ydb.TopicCodec.RAW) as w:
        w.write([ydb.TopicWriterMessage(t) for t in text[100:200]])
    with tc.writer(topic, producer_id="auto") as w:  # the SDK's default picks per batch
        for t in text[200:]:
            w.write(ydb.TopicWriterMessage(t))

    gzipped: list[bytes] = []

    def gunzip(data: bytes) -> bytes:
        gzipped.append(data)
        return gzip.decompress(data)

    reader = tc.reader(topic, consumer="c", decoders={ydb.TopicCodec.GZIP: gunzip})
    try:
        msgs = receive(reader, 300, commit=True)
    finally:
        reader.close()
    assert sorted(m.data for m in msgs) == sorted(text)
    assert len(gzipped) >= 100, "the gzip writer's messages arrive still gzipped"
    assert all(g[:2] == b"\x1f\x8b" for g in gzipped)
    assert {m.producer_id for m in msgs} == {"gz", "raw", "auto"}


def test_metadata_created_at_and_positions_survive(driver: ydb.Driver, topic_name: str) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    tc.create_topic(topic, min_active_partitions=3, consumers=["c"])
    created = dt.datetime(2025, 6, 7, 8, 9, 10, 123000)
    with tc.writer(topic, producer_id="meta", auto_created_at=False) as w:
        w.write(
            [
                ydb.TopicWriterMessage(
                    b"m%d" % i,
                    created_at=created,
                    metadata_items={"text": "héllo", "bytes": bytes([255, 0, i])},
                )
                for i in range(5)
            ]
        )
        w.write(ydb.TopicWriterMessage(b"", created_at=created))  # empty ones count too
    reader = tc.reader(topic, consumer="c")
    try:
        msgs = receive(reader, 6, commit=True)
    finally:
        reader.close()
    assert [m.data for m in msgs] == [b"m0", b"m1", b"m2", b"m3", b"m4", b""]
    first = msgs[0]
    assert first.metadata_items == {"text": "héllo".encode(), "bytes": bytes([255, 0, 0])}
    assert msgs[4].metadata_items["bytes"] == bytes([255, 0, 4])
    assert msgs[5].metadata_items == {}
    assert first.created_at == created
    assert [m.offset for m in msgs] == list(range(6))
    assert [m.seqno for m in msgs] == list(range(1, 7))
    assert first.producer_id == "meta" and first.message_group_id == "meta"
    assert abs(first.written_at - dt.datetime.utcnow()) < dt.timedelta(minutes=5)


def test_read_from_time_skips_older_messages(driver: ydb.Driver, topic_name: str) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    tc.create_topic(topic, consumers=["probe"])
    with tc.writer(topic, producer_id="clock") as w:
        w.write([ydb.TopicWriterMessage(b"old%d" % i) for i in range(20)])
    probe = tc.reader(topic, consumer="probe")
    try:
        old = receive(probe, 20)
    finally:
        probe.close(flush=False)
    boundary = max(m.written_at for m in old) + dt.timedelta(milliseconds=1)
    while dt.datetime.utcnow() <= boundary:  # cross the millisecond boundary
        time.sleep(0.001)
    with tc.writer(topic, producer_id="clock") as w:
        w.write([ydb.TopicWriterMessage(b"new%d" % i) for i in range(10)])
    selector = ydb.TopicReaderSelector(topic, read_from=boundary)
    reader = tc.reader(selector, consumer="fresh")
    try:
        msgs = receive(reader, 10)
        assert [m.data for m in msgs] == [b"new%d" % i for i in range(10)]
        assert nothing_more(reader, 1.0)
    finally:
        reader.close(flush=False)


def test_small_reader_buffer_gets_everything_in_order(driver: ydb.Driver, topic_name: str) -> None:
    """Credit flow: a 4 KB buffer holds ~20 messages, so the server must wait for the SDK to
    hand bytes back again and again."""
    tc = driver.topic_client
    topic = path(topic_name)
    tc.create_topic(topic, consumers=["slow"])
    payload = [b"%05d" % i + b"." * 95 for i in range(2000)]
    with tc.writer(topic, producer_id="p") as w:
        w.write([ydb.TopicWriterMessage(p) for p in payload])
    reader = tc.reader(topic, consumer="slow", buffer_size_bytes=4096)
    try:
        msgs = receive(reader, 2000, commit=True)
    finally:
        reader.close()
    assert [m.data for m in msgs] == payload


def test_message_bigger_than_the_reader_buffer_still_arrives(
    driver: ydb.Driver, topic_name: str
) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    tc.create_topic(topic, consumers=["c"])
    big = bytes(range(256)) * 4096  # 1 MiB
    with tc.writer(topic, producer_id="p", codec=ydb.TopicCodec.RAW) as w:
        w.write([ydb.TopicWriterMessage(b"small"), ydb.TopicWriterMessage(big)])
    reader = tc.reader(topic, consumer="c", buffer_size_bytes=64 * 1024)
    try:
        msgs = receive(reader, 2, commit=True)
    finally:
        reader.close()
    assert [m.data for m in msgs] == [b"small", big]


def test_two_consumers_each_read_everything(driver: ydb.Driver, topic_name: str) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    tc.create_topic(topic, min_active_partitions=2, consumers=["a", "b"])
    with tc.writer(topic, producer_id="p") as w:
        w.write([ydb.TopicWriterMessage(b"%d" % i) for i in range(100)])
    counts = Counter[str]()
    for consumer in ("a", "b"):
        reader = tc.reader(topic, consumer=consumer)
        try:
            counts[consumer] = len(receive(reader, 100, commit=True))
        finally:
            reader.close()
    assert counts == {"a": 100, "b": 100}


class StartAt(ydb.TopicReaderEvents.EventHandler):
    """Where a reader without a consumer starts each partition (its own offset bookkeeping)."""

    def __init__(self, offsets: dict[int, int]) -> None:
        self.offsets = offsets

    def on_partition_get_start_offset(
        self, event: ydb.TopicReaderEvents.OnPartitionGetStartOffsetRequest
    ) -> ydb.TopicReaderEvents.OnPartitionGetStartOffsetResponse:
        return ydb.TopicReaderEvents.OnPartitionGetStartOffsetResponse(
            start_offset=self.offsets[event.partition_id]
        )


def test_reader_without_consumer_starts_where_the_client_says(
    driver: ydb.Driver, topic_name: str
) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    tc.create_topic(topic, min_active_partitions=2)
    for p in (0, 1):
        with tc.writer(topic, producer_id=f"p{p}", partition_id=p) as w:
            w.write([ydb.TopicWriterMessage(b"%d:%d" % (p, i)) for i in range(10)])
    selector = ydb.TopicReaderSelector(topic, partitions=[0, 1])
    reader = tc.reader(selector, consumer=None, event_handler=StartAt({0: 7, 1: 2}))
    try:
        msgs = receive(reader, 11)
    finally:
        reader.close(flush=False)
    assert sorted(m.data for m in msgs) == sorted(
        [b"0:%d" % i for i in range(7, 10)] + [b"1:%d" % i for i in range(2, 10)]
    )
