"""A partition's transaction state: batches in open transactions, markers, the last stable
offset, what read-committed and read-uncommitted readers get, recovery and retention."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.storage.conftest import make_batch
from weir.errors import BatchFormatError
from weir.storage.batch import FLAG_CONTROL, decode_records, iter_batches
from weir.storage.incoming import validate_incoming
from weir.storage.partition import PartitionConfig, PartitionLog
from weir.storage.store import Store
from weir.storage.txn_state import marker_batch, parse_marker_record

SMALL = PartitionConfig(low_watermark=20_000, max_blob_size=32_000, head_merge_fanout=4)


def seen(log: PartitionLog, *, committed: bool, control: bool = False) -> list[bytes]:
    """Every record a reader gets, as b"producer:seq" (markers as b"<marker>")."""
    out: list[bytes] = []
    pos = log.start_offset
    stop = log.stable_offset if committed else log.end_offset
    while pos < stop:
        res = log.read(pos, 3000, committed=committed, control=control)
        assert res.next_offset > pos, "read made no progress"
        for chunk in res.chunks:
            for bpos, h in iter_batches(chunk):
                for r in decode_records(chunk, bpos):
                    if r.offset < pos:
                        continue
                    if h.flags & FLAG_CONTROL:
                        out.append(b"<marker>")
                    else:
                        out.append(b":".join(r.data.split(b":")[:2]))
        pos = res.next_offset
    return out


def test_open_transaction_holds_the_stable_offset_and_commit_releases_it(store: Store) -> None:
    log = store.open_partition(1, SMALL)
    log.write(make_batch(2, producer="a"))  # a:1 a:2 at 0..1
    log.write(make_batch(3, producer="t", first_seq=1), txn_ids=[7])  # txn 7 at 2..4
    log.write(make_batch(1, producer="a", first_seq=3))  # a:3 at 5, after the open txn
    assert log.stable_offset == 2 and log.end_offset == 6
    assert seen(log, committed=True) == [b"a:1", b"a:2"]
    assert seen(log, committed=False) == [b"a:1", b"a:2", b"t:1", b"t:2", b"t:3", b"a:3"]
    change = log.prepare_marker(7, True)
    assert change is not None
    log._commit(change)
    assert log.end_offset == 7 and log.stable_offset == 7
    want = [b"a:1", b"a:2", b"t:1", b"t:2", b"t:3", b"a:3"]
    assert seen(log, committed=True) == want
    assert seen(log, committed=False) == want  # the marker is never sent to readers
    assert seen(log, committed=False, control=True) == [*want, b"<marker>"]
    # committed seq_nos count for dedup from now on, outside any transaction too
    assert log.last_seq_no("t") == 3
    (res,) = log.write(make_batch(3, producer="t", first_seq=1))
    assert res.skipped == 3


def test_abort_hides_the_batches_from_read_committed_only(store: Store) -> None:
    log = store.open_partition(1, SMALL)
    log.write(make_batch(2, producer="t"), txn_ids=[1])
    log.write(make_batch(1, producer="a"))
    log.write(make_batch(2, producer="t", first_seq=3), txn_ids=[1])
    change = log.prepare_marker(1, False)
    assert change is not None
    log._commit(change)
    assert log.stable_offset == log.end_offset == 6
    assert seen(log, committed=True) == [b"a:1"]
    assert seen(log, committed=False) == [b"t:1", b"t:2", b"a:1", b"t:3", b"t:4"]
    # an aborted transaction's seq_nos may be written again (a retry in a new transaction)
    assert log.last_seq_no("t") is None
    (res,) = log.write(make_batch(4, producer="t"), txn_ids=[2])
    assert (res.written, res.skipped) == (4, 0)
    (m,) = log.txns.aborted_between(0, log.end_offset)
    assert (m.txn_id, m.first_offset, m.offset, m.ranges) == (1, 0, 5, ((0, 2), (3, 5)))


def test_dedup_within_a_transaction_and_against_committed_state(store: Store) -> None:
    log = store.open_partition(1, SMALL)
    log.write(make_batch(3, producer="p"))  # p:1..3 committed outside transactions
    (res,) = log.write(make_batch(5, producer="p"), txn_ids=[9])  # 1..3 known already
    assert (res.written, res.skipped) == (2, 3)
    (res,) = log.write(make_batch(5, producer="p"), txn_ids=[9])  # a resend inside the txn
    assert (res.written, res.skipped) == (0, 5)
    assert log.last_seq_no("p") == 3 and log.last_seq_no("p", 9) == 5


def test_read_committed_skips_whole_reads_of_aborted_data(store: Store) -> None:
    """A read budget that ends inside aborted batches still moves on (no empty loop)."""
    log = store.open_partition(1, SMALL)
    for i in range(10):
        log.write(make_batch(5, producer="t", first_seq=1 + 5 * i, size=200), txn_ids=[3])
    change = log.prepare_marker(3, False)
    assert change is not None
    log._commit(change)
    log.write(make_batch(1, producer="a"))
    res = log.read(0, 300, committed=True)
    assert [r.data.split(b":")[0] for c in res.chunks for r in decode_records(c)] == [b"a"]
    assert seen(log, committed=True) == [b"a:1"]


def test_recovery_rebuilds_open_transactions_markers_and_aborted_ranges(tmp_path: Path) -> None:
    s = Store(tmp_path / "d")
    log = s.open_partition(1, SMALL)
    log.write(make_batch(2, producer="x"), txn_ids=[1])
    log.write(make_batch(2, producer="y"), txn_ids=[2])
    log.write(make_batch(2, producer="x", first_seq=3), txn_ids=[1])
    log._commit(log.prepare_marker(1, False))  # type: ignore[arg-type]
    log.write(make_batch(1, producer="z"), txn_ids=[4])
    log._commit(log.prepare_marker(4, True))  # type: ignore[arg-type]
    before = (log.stable_offset, seen(log, committed=True), seen(log, committed=False))
    s.close()
    s = Store(tmp_path / "d")
    log = s.open_partition(1, SMALL)
    assert (log.stable_offset, seen(log, committed=True), seen(log, committed=False)) == before
    assert log.stable_offset == 2  # transaction 2 is still open
    assert set(log.txns.open) == {2} and log.last_seq_no("y", 2) == 2
    assert log.txns.markers == (6, 8)
    s.close()


def test_retention_stops_at_the_stable_offset_and_forgets_old_markers(store: Store) -> None:
    cfg = PartitionConfig(
        low_watermark=2_000, max_blob_size=4_000, head_merge_fanout=4, retention_bytes=1
    )
    log = store.open_partition(1, cfg)
    for i in range(5):
        log.write(make_batch(10, producer="t", first_seq=1 + 10 * i), txn_ids=[1])
    log._commit(log.prepare_marker(1, False))  # type: ignore[arg-type]
    log.write(make_batch(10, producer="u"), txn_ids=[2])  # stays open
    for i in range(5):
        log.write(make_batch(10, producer="a", first_seq=1 + 10 * i))
    assert log.stable_offset == 51
    while log.apply_retention():
        pass
    # everything before the open transaction went, its batches stayed; so did the marker
    # of the aborted one (offset 50) and with it its aborted range
    assert (log.start_offset, log.txns.markers) == (51, ())
    assert log.txns.aborted_between(0, log.end_offset) == []
    log._commit(log.prepare_marker(2, True))  # type: ignore[arg-type]
    while log.apply_retention():
        pass
    assert log.start_offset == log.end_offset - 1 and log.txns.markers == (log.start_offset,)


def test_clients_may_not_write_markers() -> None:
    with pytest.raises(BatchFormatError, match="control batch"):
        validate_incoming([marker_batch(1, True, 0)])


def test_marker_record_round_trip() -> None:
    buf = marker_batch(12345, False, 1)
    (r,) = decode_records(buf)
    assert parse_marker_record(r.data) == (12345, False)


def test_a_trim_inside_a_transaction_cuts_it_and_forgets_the_markers_below(
    tmp_path: Path,
) -> None:
    """DeleteRecords (a trim) into an aborted transaction's batch (past a committed one's marker): readers of either
    isolation get only what is left of it, as before; the markers below the new start
    are forgotten, also after a restart."""
    s = Store(tmp_path / "d")
    log = s.open_partition(1, SMALL)
    log.write(make_batch(2, producer="t"), txn_ids=[1])  # t:1 t:2 at 0..1
    log._commit(log.prepare_marker(1, True))  # marker at 2  # type: ignore[arg-type]
    log.write(make_batch(3, producer="u"), txn_ids=[2])  # u:1..3 at 3..5
    log.write(make_batch(1, producer="a"))  # a:1 at 6
    log._commit(log.prepare_marker(2, False))  # marker at 7  # type: ignore[arg-type]
    log.write(make_batch(1, producer="a", first_seq=2))  # a:2 at 8
    assert list(log.txns.markers) == [2, 7]
    assert log.trim(4) == 4  # inside u's batch
    assert list(log.txns.markers) == [7]
    assert seen(log, committed=True) == [b"a:1", b"a:2"]
    assert seen(log, committed=False) == [b"u:2", b"u:3", b"a:1", b"a:2"]
    s.close()
    s = Store(tmp_path / "d")
    again = s.open_partition(1, SMALL)
    assert list(again.txns.markers) == [7]
    assert seen(again, committed=False) == [b"u:2", b"u:3", b"a:1", b"a:2"]
    assert seen(again, committed=True) == [b"a:1", b"a:2"]
    s.close()
