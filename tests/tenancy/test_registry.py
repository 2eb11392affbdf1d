"""Tenants and namespaces as durable broker objects: create, list, describe, delete,
names, and what survives a restart (the broker on its real LMDB store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.storage.conftest import make_batch
from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.broker.tenancy import parse_namespace, parse_topic
from weir.errors import (
    AlreadyExistsError,
    BadRequestError,
    NotEmptyError,
    UnknownNamespaceError,
    UnknownTenantError,
    UnknownTopicError,
)


async def open_broker(path: Path, **kw: object) -> Broker:
    return await Broker.open(BrokerConfig(data_dir=path, retention_interval_s=3600, **kw))  # type: ignore[arg-type]


def test_a_bare_name_is_public_default_and_every_form_maps_to_three_parts() -> None:
    assert parse_topic("orders").full == "public/default/orders"
    assert parse_topic("shop/orders").full == "public/shop/orders"
    assert parse_topic("acme/shop/orders").full == "acme/shop/orders"
    # the YDB front's database path is the root: it is stripped first
    assert parse_topic("/local/orders", "/local").full == "public/default/orders"
    assert parse_topic("/local/acme/shop/orders", "/local").full == "acme/shop/orders"
    assert parse_namespace("shop") == ("public", "shop")
    assert parse_namespace("acme/shop") == ("acme", "shop")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("a/b/c/d", "4 parts"),
        ("", "empty"),
        ("/", "empty"),
        ("acme//orders", "no empty parts"),
        ("with space", "bad topic name 'with space'"),
        ("acme/sh$op/orders", "bad namespace name 'sh$op'"),
        ("ac*me/shop/orders", "bad tenant name 'ac*me'"),
        ("../x", "bad namespace name '..'"),
        ("-x", "bad topic name '-x'"),
    ],
)
def test_a_bad_topic_name_is_refused_saying_what_is_wrong(name: str, message: str) -> None:
    with pytest.raises(BadRequestError, match=message.replace("$", r"\$").replace("*", r"\*")):
        parse_topic(name)


async def test_tenants_and_namespaces_persist_and_refuse_to_go_while_not_empty(
    tmp_path: Path,
) -> None:
    b = await open_broker(tmp_path)
    assert [t.name for t in b.list_tenants()] == ["public"]
    assert [ns.path for ns in b.list_namespaces()] == ["public/default"]
    with pytest.raises(UnknownTenantError):
        await b.create_namespace("acme/shop")
    await b.create_tenant("acme")
    with pytest.raises(AlreadyExistsError):
        await b.create_tenant("acme")
    await b.create_namespace("acme/shop", {"retention_ms": 60_000})
    with pytest.raises(AlreadyExistsError):
        await b.create_namespace("acme/shop")
    # a topic only goes into a namespace that exists
    with pytest.raises(UnknownNamespaceError, match="acme/nowhere does not exist"):
        await b.create_topic("acme/nowhere/orders")
    cfg = await b.create_topic("acme/shop/orders", partitions=2)
    assert cfg.retention_ms == 60_000  # inherited
    await b.write("acme/shop/orders", 0, make_batch(3, producer="p"))
    with pytest.raises(NotEmptyError, match=r"acme/shop is not empty.*acme/shop/orders"):
        await b.delete_namespace("acme/shop")
    with pytest.raises(NotEmptyError, match=r"tenant .acme. is not empty.*shop"):
        await b.delete_tenant("acme")
    await b.close()

    b = await open_broker(tmp_path)
    assert [t.name for t in b.list_tenants()] == ["acme", "public"]
    ns = b.describe_namespace("acme/shop")
    assert dict(ns.policies) == {"retention_ms": 60_000}
    assert [c.name for c in b.namespace_topics("acme/shop")] == ["acme/shop/orders"]
    assert [p.end_offset for p in b.partitions("acme/shop/orders")] == [3, 0]  # untouched
    await b.drop_topic("acme/shop/orders")
    await b.delete_namespace("acme/shop")
    with pytest.raises(UnknownNamespaceError):
        b.describe_namespace("acme/shop")
    await b.delete_tenant("acme")
    with pytest.raises(UnknownTenantError):
        b.describe_tenant("acme")
    # the default ones always exist
    with pytest.raises(BadRequestError, match="always exists"):
        await b.delete_namespace("public/default")
    with pytest.raises(BadRequestError, match="always exists"):
        await b.delete_tenant("public")
    await b.close()

    b = await open_broker(tmp_path)
    assert [t.name for t in b.list_tenants()] == ["public"]
    assert [ns.path for ns in b.list_namespaces()] == ["public/default"]
    with pytest.raises(UnknownTopicError):
        b.topic("acme/shop/orders")
    await b.close()


async def test_bad_tenant_and_namespace_names_are_refused_and_change_nothing(
    tmp_path: Path,
) -> None:
    b = await open_broker(tmp_path)
    for bad in ("", "a/b", "sp ace", "-x", "x" * 201):
        with pytest.raises(BadRequestError):
            await b.create_tenant(bad)
    for bad in ("", "a/b/c", "public/sp ace", "public//x", "//"):
        with pytest.raises(BadRequestError):
            await b.create_namespace(bad)
    assert [t.name for t in b.list_tenants()] == ["public"]
    assert [ns.path for ns in b.list_namespaces()] == ["public/default"]
    await b.close()
