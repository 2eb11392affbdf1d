"""kill -9 of the server at random moments while it packs blobs into shared objects
(``tier.object_bytes``): nothing acknowledged lost or duplicated, the whole topic reads
back (a blob whose copy was cut off is local or in a verified object, never neither),
and after expiry and the sweeper the store holds exactly the objects records name (an
object shared by finished and abandoned records stays; one only abandoned ones name
goes)."""

from __future__ import annotations

import random
from pathlib import Path

import weir
from tests.conftest import ServerProcess
from tests.reliability.history import History, check
from tests.tiered.test_tier_crash import ENV, TOPIC, kill_during_writes, read_back, swept
from weir.storage.tiered.manager import SEGMENTS_PREFIX
from weir.storage.tiered.remote_metadata import load_records

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
    kill_during_writes(srv, history, rng, ROUNDS)
    rows, st = read_back(srv, offload=True)  # the last objects too (a last run waits otherwise)
    objects = {s.object_key for s in st.segments}
    assert objects and len(objects) < len(st.segments), "no object packs several blobs"
    report = check(history, {0: rows}, {0: st.start_offset})
    assert report.ok, report.summary()
    assert report.acknowledged > 20
    with swept(tmp_path / "data") as (store, storage):
        with store.kv.snapshot() as view:
            known = {r.object_key for r in load_records(view)}
        assert {o.key for o in storage.list(SEGMENTS_PREFIX)} == known
        assert objects <= known
