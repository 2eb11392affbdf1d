"""The journal in front of LMDB (storage.journal): reads see every acknowledged commit,
and a crash at any stage of applying it leaves exactly the acknowledged state."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.reliability.lazyfs import LazyMount
from tests.storage.conftest import make_batch
from tests.storage.journal_crash_child import TABLES, commit_ops
from weir.errors import CommitFailedError, CorruptDataError
from weir.storage import journal as journal_mod
from weir.storage import keys
from weir.storage.batch import decode_records, iter_batches
from weir.storage.committer import GroupCommitter
from weir.storage.compaction import COMPACTION_TABLES
from weir.storage.journal import Journal, replay
from weir.storage.journaled_kv import JOURNAL_TABLE, JournaledKV, applied_seq
from weir.storage.kv import LmdbKV, Op, RangeEnd, delete, delete_range, put
from weir.storage.partition import PartitionConfig, PartitionLog
from weir.storage.store import Store
from weir.storage.tiered.payloads import PAYLOAD_REFS
from weir.storage.tiered.remote_metadata import REMOTE_SEGMENTS

ROOT = Path(__file__).resolve().parents[2]
STORAGE_TABLES_ALL = (*keys.STORAGE_TABLES, REMOTE_SEGMENTS, PAYLOAD_REFS, *COMPACTION_TABLES)


def _model(ops: list[Op], into: dict[str, dict[bytes, bytes]]) -> None:
    for table, key, value in ops:
        t = into.setdefault(table, {})
        if value is None:
            t.pop(key, None)
        elif isinstance(value, RangeEnd):
            for k in [k for k in t if key <= k < value.stop]:
                del t[k]
        else:
            t[key] = bytes(value)


def _state(kv: JournaledKV | LmdbKV) -> dict[str, dict[bytes, bytes]]:
    return {t: dict(kv.scan(t)) for t in TABLES}


def _expected(commits: range) -> dict[str, dict[bytes, bytes]]:
    m: dict[str, dict[bytes, bytes]] = {t: {} for t in TABLES}
    for i in commits:
        _model(commit_ops(i), m)
    return m


_keys = st.sampled_from([b"a", b"b", b"c", b"d", b"e"])
_op = st.one_of(
    st.builds(lambda k, v: put("t", k, v), _keys, st.binary(min_size=0, max_size=4)),
    st.builds(lambda k: delete("t", k), _keys),
    st.builds(lambda a, b: delete_range("t", min(a, b), max(a, b)), _keys, _keys),
)
_step = st.one_of(
    st.lists(_op, min_size=1, max_size=4).map(lambda ops: ("write", ops)),
    st.integers(0, 3).map(lambda n: ("apply", n)),
    st.just(("reopen", None)),
)


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(_step, max_size=25),
    start=_keys,
    stop=st.one_of(st.none(), _keys),
    direct=st.sampled_from([0, 6]),
)
def test_reads_see_every_commit_applied_or_not(
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[tuple[str, object]],
    start: bytes,
    stop: bytes | None,
    direct: int,
) -> None:
    """Gets and scans over LMDB plus any number of unapplied deltas match a model, and
    so does every partly applied state and a reopen (replay); with ``direct`` the
    commits of that many bytes or more go to LMDB directly, between journaled ones."""
    d = tmp_path_factory.mktemp("j")

    def open_kv() -> JournaledKV:
        return JournaledKV(
            d / "kv",
            d / "journal",
            ["t"],
            start_applier=False,
            segment_bytes=64,
            direct_bytes=direct,
        )

    kv = open_kv()
    model: dict[str, dict[bytes, bytes]] = {"t": {}}
    try:
        for kind, arg in steps:
            if kind == "write":
                kv.write(arg)  # type: ignore[arg-type]
                _model(arg, model)  # type: ignore[arg-type]
            elif kind == "apply":
                kv.apply_pending(arg or None)  # type: ignore[arg-type]
            else:
                kv.close()
                kv = open_kv()
            t = model["t"]
            assert dict(kv.scan("t")) == t
            with kv.snapshot() as view:
                want = sorted(k for k in t if k >= start and (stop is None or k < stop))
                assert [k for k, _ in view.scan("t", start, stop, values=False)] == want
                for k in (b"a", b"c", b"e"):
                    got = view.get("t", k)
                    assert (None if got is None else bytes(got)) == t.get(k)
    finally:
        kv.close()


def _child(path: Path, stage: str, first: int, n: int) -> list[int]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.storage.journal_crash_child",
            str(path),
            stage,
            str(first),
            str(n),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -9, proc.stderr
    return [int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("ACK ")]


@pytest.mark.parametrize("stage", ["journal", "half", "checkpoint", "applied", "direct", "torn"])
def test_kill_9_at_every_stage_leaves_exactly_the_acked_commits(tmp_path: Path, stage: str) -> None:
    """kill -9 with commits journaled and not applied, half applied, mid-checkpoint
    (LMDB committed, segments not deleted), applied, after a commit made directly to
    LMDB behind journaled ones, or a torn record at the tail:
    the reopened store holds exactly the acknowledged commits, twice over."""
    acked = _child(tmp_path, stage, 0, 20)
    assert acked == list(range(len(acked))) and len(acked) >= 20
    for _ in range(2):  # reopen twice: the replay is idempotent
        kv = JournaledKV(tmp_path / "kv", tmp_path / "journal", TABLES)
        try:
            assert _state(kv) == _expected(range(len(acked)))
            assert kv.unapplied == 0
            # the journal's mark: every record (a direct commit has none)
            assert applied_seq(kv.lmdb) == len(acked) - (stage == "direct")
        finally:
            kv.close()
    # and the store takes more commits on top, numbered on from there
    acked2 = _child(tmp_path, "half", len(acked), 7)
    kv = JournaledKV(tmp_path / "kv", tmp_path / "journal", TABLES)
    try:
        assert _state(kv) == _expected(range(len(acked) + len(acked2)))
    finally:
        kv.close()


def test_kill_9_during_replay_then_replay_again(tmp_path: Path) -> None:
    acked = _child(tmp_path, "journal", 0, 15)
    assert _child(tmp_path, "replay", 15, 0) == []  # replayed into LMDB, killed before cleanup
    assert any((tmp_path / "journal").iterdir())
    kv = JournaledKV(tmp_path / "kv", tmp_path / "journal", TABLES)
    try:
        assert _state(kv) == _expected(range(len(acked)))
    finally:
        kv.close()


def test_switching_the_journal_off_replays_it_first(tmp_path: Path) -> None:
    """A journal left by a crash is applied by a store opened with journal = false."""
    acked = _child(tmp_path / "data", "journal", 0, 12)
    s = Store(tmp_path / "data", extra_tables=TABLES)
    try:
        assert {t: dict(s.kv.scan(t)) for t in TABLES} == _expected(range(len(acked)))
        assert not list((tmp_path / "data" / "journal").glob("*.wj"))
    finally:
        s.close()


def _segment(d: Path, first: int, records: list[tuple[int, bytes]]) -> None:
    j = Journal(d, first, sync=False)
    for seq, payload in records:
        j.next_seq = seq
        j.append(payload)
    j.close()


def test_a_later_segment_supersedes_an_unacknowledged_record(tmp_path: Path) -> None:
    """A record whose fsync failed may be on disk; the segment opened after the failure
    starts at its number and wins."""
    _segment(tmp_path, 1, [(1, b"one"), (2, b"two"), (3, b"failed")])
    _segment(tmp_path, 3, [(3, b"three"), (4, b"four")])
    assert [(r.seq, bytes(r.payload)) for r in replay(tmp_path, 0)] == [
        (1, b"one"),
        (2, b"two"),
        (3, b"three"),
        (4, b"four"),
    ]
    assert [r.seq for r in replay(tmp_path, 3)] == [4]


def test_a_gap_in_the_journal_is_damage_not_a_torn_tail(tmp_path: Path) -> None:
    _segment(tmp_path, 1, [(1, b"one"), (2, b"two")])
    _segment(tmp_path, 5, [(5, b"five")])
    with pytest.raises(CorruptDataError, match="starts at 5"):
        list(replay(tmp_path, 0))


def test_a_damaged_record_ends_the_segment(tmp_path: Path) -> None:
    _segment(tmp_path, 1, [(1, b"one"), (2, b"two"), (3, b"three")])
    (seg,) = tmp_path.iterdir()
    raw = bytearray(seg.read_bytes())
    raw[-2] ^= 0xFF  # the last record's payload
    seg.write_bytes(bytes(raw))
    assert [r.seq for r in replay(tmp_path, 0)] == [1, 2]


def test_the_applier_catches_up_and_deletes_the_journal(tmp_path: Path) -> None:
    kv = JournaledKV(
        tmp_path / "kv", tmp_path / "journal", TABLES, apply_interval_s=0.0, segment_bytes=200
    )
    try:
        for i in range(40):
            kv.write(commit_ops(i))
        kv.close()
        assert not list((tmp_path / "journal").glob("*.wj"))
        lm = LmdbKV(tmp_path / "kv", (*TABLES, JOURNAL_TABLE))
        try:
            assert _state(lm) == _expected(range(40))
        finally:
            lm.close()
    finally:
        kv.close()


def _read_all(log: PartitionLog) -> list[bytes]:
    out = []
    pos = log.start_offset
    while pos < log.end_offset:
        res = log.read(pos, 1 << 20)
        for chunk in res.chunks:
            for bpos, _ in iter_batches(chunk):
                out += [bytes(r.data) for r in decode_records(chunk, bpos)]
        pos = res.next_offset
    return out


def test_a_partition_reads_its_writes_before_they_are_applied(tmp_path: Path) -> None:
    """Every acknowledged write is readable while it is only in the journal, through
    compactions (blobs rewritten, head pieces range-deleted) that are not applied
    either; the same after the apply, and after a reopen."""
    cfg = PartitionConfig(low_watermark=4 << 10, max_blob_size=16 << 10, head_merge_fanout=4)
    kv = JournaledKV(tmp_path / "kv", tmp_path / "journal", STORAGE_TABLES_ALL, start_applier=False)
    committer = GroupCommitter(kv)
    try:
        log = PartitionLog.load(kv, committer, 7, cfg, label="j/7")
        written: list[bytes] = []
        for i in range(60):
            (batch,) = make_batch(5, producer="p", first_seq=1 + 5 * i, size=200)
            (res,) = log.write([batch])
            assert res.written
            written += [bytes(r.data) for r in decode_records(batch.buf, 0)]
            if i % 20 == 19:
                assert kv.unapplied > 0
                assert _read_all(log) == written  # served from the overlay
        assert kv.lmdb.scan(keys.PARTITIONS) == []  # none applied yet
        kv.apply_pending()
        assert kv.unapplied == 0
        assert _read_all(log) == written
    finally:
        committer.close()
        kv.close()
    kv = JournaledKV(tmp_path / "kv", tmp_path / "journal", STORAGE_TABLES_ALL)
    committer = GroupCommitter(kv)
    try:
        log = PartitionLog.load(kv, committer, 7, cfg, label="j/7", verify_all=True)
        assert _read_all(log) == written
    finally:
        committer.close()
        kv.close()


def test_damage_before_the_last_record_is_not_taken_for_a_torn_tail(tmp_path: Path) -> None:
    """A torn tail can only be the last record (each append is synced before the next
    starts): a bad record with a valid one after it in the same segment lost acknowledged
    writes, and replay must say so rather than stop quietly before them."""
    _segment(tmp_path, 1, [(1, b"one"), (2, b"two"), (3, b"three")])
    (seg,) = tmp_path.iterdir()
    raw = bytearray(seg.read_bytes())
    raw[16 + 3 + 16] ^= 0xFF  # the first payload byte of record 2 (records 3 follows)
    seg.write_bytes(bytes(raw))
    for mark in (0, 2):  # whether or not LMDB holds the damaged record, 3 must not vanish
        with pytest.raises(CorruptDataError, match="record 3"):
            list(replay(tmp_path, mark))


def test_a_commit_whose_fdatasync_failed_is_not_replayed(tmp_path: Path) -> None:
    """A dying disk (LazyFS fails every fsync with EIO): the commit whose journal
    fdatasync failed was refused (CommitFailedError: "nothing was written"), yet its
    bytes sit in the page cache. A process restart (no power cut) replays the journal
    from that cache: the refused commit must not come back."""
    if why := LazyMount.available():
        pytest.fail(f"this test needs FUSE: {why}")
    mount = LazyMount(tmp_path / "disk", tmp_path / "data", tmp_path / "outside").start()
    try:
        kv = JournaledKV(mount.mount / "kv", mount.mount / "journal", TABLES, start_applier=False)
        try:
            for i in range(3):
                kv.write(commit_ops(i))
            mount.fail_fsync()
            with pytest.raises(CommitFailedError):
                kv.write([put("t", b"refused", b"X")])
            mount.unfail_fsync()
            assert _state(kv) == _expected(range(3))
        finally:
            # the process dies here: nothing applied, nothing deleted
            kv.journal.close()
            kv.lmdb.close()
        kv = JournaledKV(mount.mount / "kv", mount.mount / "journal", TABLES)
        try:
            assert _state(kv) == _expected(range(3))
            kv.write(commit_ops(3))  # and the journal goes on from there
            assert _state(kv) == _expected(range(4))
        finally:
            kv.close()
    finally:
        mount.stop()


def test_the_journal_directory_itself_is_durable_before_a_record_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment's name is fsynced into the journal directory, and the journal directory's
    own name must be fsynced into the data directory (a power cut may otherwise lose the
    fresh directory and every acknowledged record in it). LazyFS does not model names,
    so the directory fsyncs are recorded (and still made)."""
    synced: list[Path] = []
    real = journal_mod._fsync_dir

    def spy(path: Path) -> None:
        real(path)
        synced.append(Path(path))

    monkeypatch.setattr(journal_mod, "_fsync_dir", spy)
    kv = JournaledKV(tmp_path / "kv", tmp_path / "journal", TABLES, start_applier=False)
    try:
        kv.write(commit_ops(0))
        assert tmp_path / "journal" in synced  # the segment's name
        assert tmp_path in synced  # the journal directory's name
    finally:
        kv.close()


def test_a_record_replay_would_take_for_torn_is_refused_not_acked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replay ends a segment at a record longer than MAX_RECORD_BYTES (a torn length), so
    append must refuse one rather than acknowledge a write replay will drop. The limit
    is 2 GiB (unreachable through the store, whose commits of 1 MiB go to LMDB
    directly): lowered here to show the contract."""
    monkeypatch.setattr(journal_mod, "MAX_RECORD_BYTES", 8)
    j = Journal(tmp_path, 1, sync=False)
    assert j.append(b"short") == 1
    with pytest.raises(CommitFailedError, match="too large"):
        j.append(b"longer than eight")
    assert j.append(b"next") == 2
    j.close()
    assert [bytes(r.payload) for r in replay(tmp_path, 0)] == [b"short", b"next"]
