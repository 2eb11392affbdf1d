"""Damaged bytes on disk are detected on recovery and on read, and never served."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.storage.conftest import make_batch
from weir.errors import CorruptDataError
from weir.storage.partition import PartitionConfig
from weir.storage.store import Store

CFG = PartitionConfig(low_watermark=50_000, max_blob_size=100_000)
MARKER = b"<<this-exact-message-will-be-damaged>>"


def _flip_marker(path: Path) -> int:
    """Flip one byte inside every copy of MARKER in the LMDB data file."""
    f = path / "kv" / "data.mdb"
    data = bytearray(f.read_bytes())
    n = 0
    pos = data.find(MARKER)
    while pos >= 0:
        data[pos + 10] ^= 0x20
        n += 1
        pos = data.find(MARKER, pos + 1)
    f.write_bytes(bytes(data))
    return n


def _fill(path: Path, marker_at: int, total: int) -> int:
    """Write `total` batches of 10 messages; batch `marker_at` carries MARKER. Returns its offset."""
    s = Store(path)
    log = s.open_partition(3, CFG, label="orders/3")
    offset = -1
    for i in range(total):
        (b,) = make_batch(
            10, producer="p", first_seq=i * 10 + 1, size=200, tag=MARKER if i == marker_at else b""
        )
        (r,) = log.write([b])
        if i == marker_at:
            offset = r.offset
    s.close()
    return offset


def test_damaged_head_is_detected_at_start(tmp_path: Path) -> None:
    path = tmp_path / "d"
    offset = _fill(path, marker_at=2, total=5)  # all of it stays in the head
    assert _flip_marker(path) >= 1
    s = Store(path)
    with pytest.raises(CorruptDataError) as exc:
        s.open_partition(3, CFG, label="orders/3")
    assert "orders/3" in str(exc.value) and exc.value.offset == offset
    s.close()


def test_damaged_big_blob_is_refused_on_read_and_found_by_verify(tmp_path: Path) -> None:
    path = tmp_path / "d"
    offset = _fill(path, marker_at=3, total=60)  # sealed in a big blob by compaction
    assert _flip_marker(path) >= 1
    s = Store(path)
    log = s.open_partition(3, CFG, label="orders/3")  # a fast start checks only presence
    assert log.end_offset == 600
    before = log.read(0, 1)  # data before the damage is still served
    assert before.next_offset <= offset
    with pytest.raises(CorruptDataError) as exc:
        log.read(offset, 1 << 20)
    assert "orders/3" in str(exc.value) and exc.value.offset == offset
    # data after the damaged blob is still readable
    last = log.blobs[-1]
    assert log.read(last.first_offset).chunks
    s.close()
    s = Store(path)
    with pytest.raises(CorruptDataError, match="orders/3"):
        s.open_partition(3, CFG, label="orders/3", verify_all=True)
    s.close()


def test_second_process_cannot_open_the_same_data_dir(tmp_path: Path) -> None:
    import subprocess
    import sys

    from weir.errors import DataDirLockedError

    s = Store(tmp_path / "d")
    code = (
        "import sys\nfrom weir.storage.store import Store\n"
        "try:\n    Store(sys.argv[1])\nexcept Exception as e:\n    print(type(e).__name__, e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert DataDirLockedError.__name__ in out.stdout and "in use" in out.stdout
    s.close()
    assert os.path.exists(tmp_path / "d" / "kv" / "weir.lock")
