"""A disk that fails between LMDB's two durable writes (its data pages, then its meta page).

LMDB then marks its environment fatal (`MDB_PANIC`) and refuses every transaction, reads
included, for as long as it stays open; before `LmdbKV` opened it again, a server kept
refusing reads and writes after the disk came back, until it was restarted (ci75 met it
with the journal's applier). Real LMDB on a LazyFS mount (`tests/reliability/lazyfs.py`)
whose disk dies right after an fsync.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.lazyfs import LazyMount
from weir.errors import CommitFailedError, UnavailableError
from weir.storage.journaled_kv import JournaledKV
from weir.storage.kv import LmdbKV, put


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[LazyMount]:
    if why := LazyMount.available():
        pytest.fail(f"this test needs FUSE: {why}")
    m = LazyMount(tmp_path / "disk", tmp_path / "data", tmp_path / "outside").start()
    try:
        yield m
    finally:
        m.stop()


def _open(mount: LazyMount, journal: bool) -> LmdbKV | JournaledKV:
    if journal:
        return JournaledKV(mount.mount / "kv", mount.mount / "journal", ["t"], start_applier=False)
    return LmdbKV(mount.mount / "kv", ["t"])


def _write(kv: LmdbKV | JournaledKV, key: bytes) -> None:
    """One durable commit into LMDB itself (with the journal: appended, then applied)."""
    kv.write([put("t", key, b"v-" + key)])
    if isinstance(kv, JournaledKV):
        assert kv.apply_pending(), "the journal's apply to LMDB failed"


@pytest.mark.parametrize("journal", [False, True], ids=["lmdb", "journal"])
def test_lmdb_serves_again_after_the_disk_died_between_its_two_durable_writes(
    mount: LazyMount, journal: bool
) -> None:
    kv = _open(mount, journal)
    try:
        _write(kv, b"a")
        mount.fail_after_next_fsync()
        if isinstance(kv, JournaledKV):
            # the journal's append is the fsync that succeeds; LMDB's apply then makes
            # its data pages durable (one more fsync) and fails on the meta page: so the
            # disk dies after the journal's own fsync and the next one
            kv.write([put("t", b"b", b"v-b")])  # acknowledged: in the journal
            mount.fail_after_next_fsync()
            assert not kv.apply_pending()
        else:
            with pytest.raises(CommitFailedError):
                kv.write([put("t", b"b", b"v-b")])
        # reads go on, with what was stored (and, with the journal, acknowledged)
        assert kv.get("t", b"a") == b"v-a"
        assert kv.get("t", b"b") == (b"v-b" if journal else None)
        mount.unfail_fsync()
        if isinstance(kv, JournaledKV):  # its applier retries: writes wait for that
            assert kv.apply_pending()
        _write(kv, b"c")  # and writes, once the disk is back
        assert dict(kv.scan("t")) == {
            b"a": b"v-a",
            **({b"b": b"v-b"} if journal else {}),
            b"c": b"v-c",
        }
    finally:
        kv.close()
    kv = _open(mount, journal)  # what the disk holds says the same
    try:
        assert [k for k, _ in kv.scan("t")] == ([b"a", b"b", b"c"] if journal else [b"a", b"c"])
    finally:
        kv.close()


def test_the_last_reader_out_opens_lmdb_again_and_nobody_waits_for_it(
    mount: LazyMount,
) -> None:
    """Closing LMDB unmaps it: a reader's zero-copy buffers would then point at nothing
    (a segfault, not an error). So LMDB is opened again only when the last reader inside
    it is done; meanwhile new readers and writers are refused at once (retryable), not
    kept waiting (a writer on the event loop would freeze it)."""
    kv = LmdbKV(mount.mount / "kv", ["t"])
    try:
        kv.write([put("t", b"a", b"A" * 5000)])
        with kv.snapshot() as view:
            value = view.get("t", b"a")
            assert value is not None
            mount.fail_after_next_fsync()
            with pytest.raises(CommitFailedError, match="Input/output error"):
                kv.write([put("t", b"b", b"B")])
            assert bytes(value) == b"A" * 5000  # the map is still there
            with pytest.raises(UnavailableError, match="opened again as soon as"):
                kv.get("t", b"a")
            with pytest.raises(CommitFailedError, match="opened again as soon as"):
                kv.write([put("t", b"c", b"C")])
        assert kv.get("t", b"a") == b"A" * 5000  # the reader left: opened again
        mount.unfail_fsync()
        kv.write([put("t", b"c", b"C")])
        assert [k for k, _ in kv.scan("t")] == [b"a", b"c"]
    finally:
        kv.close()


def test_close_waits_for_a_reader_inside_and_refuses_new_ones(tmp_path: Path) -> None:
    kv = LmdbKV(tmp_path / "kv", ["t"])
    kv.write([put("t", b"a", b"A" * 5000)])
    closed = threading.Event()
    closer = threading.Thread(target=lambda: (kv.close(), closed.set()))
    with kv.snapshot() as view:
        value = view.get("t", b"a")
        assert value is not None
        closer.start()
        deadline = time.monotonic() + 10
        while not kv._closed:  # close() has begun: it refuses new readers
            assert time.monotonic() < deadline
            time.sleep(0.001)
        with pytest.raises(UnavailableError, match="closed"):
            kv.get("t", b"a")
        assert not closed.is_set()
        assert bytes(value) == b"A" * 5000  # still mapped
    closer.join(10)
    assert closed.is_set()


def test_when_the_failed_commit_shows_after_the_reopen_everything_is_refused(
    mount: LazyMount,
) -> None:
    """A disk that dies altogether: LMDB cannot even write the old meta page back, so
    the page cache holds the commit its caller was told had failed. The store no longer
    says what the broker believes: every read and write is refused until a restart
    (which loads what the disk holds), not served from a state nobody was told of."""
    kv = LmdbKV(mount.mount / "kv", ["t"])
    try:
        kv.write([put("t", b"a", b"A")])
        with kv.snapshot():  # a reader inside: the reopen waits for it, the commit's id kept
            mount.die_after_next_fsync()
            with pytest.raises(CommitFailedError):
                kv.write([put("t", b"b", b"B")])
            with pytest.raises(CommitFailedError):
                kv.write([put("t", b"b2", b"B")])
        mount.unfail_fsync()
        with pytest.raises(UnavailableError, match="restart"):
            kv.get("t", b"a")
        with pytest.raises(CommitFailedError, match="restart"):
            kv.write([put("t", b"c", b"C")])
    finally:
        kv.close()
