"""Compaction in the broker: runs beside writers without blocking them, compacted reads,
the threshold trigger, restarts, bad input."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.errors import BadRequestError, UnknownTopicError
from weir.storage.batch import decode_records, iter_batches
from weir.storage.batch_encoding import encode_batch
from weir.storage.incoming import validate_incoming


async def open_broker(path: Path, **kw: object) -> Broker:
    return await Broker.open(
        BrokerConfig(data_dir=path, retention_interval_s=3600, compaction_interval_s=3600, **kw)  # type: ignore[arg-type]
    )


async def put(b: Broker, topic: str, pairs: list[tuple[bytes, bytes]], partition: int = 0) -> None:
    batch = encode_batch([d for _, d in pairs], keys=[k for k, _ in pairs])
    await b.write(topic, partition, validate_incoming([batch]))


async def compacted(b: Broker, topic: str, partition: int = 0) -> list[tuple[int, bytes, bytes]]:
    out = []
    pos = b.compacted_start(topic, partition)
    end = b.actor(topic, partition).end_offset
    while pos < end:
        res = await b.read_compacted(topic, partition, pos, 300)
        for c in res.chunks:
            for p, _ in iter_batches(c):
                out.extend(
                    (r.offset, r.key, r.data) for r in decode_records(c, p) if r.offset >= pos
                )
        assert res.next_offset > pos
        pos = res.next_offset
    return out


async def served(b: Broker, topic: str, partition: int = 0) -> list[int]:
    """Every record offset compacted reads from offset 0 return (none left out: a record
    below the offset asked counts too)."""
    out: list[int] = []
    pos = 0
    while pos < b.actor(topic, partition).end_offset:
        res = await b.read_compacted(topic, partition, pos, 300)
        out.extend(
            r.offset for c in res.chunks for p, _ in iter_batches(c) for r in decode_records(c, p)
        )
        assert res.next_offset > pos
        pos = res.next_offset
    return out


async def test_writes_complete_while_a_run_is_held_mid_way(tmp_path: Path) -> None:
    b = await open_broker(tmp_path, compaction_blob_bytes=200)
    try:
        await b.create_topic("prices", partitions=1)
        for round_ in range(5):
            await put(b, "prices", [(b"k%d" % i, b"r%d" % round_) for i in range(20)])
        held, gate = threading.Event(), threading.Event()

        def hook(step: str) -> None:
            if step.startswith("blob-batch"):
                held.set()
                assert gate.wait(60), "the test never let the run go on"

        b.compaction_hook = hook
        status = await b.compact("prices")
        assert status.running
        assert await asyncio.to_thread(held.wait, 30), "the run never wrote a blob"
        # the run holds its worker thread mid-way: writers go on, acknowledged and readable
        for i in range(50):
            await put(b, "prices", [(b"k%d" % (i % 20), b"during-%d" % i)])
        mid = b.compaction_status("prices")
        assert mid.running and mid.partitions[0].phase == "writing"
        assert mid.partitions[0].position == 0  # nothing published yet: nothing served
        assert len(await compacted(b, "prices")) == 150  # no view yet: everything
        gate.set()
        final = await b.compact("prices", wait=True)
        p = final.partitions[0]
        assert not final.running and final.last_error == ""
        assert (p.position, p.keys, p.messages_before) == (100, 20, 100)
        got = await compacted(b, "prices")
        # the view (the latest of 20 keys below 100), then the tail written during the run
        assert [(k, d) for _, k, d in got[:20]] == [(b"k%d" % i, b"r4") for i in range(20)]
        assert [o for o, _, _ in got] == [*range(80, 100), *range(100, 150)]
    finally:
        b.compaction_hook = None
        await b.close()


async def test_a_view_survives_a_restart_and_the_next_run_builds_on_it(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_topic("users", partitions=2)
    await put(b, "users", [(b"a", b"1"), (b"b", b"1"), (b"a", b"2")])
    await put(b, "users", [(b"c", b"1"), (b"c", b"")], partition=1)  # c deleted
    await b.compact("users", wait=True)
    await b.close()
    b = await open_broker(tmp_path)
    try:
        assert [(k, d) for _, k, d in await compacted(b, "users")] == [(b"b", b"1"), (b"a", b"2")]
        assert [(k, d) for _, k, d in await compacted(b, "users", 1)] == [
            (b"c", b"")
        ]  # a tombstone
        await put(b, "users", [(b"b", b"2"), (b"d", b"1")])
        st = await b.compact("users", wait=True)
        assert [(k, d) for _, k, d in await compacted(b, "users")] == [
            (b"a", b"2"),
            (b"b", b"2"),
            (b"d", b"1"),
        ]
        assert st.partitions[0].messages_before == 4  # 2 from the old view, 2 new
        assert st.keys == 3
    finally:
        await b.close()


async def test_the_threshold_policy_starts_a_run(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    try:
        await b.create_namespace("shop", {"compaction_threshold_bytes": 500})
        await b.create_topic("shop/stock", partitions=1)
        await b.create_topic("shop/quiet", partitions=1)
        await put(b, "shop/stock", [(b"k", b"x" * 100) for _ in range(10)])
        await put(b, "shop/quiet", [(b"k", b"x")])
        assert await b.run_compaction_checks() == ["public/shop/stock"]
        await b.compact("shop/stock", wait=True)
        assert b.compaction_status("shop/stock").partitions[0].keys == 1
        assert await b.run_compaction_checks() == []  # nothing new past the view
    finally:
        await b.close()


async def test_bad_requests_change_nothing(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    try:
        with pytest.raises(UnknownTopicError):
            await b.compact("nope")
        with pytest.raises(UnknownTopicError):
            b.compaction_status("nope")
        with pytest.raises(BadRequestError, match="compaction_threshold_bytes"):
            await b.create_namespace("bad", {"compaction_threshold_bytes": -1})
        await b.create_topic("t", partitions=1)
        st = await b.compact("t", wait=True)  # an empty topic: nothing to do, no view
        assert st.partitions[0].position == 0 and b.compacted_start("t", 0) == 0
    finally:
        await b.close()


async def test_dropping_a_topic_stops_its_run_and_leaves_no_blobs(tmp_path: Path) -> None:
    b = await open_broker(tmp_path, compaction_blob_bytes=100)
    try:
        await b.create_topic("gone", partitions=1)
        await put(b, "gone", [(b"k%d" % i, b"v") for i in range(40)])
        held, gate = threading.Event(), threading.Event()

        def hook(step: str) -> None:
            if step.startswith("blob-batch"):
                held.set()
                gate.wait(60)

        b.compaction_hook = hook
        await b.compact("gone")
        assert await asyncio.to_thread(held.wait, 30)
        drop = asyncio.ensure_future(b.drop_topic("gone"))
        await asyncio.sleep(0)
        gate.set()
        await drop
        with b.store.kv.snapshot() as kv:
            assert list(kv.scan("compacted", b"")) == [] and list(kv.scan("compaction", b"")) == []
    finally:
        b.compaction_hook = None
        await b.close()


async def test_a_run_reads_offloaded_blobs_and_large_payloads(tmp_path: Path) -> None:
    """Compaction reads the log through the partition's read path: blobs whose local bytes
    went to the tier, and payloads stored as references, are compacted like the rest,
    without filling the tier's cache (what catch-up readers of the tier read stays)."""
    b = await open_broker(tmp_path, low_watermark=2_000, max_blob_size=3_000)
    try:
        await b.create_topic("offl", partitions=1)
        await b.alter_topic("offl", policies={"large_payload_threshold_bytes": 4_096})
        big = bytes(range(256)) * 40  # 10 KB: stored as its own object
        truth: dict[bytes, bytes] = {}
        for r in range(8):
            pairs = [(b"k%d" % i, b"r%d-" % r + b"x" * 150) for i in range(10)]
            if r == 3:
                pairs.append((b"big", big))
            await put(b, "offl", pairs)
            truth.update(pairs)
        copied = await b.offload_topic("offl", force=True)
        assert copied[0] >= 2
        st = b.tier_status("offl")[0]
        assert st.remote_segments >= 2 and st.first_local_offset > 0
        tier = b.store.tier
        assert tier is not None
        before = tier.cache.stats
        await b.compact("offl", wait=True)
        # the run fetched the offloaded blobs for itself: the tier's cache is as it was
        assert tier.cache.stats == before and tier.stats.fetches >= 2
        got = await compacted(b, "offl")
        assert {k: d for _, k, d in got} == truth
        assert [o for o, _, _ in got] == sorted(o for o, _, _ in got)
    finally:
        await b.close()


async def test_retention_keeps_what_a_run_is_reading(tmp_path: Path) -> None:
    """A run reads the log twice (which offsets survive, then their records): retention
    waits for it, else keys whose latest message it removed in between would vanish
    from the view."""
    b = await open_broker(tmp_path, low_watermark=500, max_blob_size=800)
    held, gate = threading.Event(), threading.Event()
    try:
        await b.create_topic("ret", partitions=1)
        once = [(b"u%d" % i, b"only" + b"z" * 40) for i in range(12)]  # never written again
        await put(b, "ret", once)
        for r in range(6):
            await put(b, "ret", [(b"k%d" % i, b"r%d-" % r + b"y" * 40) for i in range(12)])

        def hook(step: str) -> None:
            if step.startswith("scanned"):
                held.set()
                assert gate.wait(60), "the test never let the run go on"

        b.compaction_hook = hook
        await b.compact("ret")
        assert await asyncio.to_thread(held.wait, 30), "the run never finished its scan"
        await b.alter_topic("ret", retention_bytes=1)
        start = b.actor("ret", 0).start_offset
        await b.run_retention()
        stayed = b.actor("ret", 0).start_offset == start
        gate.set()
        st = await b.compact("ret", wait=True)
        assert st.last_error == ""
        got = {k: d for _, k, d in await compacted(b, "ret")}
        assert got == {**dict(once), **{b"k%d" % i: b"r5-" + b"y" * 40 for i in range(12)}}
        assert stayed, "retention removed offsets the run was reading"
        await b.run_retention()  # the run is over: retention goes on
        assert b.actor("ret", 0).start_offset > start
    finally:
        gate.set()
        b.compaction_hook = None
        await b.close()


async def test_delete_records_trims_the_view_and_a_restart_keeps_it(tmp_path: Path) -> None:
    """Kafka's DeleteRecords deletes the compacted view's records below it too (a key whose
    latest value it deleted is gone), from the call on and after a restart; retention does
    not (the view outlives it), but a trim below where retention left the log still does."""
    b = await open_broker(tmp_path, low_watermark=300, max_blob_size=500)
    try:
        await b.create_topic("dr", partitions=1)
        for r in range(4):  # 10 keys, 4 times over: offsets 30..39 are the latest
            await put(b, "dr", [(b"k%d" % i, b"r%d" % r) for i in range(10)])
        await b.compact("dr", wait=True)
        assert [o for o, _, _ in await compacted(b, "dr")] == list(range(30, 40))
        assert await b.delete_records("dr", 0, 34) == 34
        assert b.compacted_start("dr", 0) == 34 == b.trim_floor("dr", 0)
        got = await compacted(b, "dr")
        assert [(o, k) for o, k, _ in got] == [(o, b"k%d" % (o - 30)) for o in range(34, 40)]
        assert await served(b, "dr") == list(range(34, 40))  # from 0: the floor's batch cut
        await put(b, "dr", [(b"k0", b"r4"), (b"k9", b"r4")])  # 40, 41
        await b.compact("dr", wait=True)  # the next run drops what the trim deleted
        assert b.compaction_status("dr").partitions[0].keys == 7  # k4..k9 and k0 again
    finally:
        await b.close()
    b = await open_broker(tmp_path, low_watermark=300, max_blob_size=500)
    try:
        assert b.trim_floor("dr", 0) == 34
        got = await compacted(b, "dr")
        assert [(o, k, d) for o, k, d in got] == [
            *[(o, b"k%d" % (o - 30), b"r3") for o in range(34, 39)],
            (40, b"k0", b"r4"),
            (41, b"k9", b"r4"),
        ]
        await b.alter_topic("dr", retention_bytes=1)
        await b.run_retention()
        start = b.actor("dr", 0).start_offset
        assert start > 36 and b.compacted_start("dr", 0) == 34  # retention: the view stays
        assert await b.delete_records("dr", 0, 36) == start  # the log is past it already
        assert [o for o, _, _ in await compacted(b, "dr")] == [36, 37, 38, 40, 41]
    finally:
        await b.close()


@pytest.mark.parametrize("step", ["scanned", "blob-batch"])
async def test_a_trim_during_a_run_is_never_undone_by_it(tmp_path: Path, step: str) -> None:
    """A run that read offsets a trim then deletes (held at its step by the hook while the
    trim runs on the event loop) publishes a view that serves none of them."""
    b = await open_broker(tmp_path, compaction_blob_bytes=200, low_watermark=300, max_blob_size=500)
    held, gate = threading.Event(), threading.Event()
    try:
        await b.create_topic("tr", partitions=1)
        once = [(b"u%d" % i, b"only") for i in range(10)]  # 0..9, never written again
        await put(b, "tr", once)
        for r in range(3):  # 10..39
            await put(b, "tr", [(b"k%d" % i, b"r%d" % r) for i in range(10)])

        def hook(s: str) -> None:
            if s.startswith(step) and not held.is_set():
                held.set()
                assert gate.wait(60), "the test never let the run go on"

        b.compaction_hook = hook
        await b.compact("tr")
        assert await asyncio.to_thread(held.wait, 30), f"the run never reached {step}"
        assert await b.delete_records("tr", 0, 35) == 35  # not held back: done at once
        gate.set()
        st = await b.compact("tr", wait=True)
        assert st.last_error == "" and st.partitions[0].position == 40
        got = await compacted(b, "tr")
        assert [(o, k, d) for o, k, d in got] == [
            (o, b"k%d" % (o - 30), b"r2") for o in range(35, 40)
        ]
        assert await served(b, "tr") == list(range(35, 40))
        if step == "scanned":  # the floor was known before the run chose what survives
            assert st.partitions[0].keys == 5
        b.compaction_hook = None
        await b.compact("tr", wait=True)
        assert b.compaction_status("tr").partitions[0].keys == 5
        assert [o for o, _, _ in await compacted(b, "tr")] == list(range(35, 40))
    finally:
        gate.set()
        b.compaction_hook = None
        await b.close()
