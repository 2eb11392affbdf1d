"""Power loss, not only kill -9: the data directory on a LazyFS mount that drops every write
not fsync'd at a power cut (tests/reliability/lazyfs.py).

kill -9 keeps the page cache, so a storage layer that never fsyncs survives it; a power
cut does not. With the storage's fsync switched off (WEIR_UNSAFE_NO_FSYNC=1, test-only)
the checker must find acknowledged messages lost; as shipped, the same power cuts in
test_faults.py's mixed run (and in `make soak`) must lose nothing.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from tests.reliability.chaos import ChaosSettings, run_chaos
from tests.reliability.lazyfs import LazyMount


def power_cuts(seed: int) -> ChaosSettings:
    return ChaosSettings(
        kills=2,
        faults={"powercut": 1},
        writers=(("pid", 0), ("partition", 0), ("anonymous", 0)),
        consumers=1,
        retained_topic=False,
        fault_every_s=(0.5, 1.0),
        seed=seed,
    )


def test_power_cut_catches_a_storage_layer_that_skips_fsync(
    tmp_path: Path, chaos_seed: int
) -> None:
    result = run_chaos(tmp_path, power_cuts(chaos_seed), env={"WEIR_UNSAFE_NO_FSYNC": "1"})
    rep = result.report
    assert result.faults["powercut"] == 2
    assert result.dropped_pages > 0  # the writes were there, unsynced, when the power went
    assert not rep.ok, f"seed {chaos_seed}: fsync off, yet {rep.summary()}"
    assert rep.lost, f"seed {chaos_seed}: acknowledged messages must be lost: {rep.summary()}"


@pytest.mark.slow
def test_power_cut_catches_a_journal_that_skips_fsync(tmp_path: Path, chaos_seed: int) -> None:
    """The same with storage.journal = true: the journal's fdatasync is what the acks
    rest on (WEIR_UNSAFE_NO_FSYNC=1 skips it, and LMDB's); the checker must see the loss."""
    result = run_chaos(
        tmp_path,
        power_cuts(chaos_seed),
        env={"WEIR_UNSAFE_NO_FSYNC": "1", "WEIR_STORAGE_JOURNAL": "true"},
    )
    rep = result.report
    assert result.faults["powercut"] == 2
    assert rep.lost, f"seed {chaos_seed}: acknowledged messages must be lost: {rep.summary()}"


def test_lazyfs_keeps_only_what_was_synced(tmp_path: Path) -> None:
    """The layer itself: synced bytes survive a cut, unsynced writes and truncates do not;
    mmap reads see writes made through the mount; O_DSYNC writes are durable at once."""
    if why := LazyMount.available():
        pytest.fail(f"power-cut tests need FUSE: {why}")
    mount = LazyMount(tmp_path / "disk", tmp_path / "mnt", tmp_path / "outside").start()
    try:
        f = tmp_path / "mnt" / "file"
        fd = os.open(f, os.O_RDWR | os.O_CREAT)
        os.pwrite(fd, b"a" * 6000, 0)
        os.fsync(fd)
        os.close(fd)
        fd = os.open(f, os.O_WRONLY | os.O_DSYNC)
        os.pwrite(fd, b"D", 0)  # durable when it returns
        os.close(fd)
        fd = os.open(f, os.O_RDWR)
        os.pwrite(fd, b"b" * 6000, 3000)  # unsynced: overwrites the tail, grows the file
        with mmap.mmap(fd, 9000, mmap.MAP_SHARED, mmap.PROT_READ) as mm:
            assert mm[2999:3001] == b"ab"
        os.close(fd)
        assert f.stat().st_size == 9000
        assert mount.cut() > 0
        mount.release()
        with pytest.raises(OSError):
            f.read_bytes()  # the power is off
        mount.remount()
        assert f.read_bytes() == b"D" + b"a" * 5999
        fd = os.open(f, os.O_RDWR)
        os.ftruncate(fd, 10)  # unsynced truncate
        os.close(fd)
        assert f.stat().st_size == 10
        mount.cut()
        mount.remount()
        assert f.stat().st_size == 6000
    finally:
        mount.stop()
