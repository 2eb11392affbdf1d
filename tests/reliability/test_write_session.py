"""A write session that ends (the client cancels it, the connection drops) while its writes
wait for a commit must not leave a gap in its producer's writes.

Found by the chaos run: the session's ack task awaited the first pending write's future
directly, so cancelling the task at the session's end cancelled that write (the partition
actor dropped it) while the session's later writes, not awaited, were committed. The
producer's max seq_no then covered a message that was never stored, and its resend was
acknowledged as a duplicate ("skipped"): an acknowledged message lost. A slow disk
(LazyFS holding fsync) keeps the writes queued while the session is cut.
"""

from __future__ import annotations

import contextlib
import re
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

import weir
from tests.conftest import ServerProcess
from tests.reliability.lazyfs import LazyMount
from weir.errors import WeirTimeoutError


def _until(what: str, ok: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_cut_session_never_leaves_a_gap_in_its_producers_writes(tmp_path: Path) -> None:
    if why := LazyMount.available():
        pytest.fail(f"this test needs FUSE: {why}")
    mount = LazyMount(tmp_path / "disk", tmp_path / "data", tmp_path / "outside").start()
    server = ServerProcess(
        tmp_path / "data",
        env={"WEIR_METRICS_ENABLED": "true", "WEIR_METRICS_LISTEN": "127.0.0.1:0"},
    )
    try:
        server.start()
        urls: list[str] = []

        def announced() -> bool:
            urls.extend(
                m.group(1) for ln in server.log if (m := re.search(r"metrics on (\S+)", ln))
            )
            return bool(urls)

        _until("the metrics endpoint", announced)
        url = urls[0]

        def queued() -> int:
            text = urllib.request.urlopen(url, timeout=10).read().decode()
            return sum(
                int(float(m.group(1)))
                for m in re.finditer(r"^weir_partition_queued_bytes\{[^}]*\} (\S+)$", text, re.M)
            )

        with weir.Client(server.endpoint) as c:
            c.create_topic("t", partitions=1)
            other = c.writer("t", producer_id="other", partition=0).wait_init()
            p = c.writer(
                "t", producer_id="P", partition=0, max_batch_messages=1, max_request_bytes=1
            ).wait_init()
            mount.hold_fsync()  # a slow disk: the next commit waits in fsync
            first = other.write_future(b"first")
            _until("the first commit to wait in fsync", lambda: mount.fsyncs_waiting() > 0)
            p.write_future(b"X", seq_no=1)  # queued behind it ...
            _until("X queued", lambda: queued() > 0)
            one = queued()
            p.write_future(b"Y", seq_no=2)  # ... and Y, in a request of its own
            _until("Y queued", lambda: queued() >= 2 * one)
            with contextlib.suppress(WeirTimeoutError):
                p.close(timeout=0)  # the session ends before either is acknowledged
            # the producer comes back (at the latest its init ends the old session)
            again = c.writer("t", producer_id="P", partition=0).wait_init()
            mount.unhold_fsync()
            first.result(timeout=30)
            resent = again.write_with_result(b"X", seq_no=1, timeout=30)  # X's ack was lost
            again.close()
            other.close()
            stored = [m.data for chunk in c.read_range("t", 0, 0) for m in chunk.messages()]
        # X was stored once, either by the old session or by the resend; Y after it
        assert stored in ([b"first", b"X", b"Y"], [b"first", b"X"]), (stored, resent)
    finally:
        with contextlib.suppress(Exception):
            mount.unhold_fsync()  # a server waiting in a held fsync cannot even die
        try:
            server.kill()
        finally:
            mount.stop()
