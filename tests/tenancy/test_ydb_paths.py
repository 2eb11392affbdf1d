"""The YDB front's paths name the same topics as the native front: the database is the
root, so ``/local/orders`` is ``orders`` (public/default) and ``/local/acme/shop/orders``
is ``acme/shop/orders``. A message written through one front reads back through the other."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import ydb

import weir
from tests.conftest import ServerProcess
from tests.ydb.conftest import DATABASE, connect, receive


@pytest.fixture
def driver(shared_server: ServerProcess) -> Iterator[ydb.Driver]:
    d = connect(shared_server)
    yield d
    d.stop(timeout=5)


def test_ydb_paths_and_native_names_are_one_topic(
    driver: ydb.Driver, shared_server: ServerProcess, topic_name: str
) -> None:
    tenant = f"y-{topic_name}"[:60]
    tc = driver.topic_client
    with weir.Client(shared_server.endpoint) as client:
        client.create_tenant(tenant)
        client.create_namespace(f"{tenant}/shop", {"retention_ms": 3_600_000})
        # bare: public/default
        tc.create_topic(f"{DATABASE}/{topic_name}")
        assert client.describe_topic(topic_name).name == topic_name
        assert client.describe_topic(f"public/default/{topic_name}").name == topic_name
        # three parts under the database
        tc.create_topic(f"{DATABASE}/{tenant}/shop/orders", consumers=["c"])
        info = client.describe_topic(f"{tenant}/shop/orders")
        assert info.retention_ms == 3_600_000  # the namespace's policy, through YDB too
        described = tc.describe_topic(f"{DATABASE}/{tenant}/shop/orders")
        assert described.retention_period.total_seconds() == 3600
        with tc.writer(f"{DATABASE}/{tenant}/shop/orders", producer_id="ydb-1") as w:
            w.write(ydb.TopicWriterMessage(b"from ydb"))
        with client.writer(f"{tenant}/shop/orders", producer_id="native-1") as nw:
            nw.write(b"from native")
        got = [
            m.data for ch in client.read_range(f"{tenant}/shop/orders", 0, 0) for m in ch.messages()
        ]
        assert got == [b"from ydb", b"from native"]
        with tc.reader(f"{DATABASE}/{tenant}/shop/orders", consumer="c") as r:
            assert [m.data for m in receive(r, 2)] == [b"from ydb", b"from native"]
        # a namespace that does not exist is YDB's SCHEME_ERROR (a missing directory)
        with pytest.raises(ydb.SchemeError, match="does not exist"):
            tc.create_topic(f"{DATABASE}/{tenant}/nowhere/orders")
        # the YDB front does not auto-create: a YDB client expects SCHEME_ERROR
        writer = tc.writer(f"{DATABASE}/{topic_name}_new", producer_id="p")
        with pytest.raises(ydb.SchemeError, match="does not exist"):
            writer.wait_init(timeout=10)
        with pytest.raises(ydb.SchemeError):
            writer.close()
        tc.drop_topic(f"{DATABASE}/{tenant}/shop/orders")
        client.delete_namespace(f"{tenant}/shop")
        client.delete_tenant(tenant)
