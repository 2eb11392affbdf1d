"""The read cache seen from the broker: shared by the partitions of every topic, counted in
/metrics, and never serving a dropped topic's bytes to the topic created in its place."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.storage.conftest import make_batch
from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.metrics import ServerMetrics
from weir.storage.batch import decode_records, iter_batches
from weir.storage.batch_encoding import encode_batch
from weir.storage.incoming import validate_incoming


async def open_broker(path: Path, **kw: object) -> Broker:
    cfg = BrokerConfig(
        data_dir=path,
        retention_interval_s=3600,
        low_watermark=10_000,
        max_blob_size=20_000,
        **kw,  # type: ignore[arg-type]
    )
    return await Broker.open(cfg)


def read_values(b: Broker, topic: str) -> list[bytes]:
    actor = b.actor(topic, 0)
    out: list[bytes] = []
    pos = actor.start_offset
    while pos < actor.end_offset:
        res = actor.read(pos, 5000)
        for chunk in res.chunks:
            for bpos, _ in iter_batches(chunk):
                out.extend(r.data for r in decode_records(chunk, bpos) if r.offset >= pos)
        pos = res.next_offset
    return out


def samples(metrics: ServerMetrics) -> dict[str, float]:
    text = metrics.exposition().decode()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("weir_read_cache")
    }


async def test_consumers_share_the_cache_and_metrics_count_it(tmp_path: Path) -> None:
    b = await open_broker(tmp_path, read_cache_bytes=1 << 20)
    metrics = ServerMetrics()
    metrics.broker = b
    await b.create_topic("a", partitions=1)
    await b.create_topic("z", partitions=1)
    for topic in ("a", "z"):
        for i in range(20):
            await b.write(topic, 0, make_batch(10, producer="p", first_seq=i * 10 + 1, size=200))
    big = sum(1 for t in ("a", "z") for x in b.actor(t, 0).log.blobs if not x.is_head)
    assert samples(metrics)["weir_read_cache_blobs"] == big  # cached as they were sealed
    await b.close()
    b = await open_broker(tmp_path, read_cache_bytes=1 << 20)  # now read back from LMDB
    metrics.broker = b
    first = [read_values(b, t) for t in ("a", "z")]
    for _ in range(9):  # ten consumers of each topic
        assert [read_values(b, t) for t in ("a", "z")] == first
    s = samples(metrics)
    assert s["weir_read_cache_misses_total"] == big  # each blob fetched and checked once
    assert s["weir_read_cache_hits_total"] >= 9 * big
    assert s["weir_read_cache_blobs"] == big
    assert 0 < s["weir_read_cache_bytes"] <= s["weir_read_cache_capacity_bytes"] == 1 << 20
    assert s["weir_read_cache_evictions_total"] == 0
    await b.close()


async def test_a_topic_created_again_never_reads_the_dropped_ones_bytes(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("t", partitions=1)
    for i in range(20):
        await b.write("t", 0, make_batch(10, producer="p", first_seq=i * 10 + 1, tag=b"old"))
    old = read_values(b, "t")
    assert b.store.read_cache.stats.blobs > 0
    await b.drop_topic("t")
    assert b.store.read_cache.stats.blobs == 0
    await b.create_topic("t", partitions=1)
    for i in range(20):
        await b.write("t", 0, make_batch(10, producer="p", first_seq=i * 10 + 1, tag=b"new"))
    new = read_values(b, "t")
    assert len(new) == len(old) == 200
    assert all(v.split(b":", 2)[2].startswith(b"new") for v in new)
    await b.close()


async def test_cache_off(tmp_path: Path) -> None:
    b = await open_broker(tmp_path, read_cache_bytes=0)
    await b.create_topic("t", partitions=1)
    for i in range(20):
        await b.write("t", 0, make_batch(10, producer="p", first_seq=i * 10 + 1))
    assert len(read_values(b, "t")) == 200
    s = b.store.read_cache.stats
    assert s.blobs == 0 and s.bytes == 0 and s.hits == 0 and s.misses > 0
    await b.close()


async def test_a_compaction_run_leaves_the_hot_blobs_cached(tmp_path: Path) -> None:
    """A compaction run reads a whole partition once: it uses what the cache holds but
    adds nothing to it, so the blobs consumers of another topic read again and again
    stay cached (no eviction, no miss when they read again) and its counters only
    count the consumers' reads."""
    b = await open_broker(tmp_path, read_cache_bytes=120_000, compaction_interval_s=3600)
    metrics = ServerMetrics()
    metrics.broker = b
    try:
        await b.create_topic("hot", partitions=1)
        await b.create_topic("log", partitions=1)
        for i in range(20):
            await b.write("hot", 0, make_batch(10, producer="p", first_seq=i * 10 + 1, size=200))
        for r in range(30):  # about 600 KB of 200 keys: five times the cache
            batch = encode_batch(
                [b"r%d-" % r + b"x" * 90] * 200, keys=[b"k%d" % i for i in range(200)]
            )
            await b.write("log", 0, validate_incoming([batch]))
        first = read_values(b, "hot")
        hot = [x for x in b.actor("hot", 0).log.blobs if not x.is_head]
        before = samples(metrics)
        # the hot blobs, and what is left of the log's (cached as they were written)
        assert before["weir_read_cache_blobs"] >= len(hot) > 0
        st = await b.compact("log", wait=True)
        assert st.last_error == "" and st.keys == 200
        assert samples(metrics) == before  # nothing added, evicted, counted
        assert read_values(b, "hot") == first
        after = samples(metrics)
        assert after["weir_read_cache_misses_total"] == before["weir_read_cache_misses_total"]
        assert after["weir_read_cache_hits_total"] >= before["weir_read_cache_hits_total"] + len(
            hot
        )
        # the run evicted nothing (the log's own writes did, before it)
        assert after["weir_read_cache_evictions_total"] == before["weir_read_cache_evictions_total"]
    finally:
        await b.close()
