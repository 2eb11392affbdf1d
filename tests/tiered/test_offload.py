"""Offload of sealed blobs to the object store (both back ends): byte-for-byte reads
after the local bytes are freed, the state machine's crash leftovers cleaned up,
retention deleting objects, and damaged objects refused, never served."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.storage.conftest import make_batch
from weir.errors import CorruptDataError, TierUnavailableError
from weir.storage.partition import PartitionConfig, PartitionLog
from weir.storage.store import Store
from weir.storage.tiered.manager import OffloadPolicy, TierManager
from weir.storage.tiered.partition_tier import is_remote
from weir.storage.tiered.remote_metadata import SegmentState
from weir.storage.tiered.remote_storage import LocalDirStorage, RemoteStorage, S3Storage
from weir.storage.tiered.segment_format import SEGMENT_SCHEMA, read_rows

CFG = PartitionConfig(low_watermark=20_000, max_blob_size=30_000)
EVERYTHING = OffloadPolicy(threshold_bytes=0)


def fill(log: PartitionLog, batches: int, per: int = 40, producer: str = "p") -> None:
    seq = 1 + (log.last_seq_no(producer) or 0)
    for _ in range(batches):
        log.write(make_batch(per, producer=producer, first_seq=seq, size=200))
        seq += per


def read_all(log: PartitionLog) -> bytes:
    out = []
    pos = log.start_offset
    while pos < log.end_offset:
        res = log.read(pos, 1 << 20)
        out.extend(bytes(c) for c in res.chunks)
        pos = res.next_offset
    return b"".join(out)


def tier(store: Store) -> TierManager:
    assert store.tier is not None
    return store.tier


def open_store(path: Path, storage: RemoteStorage, cache: int = 1 << 20) -> Store:
    return Store(path, sync=False, tier_storage=storage, tier_cache_bytes=cache)


def test_storage_contract(backend: tuple[str, RemoteStorage]) -> None:
    _, s = backend
    info = s.put("segments/a/1.parquet", b"hello world")
    assert info.size == 11
    assert s.get("segments/a/1.parquet") == b"hello world"
    assert s.get("segments/a/1.parquet", 6) == b"world"
    assert s.get("segments/a/1.parquet", 0, 5) == b"hello"
    head = s.head("segments/a/1.parquet")
    assert head is not None and head.size == 11
    assert s.head("segments/nope") is None
    s.put("segments/b/2.parquet", b"x")
    assert [o.key for o in s.list("segments/")] == ["segments/a/1.parquet", "segments/b/2.parquet"]
    s.delete("segments/a/1.parquet")
    s.delete("segments/a/1.parquet")  # already gone: no error
    assert [o.key for o in s.list("segments/")] == ["segments/b/2.parquet"]


def test_offload_frees_local_bytes_and_reads_back_byte_for_byte(
    backend: tuple[str, RemoteStorage], tmp_path: Path
) -> None:
    _, storage = backend
    store = open_store(tmp_path / "d", storage)
    log = store.open_partition(7, CFG, label="t/0")
    fill(log, 30)
    before = read_all(log)
    big = [b for b in log.blobs if not b.is_head]
    assert len(big) >= 4
    local_before = log.local_bytes
    n = tier(store).offload_sync(log, EVERYTHING)
    assert n == len(big)
    assert all(is_remote(b) for b in log.blobs if not b.is_head)
    assert log.local_bytes == local_before - sum(b.size for b in big)
    assert read_all(log) == before
    # every record is COPY_FINISHED and names an object in the store
    recs = tier(store).records()
    assert [r.state for r in recs] == [SegmentState.COPY_FINISHED] * n
    assert sorted(r.object_key for r in recs) == [o.key for o in storage.list("segments/")]
    # the objects are Parquet with the Spark source's columns
    obj = storage.get(recs[0].object_key)
    rows = read_rows(obj, recs[0].first_offset, recs[0].end_offset)
    assert rows.num_rows == recs[0].count
    assert rows.column("offset").to_pylist()[0] == recs[0].first_offset
    assert set(SEGMENT_SCHEMA.names) > set(rows.column_names)
    # reopened: the same bytes, the freed blobs read from the store
    store.close()
    store = open_store(tmp_path / "d", storage)
    log = store.open_partition(7, CFG, label="t/0")
    assert read_all(log) == before
    fill(log, 3)  # writes go on
    assert read_all(log)[: len(before)] == before
    store.close()


def test_local_bytes_bound_and_age_threshold(
    backend: tuple[str, RemoteStorage], tmp_path: Path
) -> None:
    _, storage = backend
    store = open_store(tmp_path / "d", storage)
    log = store.open_partition(1, CFG)
    fill(log, 30, producer="a")
    bound = 60_000
    tier(store).offload_sync(log, OffloadPolicy(threshold_bytes=bound))
    assert log.local_bytes <= bound + CFG.max_blob_size
    assert any(is_remote(b) for b in log.blobs)
    # age: blobs whose newest message is older than the threshold
    newest = max(b.max_written for b in log.blobs if not b.is_head)
    n = tier(store).offload_sync(log, OffloadPolicy(threshold_ms=1), now_ms=newest + 10)
    assert n >= 1
    assert all(is_remote(b) for b in log.blobs if not b.is_head)
    store.close()


def test_deletion_lag_keeps_the_local_copy_until_it_passes(
    backend: tuple[str, RemoteStorage], tmp_path: Path
) -> None:
    _, storage = backend
    store = open_store(tmp_path / "d", storage)
    log = store.open_partition(1, CFG)
    fill(log, 12)
    before = read_all(log)
    policy = OffloadPolicy(threshold_bytes=0, deletion_lag_ms=60_000)
    t0 = tier(store).records()
    assert t0 == []
    now = 10**13
    n = tier(store).offload_sync(log, policy, now_ms=now)
    assert n >= 1 and not any(is_remote(b) for b in log.blobs)  # copied, still local
    assert len(log.remote) == n
    tier(store).offload_sync(log, policy, now_ms=now + 60_001 + 10**9)
    assert all(is_remote(b) for b in log.blobs if not b.is_head)
    assert read_all(log) == before
    store.close()


def test_retention_deletes_offloaded_objects(
    backend: tuple[str, RemoteStorage], tmp_path: Path
) -> None:
    _, storage = backend
    store = open_store(tmp_path / "d", storage)
    log = store.open_partition(
        3, PartitionConfig(low_watermark=20_000, max_blob_size=30_000, retention_bytes=30_000)
    )
    fill(log, 25)
    tier(store).offload_sync(log, EVERYTHING)
    objects = len(list(storage.list("segments/")))
    assert objects >= 4
    dropped = log.apply_retention()
    assert dropped >= 1
    states = [r.state for r in tier(store).records()]
    assert states.count(SegmentState.DELETE_STARTED) >= 1
    deleted = tier(store).expire()
    assert deleted == states.count(SegmentState.DELETE_STARTED)
    left = {o.key for o in storage.list("segments/")}
    assert left == {r.object_key for r in tier(store).records()}
    assert len(left) == objects - deleted
    assert read_all(log)  # what is left reads
    store.close()


def test_crash_leftovers_abandoned_copy_and_orphans_are_cleaned(
    backend: tuple[str, RemoteStorage], tmp_path: Path
) -> None:
    """A copy cut off after its COPY_STARTED record (and maybe its object) is abandoned on
    the next start; an object no record names is an orphan the sweeper removes."""
    _, storage = backend
    store = open_store(tmp_path / "d", storage)
    log = store.open_partition(1, CFG)
    fill(log, 12)
    before = read_all(log)
    b = next(b for b in log.blobs if not b.is_head)
    mgr = tier(store)
    rec = mgr.copy_blob(log, b)  # written and verified; COPY_FINISHED never committed
    storage.put("segments/0000000000000001/stray.parquet", b"left by a crash")
    store.close()
    store = open_store(tmp_path / "d", storage)
    log = store.open_partition(1, CFG)
    mgr = tier(store)
    assert [r.state for r in mgr.records()] == [SegmentState.COPY_STARTED]
    assert not any(is_remote(x) for x in log.blobs)  # the local blob is still there
    mgr.started_ms = 1 << 62  # (as after a real restart: the record predates this process)
    assert mgr.expire() == 1
    assert mgr.records() == []
    assert storage.head(rec.object_key) is None
    assert mgr.sweep() == 1
    assert list(storage.list("segments/")) == []
    assert read_all(log) == before
    store.close()


@pytest.mark.parametrize("damage", ["flip", "truncate", "missing"])
def test_damaged_object_is_refused_never_served(
    backend: tuple[str, RemoteStorage], tmp_path: Path, damage: str
) -> None:
    _, storage = backend
    store = open_store(tmp_path / "d", storage, cache=0)
    log = store.open_partition(1, CFG, label="t/0")
    fill(log, 12)
    tier(store).offload_sync(log, EVERYTHING)
    rec = next(iter(log.remote.values()))
    obj = storage.get(rec.object_key)
    if damage == "flip":
        bad = bytearray(obj)
        bad[len(bad) // 2] ^= 0x40
        storage.put(rec.object_key, bytes(bad))
    elif damage == "truncate":
        storage.put(rec.object_key, obj[: len(obj) // 2])
    else:
        storage.delete(rec.object_key)
    with pytest.raises(CorruptDataError, match="offloaded object"):
        log.read(rec.first_offset, 1 << 20)
    # other offloaded blobs still read
    other = [r for r in log.remote.values() if r is not rec]
    assert other and log.read(other[0].first_offset, 1 << 20).chunks
    store.close()


def test_store_down_reads_fail_retryably_and_writes_go_on(tmp_path: Path) -> None:
    """The S3 server's process killed: reads of offloaded offsets get a retryable error,
    writes go on locally, a copy fails and leaves its blob local; once the store is back
    (its objects restored: moto keeps nothing across a restart) the same reads succeed."""
    from tests.tiered.conftest import S3Server, make_bucket, s3_settings

    srv = S3Server().start()
    store = None
    try:
        make_bucket(srv.endpoint, "down")
        storage = S3Storage(s3_settings(srv, "down"))
        store = open_store(tmp_path / "d", storage, cache=0)
        log = store.open_partition(1, CFG)
        fill(log, 12)
        before = read_all(log)
        tier(store).offload_sync(log, EVERYTHING)
        saved = {o.key: storage.get(o.key) for o in storage.list("segments/")}
        first = next(iter(log.remote.values())).first_offset
        srv.kill()
        with pytest.raises(TierUnavailableError):
            log.read(first, 1 << 20)
        fill(log, 12)  # writes go on locally
        with pytest.raises(TierUnavailableError):  # the copy fails, its blob stays local
            tier(store).offload_sync(log, EVERYTHING)
        assert any(not is_remote(b) and not b.is_head for b in log.blobs)
        assert tier(store).stats.store_errors >= 2
        srv.start()
        make_bucket(srv.endpoint, "down")
        for k, v in saved.items():
            storage.put(k, v)
        assert read_all(log)[: len(before)] == before
        tier(store).expire()  # the failed copy's record goes, then a new copy succeeds
        assert tier(store).offload_sync(log, EVERYTHING) >= 1
        assert all(r.state == SegmentState.COPY_FINISHED for r in tier(store).records())
    finally:
        if store is not None:
            store.close()
        srv.stop()


def test_local_dir_is_the_default_backend_name(tmp_path: Path) -> None:
    assert LocalDirStorage(tmp_path).name == "local"
