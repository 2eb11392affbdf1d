"""kill -9 of the server at random moments while it offloads and stores large payloads:
the history checker finds nothing acknowledged lost, nothing duplicated, every reference
resolves (no dangling reference: the whole topic reads back), and after the sweeper no
object is left that no record or reference names."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import weir
from tests.conftest import ServerProcess
from tests.reliability.history import History, Stored, check, make_data, message_id
from weir.client.tier_admin import PartitionTier
from weir.errors import WeirError
from weir.storage.store import Store
from weir.storage.tiered.manager import SEGMENTS_PREFIX
from weir.storage.tiered.payloads import PAYLOADS_PREFIX, referenced_keys
from weir.storage.tiered.remote_metadata import load_records
from weir.storage.tiered.remote_storage import LocalDirStorage

ROUNDS = 5
TOPIC = "crash-tier"
ENV = {
    "WEIR_STORAGE_LOW_WATERMARK": "24KiB",
    "WEIR_STORAGE_MAX_BLOB_SIZE": "32KiB",
    "WEIR_TIER_INTERVAL_S": "0.05",
    "WEIR_TIER_PAYLOAD_GRACE_S": "0.5",
}


def _write_until_killed(endpoint: str, history: History, start: int, rng: random.Random) -> int:
    """Write messages (every fifth one large) until the server dies; returns the next n."""
    n = start
    try:
        with (
            weir.Client(endpoint) as client,
            client.writer(TOPIC, producer_id="crash", delivery_timeout=4) as w,
        ):
            while n < start + 5000:
                size = rng.choice([300, 300, 300, 300, 9000])
                mid = f"id:crash:{n}"
                history.attempted(mid)
                r = w.write_with_result(make_data("crash", n, size))
                history.acked(mid, r.partition, None if r.skipped else r.offset)
                n += 1
    except (WeirError, OSError, RuntimeError):
        pass
    return n + 1


def kill_during_writes(
    srv: ServerProcess, history: History, rng: random.Random, rounds: int
) -> None:
    """``rounds`` times: write under load, kill -9 the server at a random moment, start it."""
    n = 0
    for _ in range(rounds):
        result: list[int] = []
        t = threading.Thread(
            target=lambda s=n, out=result: out.append(
                _write_until_killed(srv.endpoint, history, s, rng)
            )
        )
        t.start()
        time.sleep(rng.uniform(0.5, 2.5))  # a random moment of the load is the point
        srv.kill()
        history.fault("kill -9")
        t.join(60)
        n = result[0] if result else n + 5000
        srv.start()


def read_back(srv: ServerProcess, offload: bool = False) -> tuple[list[Stored], PartitionTier]:
    """The whole topic as stored (offloaded blobs and payloads read through the tier) and
    its tier status; ``offload``: offload the last blobs first. Stops the server."""
    try:
        with weir.Client(srv.endpoint) as client:
            if offload:
                client.offload_topic(TOPIC)
            rows = [
                Stored(m.offset, message_id(m.data), m.producer_id, m.seq_no)
                for chunk in client.read_range(TOPIC, 0, 0)
                for m in chunk.messages()
            ]
            return rows, client.tier_status(TOPIC).partitions[0]
    finally:
        srv.stop()


@contextmanager
def swept(data_dir: Path, **store_args: Any) -> Iterator[tuple[Store, LocalDirStorage]]:
    """The stopped server's store after expiry and the sweeper (every copy a killed
    process started counts as abandoned)."""
    storage = LocalDirStorage(data_dir / "tier")
    store = Store(data_dir, tier_storage=storage, **store_args)
    try:
        tier = store.tier
        assert tier is not None
        tier.started_ms = 1 << 62  # every COPY_STARTED record is from a killed process
        tier.expire()
        tier.sweep()
        yield store, storage
    finally:
        store.close()


def test_kill_9_during_offload_and_large_payload_writes(tmp_path: Path) -> None:
    rng = random.Random(22)
    history = History()
    srv = ServerProcess(tmp_path / "data", env=ENV)
    srv.start()
    with weir.Client(srv.endpoint) as client:
        client.create_topic(TOPIC, partitions=1)
        client.alter_topic(
            TOPIC,
            policies={"offload_threshold_bytes": 1, "large_payload_threshold_bytes": 4096},
        )
    kill_during_writes(srv, history, rng, ROUNDS)
    rows, st = read_back(srv)
    assert st.segments, "nothing was offloaded: the test tested nothing"
    report = check(history, {0: rows}, {0: st.start_offset})
    assert report.ok, report.summary()
    assert report.acknowledged > 20
    # the sweeper: afterwards every object is named by a record or a reference
    with swept(tmp_path / "data", tier_payload_grace_ms=0) as (store, storage):
        assert store.tier is not None
        store.tier.collect_payloads()
        with store.kv.snapshot() as view:
            known = {r.object_key for r in load_records(view)} | referenced_keys(view)
        left = {o.key for o in storage.list(SEGMENTS_PREFIX)} | {
            o.key for o in storage.list(PAYLOADS_PREFIX)
        }
        assert left == known
