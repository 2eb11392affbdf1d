"""Objects packing several blobs (``[tier] object_bytes``), on both back ends: consecutive
blobs go into one Parquet object, one row group each; the broker reads one blob back by
its column chunk's byte range (never the whole object); a partly retained object stays
until its last blob goes; a copy cut off midway, and a damaged object, are handled as
for one-blob objects (local copy or verified object, never neither; never served)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.tiered.test_offload import fill, open_store, read_all, tier
from weir.errors import CorruptDataError
from weir.storage.partition import PartitionConfig
from weir.storage.tiered.manager import OffloadPolicy
from weir.storage.tiered.partition_tier import is_remote
from weir.storage.tiered.remote_metadata import SegmentState
from weir.storage.tiered.remote_storage import ObjectInfo, RemoteStorage
from weir.storage.tiered.segment_format import read_rows

CFG = PartitionConfig(low_watermark=20_000, max_blob_size=30_000)
# objects of about three blobs of ~30 KB; a last smaller object waits unless flushed
PACK = OffloadPolicy(threshold_bytes=0, object_bytes=100_000, flush=True)


class Recorded:
    """The real store, with the byte ranges asked of it written down (what a read costs)."""

    def __init__(self, inner: RemoteStorage) -> None:
        self.inner = inner
        self.name = inner.name
        self.gets: list[tuple[str, int, int | None]] = []

    def put(self, key: str, data: bytes) -> ObjectInfo:
        return self.inner.put(key, data)

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        self.gets.append((key, start, end))
        return self.inner.get(key, start, end)

    def head(self, key: str) -> ObjectInfo | None:
        return self.inner.head(key)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self.inner.list(prefix)

    def describe(self) -> dict[str, str]:
        return self.inner.describe()


@pytest.fixture
def recorded(backend: tuple[str, RemoteStorage]) -> Recorded:
    return Recorded(backend[1])


def objects(storage: Any) -> list[str]:
    return [o.key for o in storage.list("segments/")]


def test_consecutive_blobs_are_packed_and_read_back_by_range(
    recorded: Recorded, tmp_path: Path
) -> None:
    store = open_store(tmp_path / "d", recorded, cache=0)
    log = store.open_partition(7, CFG, label="t/0")
    fill(log, 40)
    before = read_all(log)
    big = [b for b in log.blobs if not b.is_head]
    assert len(big) >= 6
    assert tier(store).offload_sync(log, PACK) == len(big)
    assert all(is_remote(b) for b in log.blobs if not b.is_head)
    recs = sorted(log.remote.values(), key=lambda r: r.first_offset)
    keys = objects(recorded)
    assert len(keys) < len(recs) and {r.object_key for r in recs} == set(keys)
    for key in keys:
        mine = [r for r in recs if r.object_key == key]
        assert sum(r.blob_size for r in mine) <= PACK.object_bytes or len(mine) == 1
        # one row group per blob, in offset order: Spark's columns for every offset
        data = recorded.inner.get(key)
        md = pq.ParquetFile(pa.BufferReader(data)).metadata
        assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [
            r.count for r in mine
        ]
        assert [r.row_group for r in mine] == list(range(len(mine)))
        rows = read_rows(data, mine[0].first_offset, mine[-1].end_offset)
        assert rows.column("offset").to_pylist() == list(
            range(mine[0].first_offset, mine[-1].end_offset)
        )
        assert all(r.object_offsets == (mine[0].first_offset, mine[-1].end_offset) for r in mine)
    # the broker reads each blob by its column chunk's range (and each footer once), never
    # a whole object
    recorded.gets.clear()
    assert read_all(log) == before
    whole = [g for g in recorded.gets if g[1] == 0 and g[2] is None]
    assert not whole, whole
    chunks = {(r.object_key, r.chunk_start, r.chunk_end) for r in recs}
    assert chunks <= set(recorded.gets)
    # reopened: the records load, the same bytes come back
    store.close()
    store = open_store(tmp_path / "d", recorded)
    log = store.open_partition(7, CFG, label="t/0")
    assert read_all(log) == before
    store.close()


def test_a_last_object_under_the_target_waits_unless_flushed(
    recorded: Recorded, tmp_path: Path
) -> None:
    store = open_store(tmp_path / "d", recorded)
    log = store.open_partition(1, CFG)
    fill(log, 40)
    now = max(b.max_written for b in log.blobs) + 1
    waiting = OffloadPolicy(threshold_bytes=0, object_bytes=10_000_000)
    assert tier(store).offload_sync(log, waiting, now_ms=now) == 0  # under the target
    assert objects(recorded) == []
    # once its oldest blob waited object_wait_ms, it goes anyway, as one object
    n = tier(store).offload_sync(log, waiting, now_ms=now + waiting.object_wait_ms + 1)
    assert n >= 6 and len(objects(recorded)) == 1
    store.close()


def test_partial_retention_keeps_the_object_until_its_last_blob_goes(
    recorded: Recorded, tmp_path: Path
) -> None:
    store = open_store(tmp_path / "d", recorded)
    cfg = PartitionConfig(low_watermark=20_000, max_blob_size=30_000, retention_bytes=10**9)
    log = store.open_partition(3, cfg)
    fill(log, 40)
    tier(store).offload_sync(log, PACK)
    recs = sorted(log.remote.values(), key=lambda r: r.first_offset)
    first_obj = recs[0].object_key
    mine = [r for r in recs if r.object_key == first_obj]
    assert len(mine) >= 2
    # retention takes the first blob of the first object only
    log.config = PartitionConfig(
        low_watermark=20_000,
        max_blob_size=30_000,
        retention_bytes=log.size_bytes - mine[0].blob_size,
    )
    assert log.apply_retention() == 1
    assert tier(store).expire() == 0  # its record goes, the object stays for the others
    assert first_obj in objects(recorded)
    states = {(r.first_offset, r.object_key): r.state for r in tier(store).records()}
    assert (mine[0].first_offset, first_obj) not in states
    assert log.start_offset == mine[1].first_offset
    # what is left of the object reads, by range
    got = log.read(mine[1].first_offset, 1 << 20)
    assert got.chunks and got.first_offset == mine[1].first_offset
    # retention takes the rest of the object: now it is deleted, and only it
    log.config = PartitionConfig(
        low_watermark=20_000,
        max_blob_size=30_000,
        retention_bytes=log.size_bytes - sum(r.blob_size for r in mine[1:]),
    )
    assert log.apply_retention() == len(mine) - 1
    assert tier(store).expire() == 1
    left = objects(recorded)
    assert first_obj not in left
    assert set(left) == {r.object_key for r in tier(store).records()}
    assert tier(store).sweep() == 0
    assert read_all(log)
    store.close()


def test_crash_during_a_multi_blob_offload_leaves_local_copy_or_verified_object(
    recorded: Recorded, tmp_path: Path
) -> None:
    """Cut off after the object was written and verified and only its first blob's
    COPY_FINISHED committed: on the next start the others are abandoned, the object stays
    for the first, the rest are still local and copied again into a new object."""
    store = open_store(tmp_path / "d", recorded)
    log = store.open_partition(1, CFG)
    fill(log, 20)
    before = read_all(log)
    mgr = tier(store)
    group = mgr.groups(log, PACK, 0)[0]
    assert len(group) >= 2
    recs = mgr.copy_blobs(log, group, True)
    change = log.prepare_copy_finished(recs[0], True, 0)
    assert change is not None
    log.commit_change(change)
    store.close()  # "crash": the other records stay COPY_STARTED
    store = open_store(tmp_path / "d", recorded)
    log = store.open_partition(1, CFG)
    mgr = tier(store)
    states = sorted(r.state for r in mgr.records())
    assert states == sorted(
        [SegmentState.COPY_FINISHED] + [SegmentState.COPY_STARTED] * (len(group) - 1)
    )
    assert is_remote(log.blobs[0]) and not any(is_remote(b) for b in log.blobs[1:])
    mgr.started_ms = 1 << 62  # (as after a real restart: the records predate this process)
    assert mgr.expire() == 0  # the abandoned records go; the object is the first blob's
    assert [r.state for r in mgr.records()] == [SegmentState.COPY_FINISHED]
    assert objects(recorded) == [recs[0].object_key]
    assert mgr.sweep() == 0
    assert read_all(log) == before
    # the blobs left local are copied again, into a new object
    mgr.started_ms = 0
    assert mgr.offload_sync(log, PACK) >= len(group) - 1
    assert all(is_remote(b) for b in log.blobs if not b.is_head)
    assert read_all(log) == before
    store.close()


def test_a_failed_multi_blob_copy_is_abandoned_whole(recorded: Recorded, tmp_path: Path) -> None:
    """The store refuses the object: every record of the copy is let go, the blobs stay
    local, and expiry plus the sweeper leave nothing behind."""
    store = open_store(tmp_path / "d", recorded)
    log = store.open_partition(1, CFG)
    fill(log, 20)
    mgr = tier(store)
    group = mgr.groups(log, PACK, 0)[0]

    def refuse(key: str, data: bytes) -> ObjectInfo:
        recorded.inner.put(key, data[: len(data) // 2])  # a torn write the store acked
        return ObjectInfo(key, len(data), "", 0)

    recorded.put = refuse  # type: ignore[method-assign]
    with pytest.raises(Exception, match="reads back"):
        mgr.copy_blobs(log, group, True)
    assert {r.state for r in mgr.records()} == {SegmentState.DELETE_STARTED}
    assert mgr.expire() == 1
    assert mgr.records() == [] and objects(recorded) == []
    assert not any(is_remote(b) for b in log.blobs)
    store.close()


@pytest.mark.parametrize("damage", ["chunk", "footer", "truncate"])
def test_a_damaged_packed_object_is_refused_never_served(
    recorded: Recorded, tmp_path: Path, damage: str
) -> None:
    store = open_store(tmp_path / "d", recorded, cache=0)
    log = store.open_partition(1, CFG, label="t/0")
    fill(log, 20)
    tier(store).offload_sync(log, PACK)
    recs = sorted(log.remote.values(), key=lambda r: r.first_offset)
    rec = recs[1]
    assert rec.packed
    obj = bytearray(recorded.inner.get(rec.object_key))
    if damage == "chunk":
        obj[(rec.chunk_start + rec.chunk_end) // 2] ^= 0x40
    elif damage == "footer":
        obj[rec.footer_start + 10] ^= 0x40
    else:
        obj = obj[: rec.chunk_end - 1]
    recorded.inner.put(rec.object_key, bytes(obj))
    tier(store)._footers.clear()  # (a fresh process: the footer is fetched again)
    with pytest.raises(CorruptDataError, match="offloaded object"):
        log.read(rec.first_offset, 1 << 20)
    # blobs of other objects still read
    other = [r for r in recs if r.object_key != rec.object_key]
    assert other and log.read(other[0].first_offset, 1 << 20).chunks
    store.close()


def test_a_range_past_the_end_is_no_bytes(backend: tuple[str, RemoteStorage]) -> None:
    """Both back ends answer a range that starts past a (truncated) object's end with no
    bytes, as a file read does: the caller's length check then calls it damaged."""
    _, s = backend
    s.put("segments/x/short.parquet", b"0123456789")
    assert s.get("segments/x/short.parquet", 4, 8) == b"4567"
    assert s.get("segments/x/short.parquet", 8, 20) == b"89"
    assert s.get("segments/x/short.parquet", 12, 20) == b""
