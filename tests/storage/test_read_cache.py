"""The shared read cache: reads through it equal reads without it, it stays within its
byte bound, it never serves a removed, replaced or damaged blob, and it is shared."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.storage.conftest import make_batch
from weir.errors import CorruptDataError
from weir.storage.batch_encoding import encode_batch
from weir.storage.blob import BIG
from weir.storage.incoming import validate_incoming
from weir.storage.partition import PartitionConfig, PartitionLog, ReadResult
from weir.storage.read_cache import ReadCache
from weir.storage.store import Store

CFG = PartitionConfig(low_watermark=3000, max_blob_size=6000, head_merge_fanout=3)


def joined(res: ReadResult) -> tuple[int, int, bytes]:
    return res.first_offset, res.next_offset, b"".join(bytes(c) for c in res.chunks)


def big_blobs(log: PartitionLog) -> list[int]:
    return [b.first_offset for b in log.blobs if b.level == BIG]


class CacheMachine(RuleBasedStateMachine):
    """The same operations on a store with a small shared cache and on one without."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="weir-cache-"))
        self.capacity = 20_000  # a few big blobs: evictions happen
        self.cached = Store(self.dir / "c", sync=False, read_cache_bytes=self.capacity)
        self.plain = Store(self.dir / "p", sync=False, read_cache_bytes=0)
        self.now = 1_000_000
        self.seq = {1: 0, 2: 0}

    def teardown(self) -> None:
        self.cached.close()
        self.plain.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def logs(self, log_id: int) -> tuple[PartitionLog, PartitionLog]:
        return self.cached.open_partition(log_id, CFG), self.plain.open_partition(log_id, CFG)

    @rule(
        log_id=st.sampled_from([1, 2]),
        sizes=st.lists(st.integers(1, 600), min_size=1, max_size=20),
        fill=st.integers(0, 255),
    )
    def write(self, log_id: int, sizes: list[int], fill: int) -> None:
        self.now += 5
        first = self.seq[log_id] + 1
        data = [bytes([fill, i % 256]) * (n // 2 + 1) for i, n in enumerate(sizes)]
        buf = encode_batch(data, producer_id="p", first_seq_no=first, created_at=self.now)
        self.seq[log_id] += len(sizes)
        for log in self.logs(log_id):
            log.write(validate_incoming([buf]), now_ms=self.now)

    @rule(log_id=st.sampled_from([1, 2]), keep=st.integers(0, 30_000))
    def retention(self, log_id: int, keep: int) -> None:
        for log in self.logs(log_id):
            log.config = PartitionConfig(
                low_watermark=CFG.low_watermark,
                max_blob_size=CFG.max_blob_size,
                head_merge_fanout=CFG.head_merge_fanout,
                retention_bytes=keep,
            )
            log.apply_retention(now_ms=self.now)
            log.config = CFG
        c, p = self.logs(log_id)
        assert c.start_offset == p.start_offset

    @rule(log_id=st.sampled_from([1, 2]))
    def drop_and_recreate(self, log_id: int) -> None:
        """The same log id comes back with new data at the same offsets."""
        for store in (self.cached, self.plain):
            store.committer.commit(store.drop_partition_ops(log_id))
            store.forget(log_id)
        self.seq[log_id] = 0

    @rule()
    def reopen(self) -> None:
        self.cached.close()
        self.cached = Store(self.dir / "c", sync=False, read_cache_bytes=self.capacity)

    @precondition(lambda self: True)
    @rule(
        log_id=st.sampled_from([1, 2]),
        where=st.floats(0, 1),
        budget=st.integers(1, 9000),
        span=st.one_of(st.none(), st.integers(1, 200)),
        times=st.integers(1, 3),
    )
    def read(self, log_id: int, where: float, budget: int, span: int | None, times: int) -> None:
        c, p = self.logs(log_id)
        assert (c.start_offset, c.end_offset) == (p.start_offset, p.end_offset)
        if c.end_offset == c.start_offset:
            return
        frm = c.start_offset + int(where * (c.end_offset - c.start_offset - 1))
        to = None if span is None else frm + span
        expected = joined(p.read(frm, budget, to))
        for _ in range(times):  # a miss, then hits
            assert joined(c.read(frm, budget, to)) == expected

    @invariant()
    def within_the_byte_bound(self) -> None:
        s = self.cached.read_cache.stats
        assert 0 <= s.bytes <= self.capacity

    @invariant()
    def whole_partitions_read_the_same(self) -> None:
        for log_id in (1, 2):
            c, p = self.logs(log_id)
            pos = c.start_offset
            while pos < c.end_offset:
                a, b = c.read(pos, 7000), p.read(pos, 7000)
                assert joined(a) == joined(b)
                pos = a.next_offset


CacheMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestReadCacheEqualsUncachedReads = CacheMachine.TestCase


def fill_big(log: PartitionLog, n: int, *, tag: bytes = b"", seq: int = 1) -> None:
    for i in range(n):
        log.write(make_batch(10, producer="p", first_seq=seq + 10 * i, size=200, tag=tag))


def reopened(s: Store, path: Path) -> tuple[Store, PartitionLog]:
    """The store closed and opened again: its read cache starts empty."""
    s.close()
    s = Store(path, sync=False, read_cache_bytes=1 << 20)
    return s, s.open_partition(1, CFG)


def test_blobs_made_in_memory_are_cached_as_they_commit(tmp_path: Path) -> None:
    """A big blob sealed from the head (bytes checked as they came in) enters the cache
    when it commits: a reader tailing the partition never fetches it back from LMDB,
    and gets the same bytes as a reader after a restart, which checks them."""
    s = Store(tmp_path / "d", sync=False, read_cache_bytes=1 << 20)
    log = s.open_partition(1, CFG)
    fill_big(log, 12)
    blobs = big_blobs(log)
    assert len(blobs) >= 3 and s.read_cache.stats.blobs == len(blobs)
    tailing = [joined(log.read(o, 4000)) for o in range(0, log.end_offset, 7)]
    stats = s.read_cache.stats
    assert stats.misses == 0 and stats.hits > 0
    s, log = reopened(s, tmp_path / "d")
    assert [joined(log.read(o, 4000)) for o in range(0, log.end_offset, 7)] == tailing
    assert s.read_cache.stats.misses == len(blobs)
    s.close()


def test_readers_share_verified_blobs(tmp_path: Path) -> None:
    s = Store(tmp_path / "d", sync=False, read_cache_bytes=1 << 20)
    log = s.open_partition(1, CFG)
    fill_big(log, 12)
    blobs = big_blobs(log)
    s, log = reopened(s, tmp_path / "d")  # blobs as stored, not as just written
    assert len(blobs) >= 3
    for _consumer in range(10):  # ten consumers replaying the partition
        pos = 0
        while pos < log.end_offset:
            pos = log.read(pos, 4000).next_offset
    stats = s.read_cache.stats
    assert stats.misses == len(blobs)  # each big blob read and checked once
    assert stats.hits >= 9 * len(blobs)
    assert stats.blobs == len(blobs) and stats.evictions == 0
    # a second store (another data directory) has a cache of its own
    s2 = Store(tmp_path / "e", sync=False)
    assert s2.read_cache is not s.read_cache and s2.read_cache.stats.blobs == 0
    s2.close()
    s.close()


def test_byte_bound_holds_with_many_partitions(tmp_path: Path) -> None:
    capacity = 15_000
    s = Store(tmp_path / "d", sync=False, read_cache_bytes=capacity)
    logs = [s.open_partition(i, CFG) for i in range(4)]
    for log in logs:
        fill_big(log, 8)
    for _ in range(2):
        for log in logs:
            pos = 0
            while pos < log.end_offset:
                pos = log.read(pos, 3000).next_offset
                assert s.read_cache.stats.bytes <= capacity
    stats = s.read_cache.stats
    assert stats.evictions > 0 and 0 < stats.bytes <= capacity
    s.close()


def test_blob_larger_than_the_cache_is_read_uncached(tmp_path: Path) -> None:
    s = Store(tmp_path / "d", sync=False, read_cache_bytes=1000)
    log = s.open_partition(1, CFG)
    fill_big(log, 4)
    last_big = [b for b in log.blobs if b.level == BIG][-1]
    res = log.read(0, 1 << 20, last_big.end_offset)
    assert res.next_offset == last_big.end_offset
    assert all(isinstance(c, bytes) for c in res.chunks)  # checked and copied out
    assert s.read_cache.stats.blobs == 0 and s.read_cache.stats.bytes == 0
    s.close()


def test_retention_discards_cached_blobs(tmp_path: Path) -> None:
    s = Store(tmp_path / "d", sync=False, read_cache_bytes=1 << 20)
    log = s.open_partition(1, CFG)
    fill_big(log, 12)
    pos = 0
    while pos < log.end_offset:
        pos = log.read(pos, 1 << 20).next_offset
    cached_before = s.read_cache.stats.blobs
    first = log.blobs[0]
    assert (log._cache_owner, first.first_offset, first.count) in s.read_cache
    log.config = PartitionConfig(
        low_watermark=CFG.low_watermark, max_blob_size=CFG.max_blob_size, retention_bytes=1
    )
    dropped = log.apply_retention()
    assert dropped >= 1
    assert (log._cache_owner, first.first_offset, first.count) not in s.read_cache
    assert s.read_cache.stats.blobs < cached_before
    s.close()


def test_dropped_and_recreated_partition_never_sees_old_bytes(tmp_path: Path) -> None:
    """Same log id, same offsets, same blob extents, other bytes: the key must not alias."""
    s = Store(tmp_path / "d", sync=False, read_cache_bytes=1 << 20)
    log = s.open_partition(7, CFG)
    fill_big(log, 8, tag=b"old-data-")
    old = joined(log.read(0, 1 << 20))
    assert b"old-data-" in old[2]
    s.committer.commit(s.drop_partition_ops(7))
    s.forget(7)
    assert s.read_cache.stats.blobs == 0  # forgotten with the partition
    log = s.open_partition(7, CFG)
    fill_big(log, 8, tag=b"new-data-")
    new = joined(log.read(0, 1 << 20))
    assert new[:2] == old[:2] and len(new[2]) == len(old[2])  # same extents
    assert b"old-data-" not in new[2] and b"new-data-" in new[2]
    s.close()


def test_cache_keys_of_two_logs_never_alias() -> None:
    cache = ReadCache(1 << 20)
    owners = {cache.new_owner() for _ in range(100)}
    assert len(owners) == 100


MARKER = b"<<this-exact-message-will-be-damaged>>"


def test_damaged_blob_is_detected_on_first_read_and_never_cached(tmp_path: Path) -> None:
    path = tmp_path / "d"
    cfg = PartitionConfig(low_watermark=20_000, max_blob_size=40_000)  # ~10 batches a blob
    s = Store(path)
    log = s.open_partition(3, cfg, label="orders/3")
    offset = -1
    for i in range(40):
        tag = MARKER if i == 21 else b""
        (b,) = make_batch(10, producer="p", first_seq=i * 10 + 1, size=200, tag=tag)
        (r,) = log.write([b])
        if tag:
            offset = r.offset
    damaged = next(b for b in log.blobs if b.first_offset <= offset < b.end_offset)
    assert damaged.level == BIG and damaged.first_offset < offset
    s.close()
    f = path / "kv" / "data.mdb"
    raw = bytearray(f.read_bytes())
    pos = raw.find(MARKER)
    assert pos >= 0
    while pos >= 0:
        raw[pos + 10] ^= 0x20
        pos = raw.find(MARKER, pos + 1)
    f.write_bytes(bytes(raw))

    s = Store(path, read_cache_bytes=1 << 20)
    log = s.open_partition(3, cfg, label="orders/3")
    key = (log._cache_owner, damaged.first_offset, damaged.count)
    for _ in range(2):
        with pytest.raises(CorruptDataError) as exc:
            log.read(offset, 1 << 20)
        assert exc.value.offset == offset and "orders/3" in str(exc.value)
        assert key not in s.read_cache
    # the undamaged batches before it in the same blob are still served (checked as read)
    res = log.read(damaged.first_offset, 1)
    assert res.chunks and res.next_offset <= offset
    assert key not in s.read_cache
    # other blobs are cached as usual
    last_big = [b for b in log.blobs if b.level == BIG][-1]
    assert last_big.first_offset != damaged.first_offset
    log.read(last_big.first_offset, 1)
    assert (log._cache_owner, last_big.first_offset, last_big.count) in s.read_cache
    s.close()


def test_cached_reads_are_zero_copy_views_of_one_verified_copy(tmp_path: Path) -> None:
    s = Store(tmp_path / "d", sync=False, read_cache_bytes=1 << 20)
    log = s.open_partition(1, CFG)
    fill_big(log, 6, tag=os.urandom(8))
    s, log = reopened(s, tmp_path / "d")
    a = log.read(0, 500)
    b = log.read(0, 500)
    assert isinstance(a.chunks[0], memoryview) and a.chunks[0].obj is b.chunks[0].obj
    assert s.read_cache.stats.hits == 1 and s.read_cache.stats.misses == 1
    s.close()


def test_blobs_packed_from_the_head_are_indexed_without_parsing_their_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big blob packed from the head is indexed from where its batches were placed:
    no header is parsed on the event loop (6 MiB of small batches took 0.15 s to parse), and the index is the one a full check of the stored bytes gives. Batches
    re-sent in part (their duplicates cut off, so their sizes change) are placed too."""
    from weir.storage import partition_reads
    from weir.storage.blob_reads import index_blob

    def no_parsing(data: bytes, b: object) -> None:
        raise AssertionError("a blob packed from the head was parsed to index it")

    monkeypatch.setattr(partition_reads, "index_written", no_parsing)
    s = Store(tmp_path / "d", sync=False, read_cache_bytes=1 << 20)
    plain = Store(tmp_path / "p", sync=False, read_cache_bytes=0)
    logs = [s.open_partition(1, CFG), plain.open_partition(1, CFG)]
    seq = 20
    for i in range(40):
        n = 1 + i % 4
        batches = [
            make_batch(1 + (i + k) % 5, producer="p", first_seq=seq + k * 5) for k in range(n)
        ]
        if i % 3 == 0:  # two batches again: the first whole, the other from its middle
            batches[:0] = [
                make_batch(5, producer="p", first_seq=seq - 10),
                make_batch(5, producer="p", first_seq=seq - 3),
            ]
        incoming = [b for bs in batches for b in bs]
        for log in logs:
            log.write(incoming, now_ms=1_000_000 + i)
        seq += n * 5
    cached, uncached = logs
    blobs = [b for b in cached.blobs if b.level == BIG]
    assert len(blobs) >= 3 and s.read_cache.stats.blobs == len(blobs)
    for b in blobs:
        entry = s.read_cache.peek((cached._cache_owner, b.first_offset, b.count))
        assert entry is not None
        assert (entry.offsets, entry.starts) == index_blob(entry.data, b, "1")
    pos = cached.start_offset
    while pos < cached.end_offset:
        a, z = cached.read(pos, 700), uncached.read(pos, 700)
        assert joined(a) == joined(z)
        pos = a.next_offset
    assert s.read_cache.stats.misses == 0
    # after a restart the head's pieces are read back from the KV and checked: that check
    # gives their batches' places, so the next packing needs no parsing either
    s, log = reopened(s, tmp_path / "d")
    for i in range(12):
        incoming = make_batch(3, producer="p", first_seq=seq + 3 * i)
        for lg in (log, uncached):
            lg.write(incoming, now_ms=2_000_000 + i)
    pos = log.start_offset
    while pos < log.end_offset:
        a, z = log.read(pos, 700), uncached.read(pos, 700)
        assert joined(a) == joined(z)
        pos = a.next_offset
    assert s.read_cache.stats.blobs >= 1
    s.close()
    plain.close()


def test_a_read_from_deep_inside_a_head_segment_starts_at_its_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the head's pieces coalesce, a reader tailing the partition reads from
    thousands of batches deep in one segment: it starts at its batch (found by bisection)
    instead of parsing every header before it, and reads what a walk of every header
    from the segment's start reads."""
    from weir.storage import blob_reads

    cfg = PartitionConfig(low_watermark=4 << 20, head_merge_fanout=8)
    s = Store(tmp_path / "d", sync=False, read_cache_bytes=0)
    log = s.open_partition(1, cfg)
    for i in range(600):  # 600 pieces of 3 batches: segments of up to 512 pieces
        batches = [make_batch(1, producer="p", first_seq=1 + 3 * i + k) for k in range(3)]
        log.write([b for bs in batches for b in bs], now_ms=1_000_000 + i)
    deepest = max(log.blobs, key=lambda b: b.count)
    assert deepest.level < BIG and deepest.count >= 512 * 3
    parsed = 0
    parse = blob_reads.parse_header

    def counted(buf: bytes | memoryview, pos: int = 0) -> object:
        nonlocal parsed
        parsed += 1
        return parse(buf, pos)

    monkeypatch.setattr(blob_reads, "parse_header", counted)
    offsets = [deepest.end_offset - 1, deepest.first_offset + deepest.count // 2]
    got = [joined(log.read(o, 300)) for o in offsets]
    assert parsed <= 2 * 4, f"{parsed} headers parsed for two short reads"
    monkeypatch.undo()
    s.close()
    s = Store(tmp_path / "d", sync=False, read_cache_bytes=0)
    log = s.open_partition(1, cfg)
    assert [joined(log.read(o, 300)) for o in offsets] == got  # places found again
    for seg in log._head.values():  # forgotten: every read walks from the start
        seg.batches = seg.starts = None
    assert [joined(log.read(o, 300)) for o in offsets] == got
    s.close()
