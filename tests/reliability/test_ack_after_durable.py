"""An ack is never sent before its commit is durable (issue 26).

The server's data directory is a LazyFS mount (tests/reliability/lazyfs.py) told to
fail every fsync and O_DSYNC write with EIO, a disk that refuses durable writes. LMDB's
commit then fails at its fdatasync; a real SDK writer must see the commit's error on
each try and finally give up on the message, never get an ack for it, and the message
must not be readable, neither from the live server nor after a power cut and restart on
what the disk kept. The commit path may change (committer thread, commit inline in the
event loop (`storage.inline_commit_bytes`), the journal in front of LMDB
(`storage.journal`: its fdatasync fails): this holds for all of them.
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import pytest

import weir
from tests.conftest import ServerProcess
from tests.reliability.lazyfs import LazyMount
from weir.errors import WeirError


def _stored(c: weir.Client, topic: str) -> list[bytes]:
    return [m.data for chunk in c.read_range(topic, 0, 0) for m in chunk.messages()]


@pytest.mark.parametrize(
    "env",
    [
        {"WEIR_STORAGE_INLINE_COMMIT_BYTES": "0"},
        {"WEIR_STORAGE_INLINE_COMMIT_BYTES": "64KiB"},
        {"WEIR_STORAGE_JOURNAL": "true"},
        # the native TCP port: its acks go out in the partition actor's turn (_ack_now)
        {"WEIR_NATIVE_TCP_ENABLED": "true"},
    ],
    ids=["thread-commit", "inline-commit", "journal", "tcp-port"],
)
def test_a_write_whose_fsync_fails_is_never_acknowledged_nor_read_back(
    tmp_path: Path, env: dict[str, str]
) -> None:
    if why := LazyMount.available():
        pytest.fail(f"this test needs FUSE: {why}")
    mount = LazyMount(tmp_path / "disk", tmp_path / "data", tmp_path / "outside").start()
    server = ServerProcess(tmp_path / "data", env=env)
    try:
        server.start()
        errors: list[WeirError] = []
        tcp = "WEIR_NATIVE_TCP_ENABLED" in env
        with weir.Client(
            server.endpoint,
            transport="tcp" if tcp else "grpc",
            tcp_endpoint=server.native_tcp if tcp else None,
        ) as c:
            c.create_topic("t", partitions=1)
            w = c.writer(
                "t",
                producer_id="P",
                partition=0,
                delivery_timeout=2.0,
                on_reconnect=errors.append,
            ).wait_init()
            for i in range(3):
                w.write_with_result(b"ok-%d" % i, timeout=30)
            mount.fail_fsync()  # the disk refuses every durable write from here on
            lost = w.write_future(b"X")
            with pytest.raises(WeirError) as failed:  # given up on after delivery_timeout
                lost.result(timeout=60)
            assert failed.value.code == "DELIVERY_TIMEOUT", failed.value
            # every try got the commit's error, not an ack (nor a silent drop)
            assert errors and all(e.code == "COMMIT_FAILED" for e in errors), errors
            with contextlib.suppress(WeirError):
                w.close(timeout=0)
            assert _stored(c, "t") == [b"ok-0", b"ok-1", b"ok-2"]  # live: X is not readable
        # power cut: the disk keeps only what was synced; the server restarts on it
        proc = server.proc
        assert proc is not None
        mount.cut()
        proc.send_signal(signal.SIGKILL)
        mount.release()
        server.kill()
        mount.remount()
        server.port = 0  # a fresh port: by now the old one may be another socket's (ci75)
        server.start()
        with weir.Client(server.endpoint) as c:
            assert _stored(c, "t") == [b"ok-0", b"ok-1", b"ok-2"]
            # and the partition takes writes again on a healthy disk
            again = c.writer("t", producer_id="P", partition=0).wait_init()
            again.write_with_result(b"Y", timeout=30)
            again.close()
            assert _stored(c, "t") == [b"ok-0", b"ok-1", b"ok-2", b"Y"]
    finally:
        try:
            server.kill()
        finally:
            mount.stop()
