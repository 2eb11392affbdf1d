"""Large payloads by reference (both back ends): a message above the topic's threshold is
stored as its own object and the log keeps a reference; every reader receives the
payload, never the reference; offloaded segments hold the payload in their rows;
unreferenced objects are collected; a damaged payload object is refused."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

import weir
from tests.conftest import ServerProcess
from tests.storage.conftest import make_batch
from weir.errors import CorruptDataError
from weir.storage.batch import decode_records
from weir.storage.batch_encoding import encode_batch
from weir.storage.incoming import validate_incoming
from weir.storage.partition import PartitionConfig
from weir.storage.store import Store
from weir.storage.tiered.manager import OffloadPolicy
from weir.storage.tiered.payloads import PAYLOADS_PREFIX, cut_payloads
from weir.storage.tiered.remote_storage import RemoteStorage
from weir.storage.tiered.segment_format import read_rows

CFG = PartitionConfig(low_watermark=20_000, max_blob_size=30_000)


def big(i: int, n: int) -> bytes:
    return (b"payload-%d:" % i) + bytes([i % 251]) * n


def test_storage_level_refs_fill_offload_and_collect(
    backend: tuple[str, RemoteStorage], tmp_path: Path
) -> None:
    _, storage = backend
    store = Store(tmp_path / "d", sync=False, tier_storage=storage, tier_payload_grace_ms=0)
    tier = store.tier
    assert tier is not None
    log = store.open_partition(1, CFG, label="t/0")
    datas = [big(0, 50_000), b"small", big(2, 120_000), b"tiny"]
    [inc] = validate_incoming(
        [encode_batch(datas, producer_id="p", keys=[b"k0", b"", b"k2", b""], created_at=5)]
    )
    cut = cut_payloads(inc, 10_000, lambda d: tier.put_payload(1, d))
    assert [r.index for r in cut.refs] == [0, 2] and len(cut.buf) < 1000
    log.write([cut])
    log.write(make_batch(60, producer="q", size=500))  # more data: blobs get sealed
    stored = bytes(log.read(0, 1 << 20).chunks[0])
    assert all(len(r.data) < 20 for r in decode_records(stored))  # the log holds references
    res = log.fill_payloads(log.read(0, 1 << 20))
    assert [r.data for r in decode_records(bytes(res.chunks[0]))[:4]] == datas
    # offloaded: the segment's rows have the payloads themselves
    tier.offload_sync(log, OffloadPolicy(threshold_bytes=0))
    rec = log.remote[0]
    rows = read_rows(storage.get(rec.object_key), 0, 4)
    assert rows.column("value").to_pylist() == datas
    assert [
        r.data for r in decode_records(bytes(log.fill_payloads(log.read(0, 1 << 20)).chunks[0]))[:4]
    ] == datas
    # an object nobody references (a write that died after storing it) is collected;
    # referenced ones stay
    storage.put(f"{PAYLOADS_PREFIX}0000000000000001/stray", b"left over")
    assert tier.collect_payloads(now_ms=int(time.time() * 1000) + 1000) == 1
    assert len(list(storage.list(PAYLOADS_PREFIX))) == 2
    # a damaged payload object is refused, never served
    key = cut.refs[0].key
    storage.put(key, storage.get(key)[:-1] + b"!")
    with pytest.raises(CorruptDataError, match="payload object"):
        log.fill_payloads(log.read(0, 1 << 20))
    store.close()


def test_server_readers_receive_payloads_and_drop_collects(tier_server: ServerProcess) -> None:
    topic = f"payloads-{uuid.uuid4().hex[:6]}"
    sizes = [100, 40_000, 300, 250_000, 20, 90_000]
    with weir.Client(tier_server.endpoint) as client:
        client.create_topic(topic, partitions=1)
        client.alter_topic(topic, policies={"large_payload_threshold_bytes": 16_384})
        with client.writer(topic, producer_id="big") as w:
            for i, n in enumerate(sizes):
                w.write(big(i, n), key=f"k{i}")
        got = [m.data for chunk in client.read_range(topic, 0, 0) for m in chunk.messages()]
        assert got == [big(i, n) for i, n in enumerate(sizes)]
        reader = client.reader(topic, consumer="c")
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < len(sizes) and time.monotonic() < deadline:
            batch = reader.receive_batch(timeout=2)
            seen.extend(m.data for m in batch or [])
        reader.close()
        assert seen == got
        # the local store holds references only
        info = client.describe_topic(topic)
        assert info.partition_info[0].size_bytes < 20_000
    from tests.ydb.conftest import connect, path, receive

    driver = connect(tier_server)
    try:
        r = driver.topic_client.reader(path(topic), consumer="ydb")
        try:
            msgs = receive(r, len(sizes))
        finally:
            r.close()
    finally:
        driver.stop(timeout=5)
    assert [m.data for m in msgs] == got
    # dropping the topic lets go of its references: the sweeper collects the objects
    with weir.Client(tier_server.endpoint) as client:
        client.drop_topic(topic)
    root = tier_server.data_dir / "tier" / "payloads"
    if tier_server.env and tier_server.env.get("WEIR_TIER_BACKEND") == "s3":
        return  # (collection against S3 is checked at the storage level above)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and root.exists() and any(root.rglob("*")):
        files = [p for p in root.rglob("*") if p.is_file()]
        if not files:
            break
        time.sleep(0.3)
    assert not [p for p in root.rglob("*") if p.is_file()], "payload objects outlived their topic"


def test_trim_inside_a_batch_with_large_payloads(tmp_path: Path) -> None:
    """Kafka's DeleteRecords can leave the start offset inside a batch whose large
    payloads are stored by reference: the records after it still get their payloads
    (references renumbered with the cut batch), also after a restart; once a trim passes
    the blob, its references go and the sweeper collects the objects."""
    from weir.storage.tiered.remote_storage import LocalDirStorage

    storage = LocalDirStorage(tmp_path / "tier")

    def open_store() -> Store:
        return Store(tmp_path / "d", sync=False, tier_storage=storage, tier_payload_grace_ms=0)

    store = open_store()
    tier = store.tier
    assert tier is not None
    log = store.open_partition(1, CFG, label="t/0")
    datas = [big(0, 50_000), b"small", big(2, 120_000), b"tiny"]
    [inc] = validate_incoming([encode_batch(datas, producer_id="p", created_at=5)])
    log.write([cut_payloads(inc, 10_000, lambda d: tier.put_payload(1, d))])
    assert log.trim(2) == 2

    def served() -> list[bytes]:
        res = log.fill_payloads(log.read(0, 1 << 20))
        assert res.first_offset == 2
        return [r.data for r in decode_records(bytes(res.chunks[0]))]

    assert served() == datas[2:]
    store.close()
    store = open_store()
    tier = store.tier
    assert tier is not None
    log = store.open_partition(1, CFG, label="t/0")
    assert served() == datas[2:]
    log.write(make_batch(5, producer="q", size=100))
    assert log.trim(4) == 4
    assert not log.payloads.by_offset
    assert tier.collect_payloads(now_ms=int(time.time() * 1000) + 1000) == 2
    store.close()
