"""A data directory written before tenants and namespaces existed still opens and serves
the same topics under the same names.

tests/fixtures/pre-tenancy-datadir.tar.gz was written by the code of commit 8dbca50
(tests/fixtures/make_pre_tenancy_datadir.py says how): topics ``orders`` (2 partitions),
``shop/carts`` and ``acme/billing/invoices``, 5 messages each in partition 0 from the
producer ``old-producer``, retention 1h, and ``old-consumer`` committed at 3 on ``orders``.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import weir
from tests.conftest import ROOT, ServerProcess
from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig

FIXTURE = ROOT / "tests" / "fixtures" / "pre-tenancy-datadir.tar.gz"
OLD_TOPICS = {"orders": 2, "public/shop/carts": 1, "acme/billing/invoices": 1}


def unpack(tmp_path: Path) -> Path:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "data"


@pytest.fixture
def old_server(tmp_path: Path) -> Iterator[ServerProcess]:
    srv = ServerProcess(unpack(tmp_path)).start()
    yield srv
    srv.stop()


def test_an_old_data_directory_serves_the_same_topics_under_the_same_names(
    old_server: ServerProcess,
) -> None:
    with weir.Client(old_server.endpoint) as client:
        topics = {t.name: t for t in client.list_topics()}
        assert {n: t.partitions for n, t in topics.items()} == OLD_TOPICS
        for name, short in (
            ("orders", "orders"),
            ("shop/carts", "shop/carts"),
            ("acme/billing/invoices", "acme/billing/invoices"),
        ):
            info = client.describe_topic(name)
            assert info.retention_ms == 3_600_000  # what it was created with, kept as its own
            assert info.partition_info[0].end_offset == 5
            got = [m.data for c in client.read_range(name, 0, 0) for m in c.messages()]
            assert got == [f"{short} {i}".encode() for i in range(5)]
        # the same bare name and the full one are one topic
        assert client.describe_topic("public/default/orders").name == "orders"
        assert (
            client.describe_consumer("orders", "old-consumer").partitions[0].committed_offset == 3
        )
        # the producer continues its seq_nos where the old version left them
        with client.writer("orders", producer_id="old-producer") as w:
            assert w.wait_init().last_seq_no == 5 and w.partition == 0
            w.write(b"orders 5")
        assert client.describe_topic("orders").partition_info[0].end_offset == 6
        reader = client.reader("orders", consumer="old-consumer")
        seen = []
        while len(seen) < 3:
            batch = reader.receive_batch(timeout=10)
            assert batch is not None
            seen += [m.data for m in batch]
        reader.close()
        assert seen == [b"orders 3", b"orders 4", b"orders 5"]


async def test_the_namespace_of_every_old_topic_is_adopted(tmp_path: Path) -> None:
    b = await Broker.open(BrokerConfig(data_dir=unpack(tmp_path), retention_interval_s=3600))
    try:
        assert [ns.path for ns in b.list_namespaces()] == [
            "acme/billing",
            "public/default",
            "public/shop",
        ]
        assert [t.name for t in b.list_tenants()] == ["acme", "public"]
        assert [c.name for c in b.namespace_topics("public/shop")] == ["public/shop/carts"]
    finally:
        await b.close()
