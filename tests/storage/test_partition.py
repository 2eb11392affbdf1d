"""PartitionLog behaviour: offsets, dedup, head and compaction, reads, retention, limits, recovery."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.storage.conftest import make_batch
from weir.errors import CorruptDataError, PartitionOverflowError, StorageFullError
from weir.storage import keys
from weir.storage.batch import decode_records, iter_batches
from weir.storage.batch_encoding import encode_batch
from weir.storage.blob import BIG
from weir.storage.incoming import validate_incoming
from weir.storage.partition import PartitionConfig, PartitionLog
from weir.storage.store import Store

SMALL = PartitionConfig(low_watermark=20_000, max_blob_size=32_000, head_merge_fanout=4)


def read_all(log: PartitionLog, start: int = 0) -> list[tuple[int, bytes]]:
    out = []
    pos = start
    while pos < log.end_offset:
        res = log.read(pos, 50_000)
        assert res.chunks, "read made no progress"
        for chunk in res.chunks:
            for bpos, _ in iter_batches(chunk):
                for r in decode_records(chunk, bpos):
                    if r.offset >= pos:
                        out.append((r.offset, r.data))
        pos = res.next_offset
    return out


def test_offsets_are_dense_and_reads_return_what_was_written(store: Store) -> None:
    log = store.open_partition(1, SMALL, label="t/1")
    written = []
    for i in range(30):
        (b,) = make_batch(10, producer="p", first_seq=i * 10 + 1)
        (res,) = log.write([b])
        assert res.offset == i * 10 and res.written == 10 and res.skipped == 0
        written.extend(r.data for r in decode_records(b.buf))
    assert (log.start_offset, log.end_offset) == (0, 300)
    got = read_all(log)
    assert [o for o, _ in got] == list(range(300))
    assert [d for _, d in got] == written


def test_duplicates_are_skipped_whole_and_partly(store: Store) -> None:
    log = store.open_partition(1, SMALL)
    log.write(make_batch(5, producer="p", first_seq=1))
    (res,) = log.write(make_batch(5, producer="p", first_seq=1))
    assert (res.written, res.skipped) == (0, 5)
    (res,) = log.write(make_batch(5, producer="p", first_seq=4))  # 4,5 dup; 6,7,8 new
    assert (res.offset, res.written, res.skipped) == (5, 3, 2)
    assert res.offset_of(0) is None and res.offset_of(2) == 5
    assert log.end_offset == 8
    assert log.last_seq_no("p") == 8
    seqs = [d.split(b":")[1] for _, d in read_all(log)]
    assert seqs == [str(i).encode() for i in range(1, 9)]
    # another producer has its own sequence
    (res,) = log.write(make_batch(2, producer="q", first_seq=1))
    assert res.written == 2
    # no producer id: no dedup
    log.write(make_batch(2, first_seq=1))
    (res,) = log.write(make_batch(2, first_seq=1))
    assert res.written == 2


def test_dedup_within_one_write(store: Store) -> None:
    log = store.open_partition(1, SMALL)
    a = make_batch(3, producer="p", first_seq=1)
    b = make_batch(3, producer="p", first_seq=2)  # 2,3 duplicate a's
    res = log.write(a + b)
    assert [(r.written, r.skipped) for r in res] == [(3, 0), (1, 2)]
    assert log.end_offset == 4


def test_head_compacts_into_big_blobs(store: Store) -> None:
    log = store.open_partition(1, SMALL)
    for i in range(100):
        log.write(make_batch(3, producer="p", first_seq=i * 3 + 1, size=100))
    blobs = log.blobs
    big = [b for b in blobs if b.level == BIG]
    assert big, "the head never compacted"
    assert all(b.size <= SMALL.max_blob_size for b in big)
    assert log.head_bytes < SMALL.low_watermark
    # the head never holds more than fanout-1 blobs per level
    head = [b for b in blobs if b.level != BIG]
    for level in {b.level for b in head}:
        assert sum(1 for b in head if b.level == level) < SMALL.head_merge_fanout
    assert [o for o, _ in read_all(log)] == list(range(300))


def test_big_write_goes_straight_to_big_blobs_in_parts(store: Store) -> None:
    log = store.open_partition(1, SMALL)
    (b,) = make_batch(1000, producer="p", size=100)  # ~104 KB, > max_blob_size: one batch in parts
    log.write([b])
    (blob,) = log.blobs
    assert blob.level == BIG and blob.parts == 4
    assert log.head_bytes == 0
    assert len(read_all(log)) == 1000
    store.close()
    s2 = Store(store.path)
    log2 = s2.open_partition(1, SMALL, verify_all=True)
    assert len(read_all(log2)) == 1000
    s2.close()
    store.kv = s2.kv  # fixture closes again: harmless


def test_read_budget_from_middle_and_upper_bound(store: Store) -> None:
    log = store.open_partition(1, SMALL)
    for i in range(20):
        log.write(make_batch(10, producer="p", first_seq=i * 10 + 1))
    res = log.read(15, max_bytes=1)  # budget smaller than a batch: still one batch
    assert res.first_offset == 10 and res.next_offset == 20
    res = log.read(15, max_bytes=10**9, to_offset=42)
    assert res.first_offset == 10 and res.next_offset == 50  # whole batches: 40..49 holds 42
    res = log.read(200)
    assert res.chunks == [] and res.next_offset == 200
    res = log.read(10, max_bytes=3000)
    n = sum(h.record_count for c in res.chunks for _, h in iter_batches(c))
    assert 10 <= n <= 30


def test_retention_by_size_age_and_important_consumer(store: Store) -> None:
    cfg = PartitionConfig(low_watermark=20_000, max_blob_size=32_000, retention_bytes=50_000)
    log = store.open_partition(1, cfg)
    t0 = 1_000_000
    for i in range(100):
        log.write(make_batch(10, producer=f"p{i}", first_seq=1), now_ms=t0 + i)
    total = log.size_bytes
    # protected by an important consumer at offset 0: nothing goes
    assert log.apply_retention(now_ms=t0 + 1000, protect_from=0) == 0
    dropped = log.apply_retention(now_ms=t0 + 1000, protect_from=500)
    assert dropped > 0 and log.start_offset <= 500
    dropped = log.apply_retention(now_ms=t0 + 1000)
    assert log.size_bytes >= 50_000 and log.size_bytes < total
    start = log.start_offset
    assert start > 0
    # producers whose last message is gone keep their dedup state for producer_ttl_ms
    # after their last write: a late resend is still dropped...
    gone = [pid for pid, st in log.producers.items() if st.offset < start]
    assert gone and len(log.producers) == 100
    late = log.write(make_batch(10, producer=gone[0], first_seq=1), now_ms=t0 + 2000)
    assert (late[0].written, late[0].skipped) == (0, 10)
    # ...and once they have been idle that long they are forgotten; the others stay
    assert cfg.producer_ttl_ms is not None
    log.apply_retention(now_ms=t0 + 1000 + cfg.producer_ttl_ms)
    assert all(st.offset >= start for st in log.producers.values())
    assert gone[0] not in log.producers and "p99" in log.producers
    got = read_all(log, 0)
    assert got[0][0] == start and [o for o, _ in got] == list(range(start, 1000))
    res = log.read(0)
    assert res.first_offset == start  # the gap is visible to the reader
    # by age: a blob goes once its newest batch is older than retention_ms
    log.config = PartitionConfig(low_watermark=20_000, max_blob_size=32_000, retention_ms=1000)
    first = log.blobs[0]
    assert log.apply_retention(now_ms=first.max_written + 1000) == 0
    assert log.apply_retention(now_ms=first.max_written + 1001) >= 1
    assert log.start_offset >= first.end_offset > start
    log.config = PartitionConfig(low_watermark=20_000, max_blob_size=32_000, retention_ms=1)
    log.apply_retention(now_ms=t0 + 10**6)
    assert log.start_offset == log.end_offset == 1000 and log.size_bytes == 0
    # offsets never restart after everything expired, even across a restart
    store.close()
    s2 = Store(store.path)
    log2 = s2.open_partition(1, cfg)
    assert (log2.start_offset, log2.end_offset) == (1000, 1000)
    (r,) = log2.write(make_batch(1, producer="p0", first_seq=1))
    assert r.offset == 1000 and r.written == 1  # p0's state was dropped with its messages
    s2.close()
    store.kv = s2.kv


def test_overflow_refuses_with_retryable_error_and_keeps_data(store: Store) -> None:
    log = store.open_partition(1, PartitionConfig(max_messages=25))
    log.write(make_batch(20, producer="p"))
    with pytest.raises(PartitionOverflowError) as exc:
        log.write(make_batch(10, producer="p", first_seq=21))
    assert exc.value.retryable
    assert log.end_offset == 20 and len(read_all(log)) == 20
    log.write(make_batch(5, producer="p", first_seq=21))
    assert log.end_offset == 25


def test_failed_commit_rolls_back_and_writing_resumes(tmp_path: Path) -> None:
    s = Store(tmp_path / "d", map_size=2 << 20, min_disk_free=0)
    log = s.open_partition(1, PartitionConfig(low_watermark=200_000, max_blob_size=400_000))
    log.write(make_batch(100, producer="p", size=1000))
    before = read_all(log)
    with pytest.raises(StorageFullError) as exc:
        for i in range(100):
            log.write(make_batch(300, producer="p", first_seq=101 + i * 300, size=1000))
    assert exc.value.retryable
    end = log.end_offset
    assert read_all(log)[: len(before)] == before
    # a smaller write still fits after the failed one: the head was rolled back
    (r,) = log.write(make_batch(1, producer="p", first_seq=10**6, size=10))
    assert r.offset == end
    s.close()
    s2 = Store(tmp_path / "d", map_size=2 << 20)
    log2 = s2.open_partition(1, PartitionConfig(low_watermark=200_000, max_blob_size=400_000))
    assert log2.end_offset == end + 1 and len(read_all(log2)) == end + 1
    s2.close()


def test_a_nearly_full_disk_refuses_writes_and_keeps_what_is_stored(tmp_path: Path) -> None:
    """``min_disk_free``: a write that would leave less than the reserve on the file
    system is refused before it is laid out (retryable, saying why), what is stored
    stays readable, and writing resumes once there is room again (here: a smaller
    reserve), also right after a refusal, when the free space was just looked up."""
    s = Store(tmp_path / "d", min_disk_free=0)
    log = s.open_partition(1, SMALL)
    log.write(make_batch(10, producer="p", first_seq=1))
    before = read_all(log)
    st = os.statvfs(tmp_path)
    s.min_disk_free = st.f_bavail * st.f_frsize + (1 << 40)  # a terabyte more than there is
    for i in range(3):  # every write is refused, not only the first
        with pytest.raises(StorageFullError, match="disk nearly full") as exc:
            log.write(make_batch(5, producer="p", first_seq=11 + i * 5))
        assert exc.value.retryable
    assert read_all(log) == before and log.end_offset == 10
    s.min_disk_free = 0
    (r,) = log.write(make_batch(5, producer="p", first_seq=11))
    assert r.offset == 10 and len(read_all(log)) == 15
    s.close()


def test_near_the_reserve_every_write_sees_the_space_taken_just_before(tmp_path: Path) -> None:
    """The free space is looked up at most every 0.1 s while far above the reserve;
    near it, each write looks again: space another file took a moment ago (here 300 MiB
    allocated next to the data) refuses the next write, and comes back when freed."""
    s = Store(tmp_path / "d", min_disk_free=0)
    log = s.open_partition(1, SMALL)
    log.write(make_batch(10, producer="p", first_seq=1))  # the free space looked up
    st = os.statvfs(tmp_path)
    # 100 MiB above the reserve: room for what parallel tests write in between
    s.min_disk_free = st.f_bavail * st.f_frsize - (100 << 20)
    log.write(make_batch(5, producer="p", first_seq=11))
    fd = os.open(tmp_path / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        os.posix_fallocate(fd, 0, 300 << 20)
    finally:
        os.close(fd)
    with pytest.raises(StorageFullError, match="disk nearly full"):
        log.write(make_batch(5, producer="p", first_seq=16))
    (tmp_path / "filler").unlink()
    (r,) = log.write(make_batch(5, producer="p", first_seq=16))
    assert r.offset == 15 and len(read_all(log)) == 20
    s.close()


def test_recovery_rebuilds_head_offsets_and_producers(tmp_path: Path) -> None:
    s = Store(tmp_path / "d")
    logs = [s.open_partition(i, SMALL) for i in range(3)]
    for i in range(40):
        for j, log in enumerate(logs):
            log.write(make_batch(1 + j, producer=f"p{j}", first_seq=i * (1 + j) + 1))
    state = [
        (lg.start_offset, lg.end_offset, dict(lg.producers), read_all(lg), lg.blobs) for lg in logs
    ]
    s.close()
    s2 = Store(tmp_path / "d")
    assert sorted(s2.stored_log_ids()) == [0, 1, 2]
    for i, st in enumerate(state):
        lg = s2.open_partition(i, SMALL)
        assert (lg.start_offset, lg.end_offset, dict(lg.producers), read_all(lg), lg.blobs) == st
    s2.close()


def test_offset_for_time(store: Store) -> None:
    log = store.open_partition(1, SMALL)
    for i in range(50):
        log.write(make_batch(4, producer="p", first_seq=i * 4 + 1), now_ms=10_000 + i * 100)
    assert log.offset_for_time(0) == 0
    assert log.offset_for_time(10_000 + 25 * 100) == 100
    assert log.offset_for_time(10_000 + 25 * 100 - 50) == 100
    assert log.offset_for_time(10**9) == 200


def test_written_at_never_goes_back(store: Store) -> None:
    log = store.open_partition(1, SMALL)
    log.write(make_batch(1, producer="p"), now_ms=5000)
    log.write(make_batch(1, producer="p", first_seq=2), now_ms=4000)  # clock stepped back
    res = log.read(0)
    times = [h.written_at for c in res.chunks for _, h in iter_batches(c)]
    assert times == [5000, 5000]


def test_one_change_at_a_time(store: Store) -> None:
    log = store.open_partition(1, SMALL)
    change = log.prepare_write(make_batch(1))
    with pytest.raises(RuntimeError, match="in flight"):
        log.prepare_write(make_batch(1))
    log.abort(change)
    log.write(make_batch(1))
    assert log.end_offset == 1


def test_corrupt_meta_is_reported(tmp_path: Path) -> None:
    from weir.storage.kv import put

    s = Store(tmp_path / "d")
    log = s.open_partition(7, SMALL, label="orders/7")
    log.write(make_batch(3))
    s.committer.commit(
        [put(keys.PARTITIONS, keys.log_prefix(7), b"\x01" + b"\x00" * 8 + b"\x09" + b"\x00" * 7)]
    )
    s.close()
    s2 = Store(tmp_path / "d")
    with pytest.raises(CorruptDataError, match="orders/7"):
        s2.open_partition(7, SMALL, label="orders/7")
    s2.close()


def test_large_batches_are_sealed_in_place_not_rewritten(store: Store) -> None:
    cfg = PartitionConfig(low_watermark=60_000, max_blob_size=100_000)  # seal size 12,500
    log = store.open_partition(1, cfg)
    written = 0
    for i in range(20):
        (b,) = make_batch(150, producer="p", first_seq=i * 150 + 1, size=100)  # ~16 KB each
        written += len(b.buf)
        log.write([b])
    # every byte went to the KV once: compaction sealed the head blobs where they lay
    assert store.committer.stats.bytes == written
    assert all(b.level == BIG for b in log.blobs[:-3])
    assert [o for o, _ in read_all(log)] == list(range(3000))
    # small batches are still merged into big blobs
    log2 = store.open_partition(2, cfg)
    for i in range(200):
        log2.write(make_batch(1, producer="p", first_seq=i + 1, size=500))
    assert any(b.level == BIG and b.count > 50 for b in log2.blobs)


def test_full_sdk_batches_are_written_once(store: Store) -> None:
    """Default sizes: a batch cut at the SDK's 1 MiB limit is a bit under 1 MiB and must not
    be rewritten by compaction (it was, at 1.84 bytes committed per byte written)."""
    log = store.open_partition(1, PartitionConfig())
    data = [bytes([i]) * 10240 for i in range(102)]  # what fits in one 1 MiB SDK batch
    written = 0
    for i in range(8):  # past the 6 MiB low watermark: compaction runs
        (b,) = validate_incoming([encode_batch(data, producer_id="p", first_seq_no=i * 102 + 1)])
        assert len(b.buf) < 1 << 20
        written += len(b.buf)
        log.write([b])
    assert any(b.level == BIG for b in log.blobs)  # compaction happened
    assert store.committer.stats.bytes == written
    assert [o for o, _ in read_all(log)] == list(range(8 * 102))


@pytest.mark.parametrize(("size", "per_write"), [(100, 1), (100, 4), (1000, 1), (1000, 8)])
def test_small_writes_are_committed_at_most_twice_into_full_big_blobs(
    tmp_path: Path, size: int, per_write: int
) -> None:
    """Issue 14 item 7: 21 MB of small writes made 0.9-1.8 MB "big" blobs and committed 2.9x the
    bytes stored. A byte now goes to the KV once as a head piece and at most once more when
    compaction packs it into a big blob between the low watermark and max_blob_size."""
    cfg = PartitionConfig(low_watermark=60_000, max_blob_size=80_000)  # seal size 8,750
    s = Store(tmp_path / "d", sync=False)  # byte counts do not depend on fsync
    log = s.open_partition(1, cfg)
    seq = 1
    while log.size_bytes < 10 * cfg.max_blob_size:
        log.write(make_batch(per_write, producer="p", first_seq=seq, size=size))
        seq += per_write
    big = [b for b in log.blobs if b.level == BIG]
    assert len(big) >= 8
    assert all(cfg.low_watermark <= b.size <= cfg.max_blob_size for b in big), [b.size for b in big]
    assert s.committer.stats.bytes <= 2 * log.size_bytes
    # what is still in the head was written once; what was compacted, at most twice
    assert log.size_bytes <= s.committer.stats.bytes <= log.size_bytes + sum(b.size for b in big)
    s.close()


def test_default_sizes_small_writes_fill_big_blobs_to_the_low_watermark(tmp_path: Path) -> None:
    """The documented sizes: 10 KB writes end up in big blobs of 6-8 MiB, committed twice."""
    s = Store(tmp_path / "d", sync=False)
    log = s.open_partition(1, PartitionConfig())
    payload = [bytes(10_000)]
    seq = 1
    while log.size_bytes < 15 << 20:
        log.write(validate_incoming([encode_batch(payload, producer_id="p", first_seq_no=seq)]))
        seq += 1
    big = [b for b in log.blobs if b.level == BIG]
    assert len(big) >= 2
    assert all(6 << 20 <= b.size <= 8 << 20 for b in big), [b.size for b in big]
    assert s.committer.stats.bytes <= 2 * log.size_bytes
    s.close()


def test_head_keeps_one_piece_per_write_and_few_segments_in_memory(tmp_path: Path) -> None:
    cfg = PartitionConfig(low_watermark=200_000, max_blob_size=300_000, head_merge_fanout=4)
    s = Store(tmp_path / "d", sync=False)
    log = s.open_partition(1, cfg)
    for i in range(300):
        log.write(make_batch(1, producer="p", first_seq=i + 1, size=200))
    assert all(b.level != BIG for b in log.blobs)  # still all head
    with s.kv.snapshot() as view:
        pieces = sum(1 for _ in view.scan(keys.BLOB_INDEX, keys.log_prefix(1), keys.log_prefix(2)))
    assert pieces == 300  # never rewritten in the KV
    assert len(log.blobs) < 4 * 5  # coalesced in memory: fanout - 1 per level at most
    assert s.committer.stats.bytes == log.size_bytes
    before = read_all(log)
    s.close()
    s2 = Store(tmp_path / "d")
    log2 = s2.open_partition(1, cfg)
    assert read_all(log2) == before and len(log2.blobs) == len(log.blobs)
    s2.close()


def test_trim_moves_the_start_inside_a_blob_and_drops_blobs_below(tmp_path: Path) -> None:
    """Deleting records up to an offset (Kafka's DeleteRecords): the start moves there at
    once, even inside a batch; blobs wholly below go in the same commit; the rest reads
    back, and all of it holds across a restart."""
    store = Store(tmp_path)
    log = store.open_partition(1, SMALL)
    for i in range(100):
        log.write(make_batch(10, producer="p", first_seq=i * 10 + 1))
    blobs = log.blobs
    assert len(blobs) > 2
    cut = blobs[1].first_offset + 3  # inside the second blob, inside a batch
    assert log.trim(cut) == cut
    assert log.start_offset == cut and log.blobs[0] == blobs[1]
    assert [o for o, _ in read_all(log, 0)] == list(range(cut, 1000))
    res = log.read(0)
    assert res.start_offset == res.first_offset == cut  # the batch holding it, cut there
    assert log.offset_for_time(0) == cut
    assert log.trim(cut - 1) == cut  # never backwards
    assert log.trim(10**6) == 1000 and log.blobs == ()  # clamped to the end
    (r,) = log.write(make_batch(5, producer="p", first_seq=1001))
    assert r.offset == 1000
    store.close()
    store = Store(tmp_path)
    log = store.open_partition(1, SMALL, verify_all=True)
    assert (log.start_offset, log.end_offset) == (1000, 1005)
    store.close()


def test_trim_inside_the_first_blob_survives_recovery(tmp_path: Path) -> None:
    store = Store(tmp_path)
    log = store.open_partition(1, SMALL)
    for i in range(60):
        log.write(make_batch(10, producer="p", first_seq=i * 10 + 1))
    first = log.blobs[0]
    log.trim(first.first_offset + 7)
    store.close()
    store = Store(tmp_path)
    log = store.open_partition(1, SMALL, verify_all=True)
    assert log.start_offset == first.first_offset + 7 and log.blobs[0] == first
    assert [o for o, _ in read_all(log, 0)] == list(range(first.first_offset + 7, 600))
    store.close()


def test_trim_inside_a_head_segment_of_several_pieces_survives_recovery(tmp_path: Path) -> None:
    """A head segment coalesces several KV pieces; a trim inside it leaves the pieces
    wholly below the new start stored (they go with the segment): the partition reopens
    with the same start and reads, instead of refusing its index as having a gap."""
    store = Store(tmp_path)
    log = store.open_partition(1, SMALL)
    for i in range(5):
        log.write(make_batch(2, producer="p", first_seq=i * 2 + 1))
    assert log.blobs[0].count > 2  # pieces coalesced into one head segment
    assert log.trim(5) == 5  # past the first two pieces
    store.close()
    store = Store(tmp_path)
    log = store.open_partition(1, SMALL, verify_all=True)
    assert log.start_offset == 5
    assert [o for o, _ in read_all(log, 0)] == list(range(5, 10))
    store.close()
