"""Found by the chaos run: dedup state went with a producer's last message.

When other producers wrote enough to the same partition for retention to remove all
of a producer's messages while that producer was reconnecting, its resend of a batch
that was stored (but whose ack was lost) was stored again: a duplicate that the final
contents hide (the first copy is gone) but that consumers see twice. As Kafka does
(KIP-360), producer state now outlives its messages until the producer has been idle
for `topics.producer_idle_timeout_ms`.
"""

from __future__ import annotations

import time
from pathlib import Path

import weir
from tests.conftest import ServerProcess


def test_resend_after_retention_removed_the_producers_messages_is_not_stored_again(
    tmp_path: Path,
) -> None:
    srv = ServerProcess(
        tmp_path / "data",
        env={
            "WEIR_TOPICS_RETENTION_INTERVAL_S": "0.2",
            "WEIR_STORAGE_LOW_WATERMARK": "4KiB",
            "WEIR_STORAGE_MAX_BLOB_SIZE": "8KiB",
        },
    ).start()
    try:
        with weir.Client(srv.endpoint) as c:
            c.create_topic("t", partitions=1, retention_bytes=8_000)
            with c.writer("t", producer_id="P", partition=0) as w:
                first = w.write_with_result(b"payment 1", seq_no=1, timeout=30)
            assert not first.skipped
            with c.writer("t", producer_id="Q", partition=0) as q:
                for i in range(200):
                    q.write(b"%d" % i + b"." * 1000)
            deadline = time.monotonic() + 30  # retention runs every 0.2 s
            while c.describe_topic("t").partition_info[0].start_offset <= first.offset:
                assert time.monotonic() < deadline, "retention did not run"
                time.sleep(0.05)
            # P reconnects and resends seq_no 1, whose ack it never saw
            with c.writer("t", producer_id="P", partition=0) as w:
                again = w.write_with_result(b"payment 1", seq_no=1, timeout=30)
            assert again.skipped, f"stored again at offset {again.offset}"
    finally:
        srv.kill()
