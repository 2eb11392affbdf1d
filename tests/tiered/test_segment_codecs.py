"""The Parquet codecs of segment objects: the columns Spark's scan reads are stored
without a codec, but for payloads (key, value) that zstd shrinks by a fifth or more;
``weir_batch`` (the broker's) is zstd. Objects written before this choice (zstd on every
column) still read back byte for byte, beside newer ones in the same partition."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.tiered.test_offload import CFG, open_store, read_all, tier
from weir.storage.batch_encoding import encode_batch
from weir.storage.incoming import validate_incoming
from weir.storage.partition import PartitionLog
from weir.storage.tiered import segment_format
from weir.storage.tiered.manager import OffloadPolicy
from weir.storage.tiered.remote_storage import LocalDirStorage, RemoteStorage
from weir.storage.tiered.segment_format import BATCH_COLUMN, read_rows

EVERYTHING = OffloadPolicy(threshold_bytes=0)
PACK = OffloadPolicy(threshold_bytes=0, object_bytes=100_000, flush=True)


def _random(i: int) -> bytes:
    return b"%08d" % i + os.urandom(292)


def _text(i: int) -> bytes:
    return json.dumps({"order": i, "customer": f"c{i % 50}", "state": "paid", "n": [1, 2]}).encode()


def write(log: PartitionLog, make: Any, batches: int, per: int = 40) -> list[bytes]:
    """``batches`` batches of ``per`` payloads made by ``make``, with keys; the payloads."""
    out: list[bytes] = []
    seq = 1 + (log.last_seq_no("p") or 0)
    for _ in range(batches):
        data = [make(seq + j) for j in range(per)]
        keys = [b"k%d" % (seq + j) for j in range(per)]
        raw = encode_batch(data, producer_id="p", first_seq_no=seq, keys=keys)
        log.write(validate_incoming([raw]))
        out += data
        seq += per
    return out


def codecs(storage: RemoteStorage, key: str) -> dict[str, str]:
    md = pq.ParquetFile(pa.BufferReader(storage.get(key))).metadata
    rg = md.row_group(0)
    return {rg.column(j).path_in_schema: rg.column(j).compression for j in range(rg.num_columns)}


@pytest.mark.parametrize("policy", [EVERYTHING, PACK], ids=["one-blob", "packed"])
def test_payload_codec_only_where_it_pays(policy: OffloadPolicy, tmp_path: Path) -> None:
    storage = LocalDirStorage(tmp_path / "tier")
    store = open_store(tmp_path / "d", storage)
    logs = {"random": store.open_partition(1, CFG), "text": store.open_partition(2, CFG)}
    payloads = {
        "random": write(logs["random"], _random, 25),
        "text": write(logs["text"], _text, 60),
    }
    for name, log in logs.items():
        before = read_all(log)
        assert tier(store).offload_sync(log, policy) >= 2
        recs = sorted(log.remote.values(), key=lambda r: r.first_offset)
        for key in sorted({r.object_key for r in recs}):
            c = codecs(storage, key)
            assert c[BATCH_COLUMN] == "ZSTD"
            assert c["value"] == ("UNCOMPRESSED" if name == "random" else "ZSTD"), (name, c)
            assert c["key"] == "ZSTD"  # "k<seq>": repetitive
            assert {c[n] for n in ("offset", "partition", "created_at", "seq_no")} == {
                "UNCOMPRESSED"
            }
        # the same rows and bytes as before, whatever the codec
        assert read_all(log) == before
        rows = [
            v
            for key in sorted({r.object_key for r in recs})
            for v in read_rows(storage.get(key), 0, 1 << 62).column("value").to_pylist()
        ]
        assert rows == payloads[name][: len(rows)] and len(rows) == recs[-1].end_offset
    store.close()


def _zstd_everywhere(sample: pa.Table) -> dict[str, Any]:
    """The writer options of objects offloaded before the codec choice (zstd on all)."""
    return {
        "compression": "zstd",
        "use_dictionary": ["topic", "producer_id"],
        "write_statistics": ["offset", "written_at", "created_at"],
        "write_page_checksum": True,
    }


@pytest.mark.parametrize("policy", [EVERYTHING, PACK], ids=["one-blob", "packed"])
def test_objects_written_with_zstd_everywhere_still_read(
    backend: tuple[str, RemoteStorage],
    policy: OffloadPolicy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, storage = backend
    store = open_store(tmp_path / "d", storage, cache=0)
    log = store.open_partition(7, CFG, label="t/0")
    write(log, _random, 20)
    with monkeypatch.context() as m:
        m.setattr(segment_format, "write_options", _zstd_everywhere)
        assert tier(store).offload_sync(log, policy) >= 2
    old = {r.object_key for r in log.remote.values()}
    assert all(codecs(storage, k)["value"] == "ZSTD" for k in old)
    # newer objects in the same partition, with today's codecs
    write(log, _random, 20)
    before = read_all(log)
    assert tier(store).offload_sync(log, policy) >= 2
    new = {r.object_key for r in log.remote.values()} - old
    assert new and all(codecs(storage, k)["value"] == "UNCOMPRESSED" for k in new)
    assert read_all(log) == before
    store.close()
    store = open_store(tmp_path / "d", storage, cache=0)
    log = store.open_partition(7, CFG, label="t/0")
    assert read_all(log) == before
    store.close()
