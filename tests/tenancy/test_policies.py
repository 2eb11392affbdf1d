"""Namespace policies, inherited by topics unless a topic sets its own, enforced by the
broker (on its real LMDB store): each test shows the policy act, not just stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.storage.conftest import make_batch
from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.broker.tenancy import Policies
from weir.broker.topics import ConsumerConfig
from weir.errors import (
    BacklogQuotaExceededError,
    BadRequestError,
    TooManyConsumersError,
    TooManyProducersError,
    UnknownTopicError,
)

FAR_FUTURE = 10**13


async def open_broker(path: Path, **kw: object) -> Broker:
    cfg = BrokerConfig(
        data_dir=path, retention_interval_s=3600, low_watermark=10_000, max_blob_size=20_000, **kw
    )  # type: ignore[arg-type]
    return await Broker.open(cfg)


async def fill(b: Broker, topic: str, batches: int = 20, producer: str = "p") -> None:
    for i in range(batches):
        await b.write(topic, 0, make_batch(10, producer=producer, first_seq=i * 10 + 1))


async def test_retention_follows_the_namespace_until_a_topic_sets_its_own(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_namespace("ops", {"retention_ms": None})  # keep forever
    await b.create_topic("ops/follows")
    await b.create_topic("ops/own", retention_ms=1)
    assert b.topic("ops/follows").retention_ms is None
    await fill(b, "ops/follows")
    await fill(b, "ops/own")
    await b.run_retention(FAR_FUTURE)
    assert b.actor("ops/follows", 0).start_offset == 0  # forever: nothing removed
    assert b.actor("ops/own", 0).start_offset > 0  # its own 1 ms
    # the namespace changes: the topic that follows it changes at once, the other not
    await b.set_namespace_policies("ops", {"retention_ms": 1})
    assert b.topic("ops/follows").retention_ms == 1
    await b.run_retention(FAR_FUTURE)
    assert b.actor("ops/follows", 0).start_offset > 0
    # a topic that had its own value follows the namespace again after inherit
    await b.set_namespace_policies("ops", {"retention_ms": 3_600_000})
    assert b.topic("ops/own").retention_ms == 1
    await b.alter_topic("ops/own", inherit=["retention_ms"])
    assert b.topic("ops/own").retention_ms == 3_600_000
    await b.close()
    b = await open_broker(tmp_path)  # and all of it survives a restart
    assert b.topic("ops/own").retention_ms == 3_600_000
    assert dict(b.topic("ops/own").policies) == {}
    await b.close()


async def test_retention_by_size_is_inherited(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_namespace("sized", {"retention_bytes": 30_000, "retention_ms": None})
    await b.create_topic("sized/t")
    await fill(b, "sized/t", batches=40)
    before = b.actor("sized/t", 0).log.size_bytes
    await b.run_retention(FAR_FUTURE)
    after = b.actor("sized/t", 0).log.size_bytes
    assert before > 30_000 and after < before and b.actor("sized/t", 0).start_offset > 0
    await b.close()


async def test_the_server_default_applies_where_no_namespace_sets_one(tmp_path: Path) -> None:
    b = await open_broker(tmp_path, default_retention_ms=5000, default_partitions=3)
    cfg = await b.create_topic("plain")
    assert (cfg.retention_ms, cfg.partitions) == (5000, 3)
    await b.create_namespace("wide", {"default_partitions": 8})
    assert (await b.create_topic("wide/t")).partitions == 8
    assert (await b.create_topic("wide/u", partitions=2)).partitions == 2  # asked for
    await b.close()


async def test_message_ttl_skips_old_messages_and_lets_retention_pass_important_consumers(
    tmp_path: Path,
) -> None:
    b = await open_broker(tmp_path)
    await b.create_namespace("ttl", {"message_ttl_ms": 60_000, "retention_ms": 1})
    await b.create_topic("ttl/t", consumers=[ConsumerConfig("audit", important=True)])
    await fill(b, "ttl/t")
    # the consumer starts at the first message younger than the TTL
    ttl_from = b.ttl_offset("ttl/t", 0, now_ms=FAR_FUTURE)
    assert ttl_from == b.actor("ttl/t", 0).end_offset  # all are older than a minute then
    assert b.read_start("ttl/t", 0, "audit") == 0  # now: none is older than a minute
    await b.run_retention(FAR_FUTURE)
    # without the TTL audit (committed nothing) would hold everything back
    assert b.actor("ttl/t", 0).start_offset > 0
    await b.close()


async def test_deduplication_off_stores_a_resend_again(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_namespace("nodedup", {"deduplication": False})
    await b.create_topic("nodedup/t")
    await b.create_topic("dedup")
    for topic in ("nodedup/t", "dedup"):
        first = await b.write(topic, 0, make_batch(5, producer="p", first_seq=1))
        again = await b.write(topic, 0, make_batch(5, producer="p", first_seq=1))
        assert first[0].written == 5
        assert (again[0].written, again[0].skipped) == ((5, 0) if topic == "nodedup/t" else (0, 5))
    assert b.actor("nodedup/t", 0).end_offset == 10
    assert b.actor("dedup", 0).end_offset == 5
    # turning it on again: the producer's highest seq_no was kept
    await b.set_namespace_policies("nodedup", {"deduplication": True})
    again = await b.write("nodedup/t", 0, make_batch(5, producer="p", first_seq=1))
    assert (again[0].written, again[0].skipped) == (0, 5)
    await b.close()


async def test_max_message_bytes_is_the_topics_limit(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_namespace("small", {"max_message_bytes": 1000})
    await b.create_topic("small/t")
    await b.create_topic("small/big", policies={"max_message_bytes": 5000})
    assert b.message_limit("small/t") == 1000
    assert b.message_limit("small/big") == 5000
    await b.create_topic("plain")
    assert b.message_limit("plain") == BrokerConfig().message_limit  # the server's
    await b.close()


async def test_max_producers_and_consumers_per_topic(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    await b.create_namespace("few", {"max_producers_per_topic": 2, "max_consumers_per_topic": 1})
    await b.create_topic("few/t")
    p1 = b.count_producer("few/t", "a")
    b.count_producer("few/t", "b")
    with pytest.raises(TooManyProducersError, match="2 live producers"):
        b.count_producer("few/t", "c")
    b.count_producer("few/t", "a")  # "a" reconnecting replaces its old session
    p1.release()  # the old session of "a" ends after its replacement: still counted once
    with pytest.raises(TooManyProducersError):
        b.count_producer("few/t", "c")
    c1 = b.count_consumer("few/t")
    with pytest.raises(TooManyConsumersError, match="max_consumers_per_topic"):
        b.count_consumer("few/t")
    c1.release()
    b.count_consumer("few/t")
    await b.close()


async def test_auto_creation_by_namespace_policy_and_server_setting(tmp_path: Path) -> None:
    b = await open_broker(tmp_path)
    assert (await b.topic_for_use("fresh")).name == "public/default/fresh"
    await b.create_namespace("strict", {"auto_create_topics": False})
    with pytest.raises(UnknownTopicError, match="does not exist"):
        await b.topic_for_use("strict/fresh")
    await b.close()
    b = await open_broker(tmp_path, auto_create_topics=False)
    with pytest.raises(UnknownTopicError):
        await b.topic_for_use("fresh2")
    await b.set_namespace_policies("default", {"auto_create_topics": True})
    assert (await b.topic_for_use("fresh2")).partitions == 1
    await b.close()


@pytest.mark.parametrize(
    ("policies", "message"),
    [
        ({"retention_bytes": -1}, "must not be negative"),
        ({"retention_ms": -5}, "must not be negative"),
        ({"max_message_bytes": 0}, "greater than 0"),
        ({"backlog": 5}, "unknown policy 'backlog'"),
        ({"deduplication": "yes"}, "true or false"),
        ({"default_partitions": 10_001}, "at most 10000"),
        ({"retention_ms": 1, "max_producers_per_topic": -1}, "must not be negative"),
    ],
)
async def test_a_bad_policy_is_refused_and_changes_nothing(
    tmp_path: Path, policies: dict[str, object], message: str
) -> None:
    b = await open_broker(tmp_path)
    await b.create_namespace("ns", {"retention_ms": 5000})
    await b.create_topic("ns/t")
    with pytest.raises(BadRequestError, match=message):
        await b.set_namespace_policies("ns", policies)
    with pytest.raises(BadRequestError, match=message):
        await b.create_namespace("ns2", policies)
    with pytest.raises(BadRequestError, match=message):
        await b.alter_topic("ns/t", policies=policies)
    await b.close()
    b = await open_broker(tmp_path)
    assert dict(b.describe_namespace("ns").policies) == {"retention_ms": 5000}
    assert [ns.path for ns in b.list_namespaces()] == ["public/default", "public/ns"]
    assert dict(b.topic("ns/t").policies) == {} and b.topic("ns/t").retention_ms == 5000
    await b.close()


def test_a_topic_cannot_set_a_namespace_only_policy() -> None:
    with pytest.raises(BadRequestError, match="a topic cannot set it"):
        Policies({"default_partitions": 3}, topic=True)


async def test_backlog_quota_refuses_writes_until_important_consumers_catch_up(
    tmp_path: Path,
) -> None:
    b = await open_broker(tmp_path)
    await b.create_namespace("quota", {"backlog_quota_bytes": 30_000})
    await b.create_topic("quota/t", consumers=[ConsumerConfig("audit", important=True)])
    await b.create_topic("quota/nobody")  # no important consumer: nothing is backlog
    refused = None
    for i in range(200):
        try:
            await b.write("quota/t", 0, make_batch(10, producer="p", first_seq=i * 10 + 1))
        except BacklogQuotaExceededError as err:
            refused = err
            break
    assert refused is not None and refused.retryable
    assert "backlog quota of 30000 bytes" in refused.message
    stored = b.actor("quota/t", 0).end_offset
    assert b.actor("quota/t", 0).log.size_bytes > 30_000
    with pytest.raises(BacklogQuotaExceededError):  # still over: nothing stored
        await b.write("quota/t", 0, make_batch(10, producer="p", first_seq=10_000))
    assert b.actor("quota/t", 0).end_offset == stored
    await b.commit_offset("quota/t", 0, "audit", stored)  # the consumer catches up
    await b.write("quota/t", 0, make_batch(10, producer="p", first_seq=10_000))
    await fill(b, "quota/nobody", batches=60)
    # the topic sets its own: no quota
    await b.alter_topic("quota/t", policies={"backlog_quota_bytes": None})
    await fill(b, "quota/t", batches=60, producer="q")
    await b.close()
