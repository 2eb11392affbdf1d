"""The disk under the server: bytes flipped in the data file, and the storage filling up."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import weir
from tests.conftest import ServerProcess
from weir.errors import CorruptDataError, StorageFullError, WeirTimeoutError

SMALL_BLOBS = {
    "WEIR_STORAGE_LOW_WATERMARK": "48KiB",
    "WEIR_STORAGE_MAX_BLOB_SIZE": "64KiB",
    "WEIR_METRICS_ENABLED": "false",
}
MARK_BIG = b"<<damage-me-in-a-big-blob>>"
MARK_HEAD = b"<<damage-me-in-the-head>>"


def flip_all(data_file: Path, marker: bytes) -> int:
    data = bytearray(data_file.read_bytes())
    n = 0
    pos = data.find(marker)
    while pos >= 0:
        data[pos + 5] ^= 0x01
        n += 1
        pos = data.find(marker, pos + 1)
    data_file.write_bytes(bytes(data))
    return n


def read_all(c: weir.Client, topic: str, partition: int, start: int = 0) -> list[weir.Message]:
    out: list[weir.Message] = []
    for chunk in c.read_range(topic, partition, start):
        out.extend(chunk.messages(start))
    return out


def test_flipped_bytes_are_detected_named_and_never_served(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", env=SMALL_BLOBS).start()
    try:
        c = weir.Client(srv.endpoint)
        c.create_topic("victim", partitions=2)
        c.create_topic("bystander", partitions=1)
        with c.writer("victim", partition=0) as w0:
            for i in range(3000):
                w0.write(MARK_BIG if i == 100 else b"p0-%06d" % i + b"." * 100)
                if i % 100 == 99:
                    w0.flush()  # many small writes: compaction seals big blobs
        with c.writer("victim", partition=1) as w1:
            for i in range(20):
                w1.write(MARK_HEAD if i == 10 else b"p1-%06d" % i)
        with c.writer("bystander", producer_id="b") as wb:
            for i in range(100):
                wb.write(b"b-%d" % i)
        c.close()
    finally:
        assert srv.stop() == 0
    data_file = tmp_path / "data" / "kv" / "data.mdb"
    assert flip_all(data_file, MARK_BIG) >= 1
    assert flip_all(data_file, MARK_HEAD) >= 1

    srv.start()  # one damaged partition does not keep the server from starting
    try:
        c = weir.Client(srv.endpoint)
        # the damaged big blob is refused with partition and offset; data before it is served
        with pytest.raises(CorruptDataError, match=r"victim/0.*offset") as exc:
            read_all(c, "victim", 0)
        assert "offset" in str(exc.value)
        first = next(iter(c.read_range("victim", 0, 0, 50)))
        assert first.messages()[0].data.startswith(b"p0-000000")
        info = c.describe_topic("victim").partition_info[0]
        tail = read_all(c, "victim", 0, info.end_offset - 100)
        assert [m.offset for m in tail] == list(range(info.end_offset - 100, info.end_offset))
        # the damaged head: reads of it are refused, and so are writes to that partition
        with pytest.raises(CorruptDataError, match="victim/1"):
            read_all(c, "victim", 1)
        w = c.writer("victim", partition=1)
        with pytest.raises(CorruptDataError, match="victim/1"):
            w.write_with_result(b"more", timeout=20)
        w.close()
        # everything else works as before
        assert [m.data for m in read_all(c, "bystander", 0)] == [b"b-%d" % i for i in range(100)]
        with c.writer("bystander", producer_id="b") as wb:
            wb.write(b"b-100")
        assert len(read_all(c, "bystander", 0)) == 101
        c.close()
    finally:
        srv.stop()


def test_full_storage_refuses_writes_reads_go_on_and_nothing_is_lost(tmp_path: Path) -> None:
    env = {**SMALL_BLOBS, "WEIR_STORAGE_MAP_SIZE": "3MiB"}
    srv = ServerProcess(tmp_path / "data", env=env).start()
    try:
        c = weir.Client(srv.endpoint)
        c.create_topic("full")
        w = c.writer("full", producer_id="filler", max_buffer_messages=100_000)
        acked = []
        n = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            futs = [w.write_future(b"%08d" % (n + i) + b"x" * 1000) for i in range(200)]
            n += 200
            try:
                w.flush(timeout=3)
            except WeirTimeoutError:
                break
            acked.extend(f.result().seq_no for f in futs)
        else:
            pytest.fail("the storage never filled up")
        # the writer is told why it waits: a clear, retryable error
        assert isinstance(w.last_error, StorageFullError), w.last_error
        assert w.last_error.retryable and "full" in w.last_error.message
        # reads keep working and see every acknowledged message
        stored = read_all(c, "full", 0)
        assert len(stored) >= len(acked) > 0
        # space returns (a bigger map after a restart): the same writer finishes its backlog
        srv.env = {**env, "WEIR_STORAGE_MAP_SIZE": "64MiB"}
        srv.restart()
        w.flush(timeout=60)
        w.close()
        stored = read_all(c, "full", 0)
        seqs = [m.seq_no for m in stored]
        assert seqs == list(range(1, n + 1)), "lost or duplicated messages after the disk filled up"
        c.close()
    finally:
        srv.kill()
