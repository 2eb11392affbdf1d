"""kill -9 of the server at random moments while it packs blobs into shared objects
(``tier.object_bytes``): nothing acknowledged lost or duplicated, the whole topic reads
back (a blob whose copy was cut off is local or in a verified object, never neither),
and after expiry and the sweeper the store holds exactly the objects records name (an
object shared by finished and abandoned records stays; one only abandoned ones name
goes)."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import weir
from tests.conftest import ServerProcess
from tests.reliability.history import History, Stored, check, message_id
from tests.tiered.test_tier_crash import ENV, TOPIC, _write_until_killed
from weir.storage.store import Store
from weir.storage.tiered.manager import SEGMENTS_PREFIX
from weir.storage.tiered.remote_metadata import load_records
from weir.storage.tiered.remote_storage import LocalDirStorage

ROUNDS = 3
PACKED = {**ENV, "WEIR_TIER_OBJECT_BYTES": "100KiB", "WEIR_TIER_OBJECT_WAIT_S": "0.3"}


def test_kill_9_during_multi_blob_offload(tmp_path: Path) -> None:
    rng = random.Random(2205)
    history = History()
    srv = ServerProcess(tmp_path / "data", env=PACKED)
    srv.start()
    with weir.Client(srv.endpoint) as client:
        client.create_topic(TOPIC, partitions=1)
        client.alter_topic(TOPIC, policies={"offload_threshold_bytes": 1})
    n = 0
    for _ in range(ROUNDS):
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
    try:
        with weir.Client(srv.endpoint) as client:
            client.offload_topic(TOPIC)  # the last objects too (a last run waits otherwise)
            rows = [
                Stored(m.offset, message_id(m.data), m.producer_id, m.seq_no)
                for chunk in client.read_range(TOPIC, 0, 0)
                for m in chunk.messages()
            ]
            st = client.tier_status(TOPIC).partitions[0]
    finally:
        srv.stop()
    objects = {s.object_key for s in st.segments}
    assert objects and len(objects) < len(st.segments), "no object packs several blobs"
    report = check(history, {0: rows}, {0: st.start_offset})
    assert report.ok, report.summary()
    assert report.acknowledged > 20
    storage = LocalDirStorage(tmp_path / "data" / "tier")
    store = Store(tmp_path / "data", tier_storage=storage)
    try:
        tier = store.tier
        assert tier is not None
        tier.started_ms = 1 << 62  # every COPY_STARTED record is from a killed process
        tier.expire()
        tier.sweep()
        with store.kv.snapshot() as view:
            known = {r.object_key for r in load_records(view)}
        assert {o.key for o in storage.list(SEGMENTS_PREFIX)} == known
        assert objects <= known
    finally:
        store.close()
