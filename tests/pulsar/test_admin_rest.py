"""The Pulsar-style admin REST (/admin/v2) with a plain HTTP client, against a real server."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pulsar
import pytest

from tests.conftest import ServerProcess


def call(base: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        base + "/admin/v2" + path,
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as err:
        raw = err.read()
        return err.code, json.loads(raw) if raw else None


def test_tenants_namespaces_and_policies(pulsar_server: ServerProcess) -> None:
    base = pulsar_server.http_url
    assert call(base, "PUT", "/tenants/acme", {"allowedClusters": ["weir"]})[0] == 204
    assert "acme" in call(base, "GET", "/tenants")[1]
    assert call(base, "PUT", "/namespaces/acme/shop")[0] == 204
    assert call(base, "PUT", "/namespaces/acme/shop")[0] == 409
    assert call(base, "GET", "/namespaces/acme")[1] == ["acme/shop"]
    assert call(base, "POST", "/namespaces/acme/shop/deduplication", False)[0] == 204
    assert call(base, "GET", "/namespaces/acme/shop/deduplication")[1] is False
    retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10}
    assert call(base, "POST", "/namespaces/acme/shop/retention", retention)[0] == 204
    assert call(base, "GET", "/namespaces/acme/shop/retention")[1] == retention
    assert call(base, "POST", "/namespaces/acme/shop/messageTTL", 120)[0] == 204
    assert call(base, "GET", "/namespaces/acme/shop/messageTTL")[1] == 120
    quota = {"limitSize": 1 << 20, "policy": "producer_request_hold"}
    assert call(base, "POST", "/namespaces/acme/shop/backlogQuota", quota)[0] == 204
    assert (
        call(base, "GET", "/namespaces/acme/shop/backlogQuotaMap")[1]["destination_storage"][
            "limitSize"
        ]
        == 1 << 20
    )
    status, err = call(base, "POST", "/namespaces/acme/shop/messageTTL", "soon")
    assert status == 400 and "seconds" in err["reason"]
    assert call(base, "GET", "/namespaces/acme/nope/retention")[0] == 404
    assert call(base, "DELETE", "/namespaces/acme/shop")[0] == 204
    assert call(base, "DELETE", "/tenants/acme")[0] == 204


def test_topics_partitions_stats_and_subscriptions(pulsar_server: ServerProcess) -> None:
    base = pulsar_server.http_url
    t = "/persistent/public/default/rest-orders"
    assert call(base, "PUT", t + "/partitions", 3)[0] == 204
    assert call(base, "PUT", t + "/partitions", 3)[0] == 409
    assert call(base, "GET", t + "/partitions")[1] == {"partitions": 3}
    assert call(base, "POST", t + "/partitions", 4)[0] == 204
    assert call(base, "GET", t + "/partitions")[1] == {"partitions": 4}
    assert call(base, "POST", t + "/partitions", 2)[0] == 400  # never shrinks
    names = call(base, "GET", "/persistent/public/default")[1]
    assert "persistent://public/default/rest-orders-partition-3" in names
    assert (
        "persistent://public/default/rest-orders"
        in call(base, "GET", "/persistent/public/default/partitioned")[1]
    )
    client = pulsar.Client(pulsar_server.pulsar_url, operation_timeout_seconds=5)
    try:
        producer = client.create_producer("rest-orders")
        for i in range(8):
            producer.send(b"%d" % i)
        assert call(base, "PUT", t + "/subscription/audit", "earliest")[0] == 204
        assert call(base, "GET", t + "/subscriptions")[1] == ["audit"]
        stats = call(base, "GET", t + "/stats")[1]
        assert stats["msgInCounter"] == 8
        assert stats["subscriptions"]["audit"]["msgBacklog"] == 8
        assert call(base, "POST", t + "/subscription/audit/skip_all")[0] == 204
        assert call(base, "GET", t + "/stats")[1]["subscriptions"]["audit"]["msgBacklog"] == 0
        assert call(base, "POST", t + "/subscription/audit/resetcursor/0")[0] == 204
        assert call(base, "GET", t + "/stats")[1]["subscriptions"]["audit"]["msgBacklog"] == 8
        internal = call(base, "GET", t + "/internalStats")[1]
        assert internal["numberOfEntries"] == 8 and "audit" in internal["cursors"]
        producer.close()
    finally:
        client.close()
    assert call(base, "GET", t + "/compaction")[1] == {"status": "NOT_RUN", "lastError": ""}
    assert call(base, "PUT", t + "/compaction")[0] == 204  # weir compaction, every partition
    deadline = time.monotonic() + 60
    while (status := call(base, "GET", t + "/compaction")[1])["status"] == "RUNNING":
        assert time.monotonic() < deadline, "the compaction run never ended"
        time.sleep(0.05)
    assert status == {"status": "SUCCESS", "lastError": ""}
    assert call(base, "PUT", "/persistent/public/default/nope/compaction")[0] == 404
    # weir keeps one topic per name: the non-persistent name of it is a topic that is not
    assert call(base, "GET", "/non-persistent/public/default/rest-orders/stats")[0] == 404
    assert call(base, "DELETE", t + "/subscription/audit")[0] == 204
    assert call(base, "DELETE", t + "/partitions")[0] == 204
    assert call(base, "GET", t + "/partitions")[0] == 404


def test_reset_cursor_by_time_by_id_and_skip(pulsar_server: ServerProcess) -> None:
    base = pulsar_server.http_url
    topic = "rest-reset"
    t = f"/persistent/public/default/{topic}"
    client = pulsar.Client(pulsar_server.pulsar_url, operation_timeout_seconds=5)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        for i in range(6):
            producer.send(b"%d" % i)
        got = [consumer.receive(5000) for _ in range(6)]
        for m in got:
            consumer.acknowledge(m)
        consumer.close()  # acks durable
        stamps = [m.publish_timestamp() for m in got]
        # by time: from the first message published at or after that time
        assert call(base, "POST", f"{t}/subscription/s/resetcursor/{stamps[3]}")[0] == 204
        first = next(i for i, s in enumerate(stamps) if s >= stamps[3])
        assert call(base, "GET", t + "/stats")[1]["subscriptions"]["s"]["msgBacklog"] == 6 - first
        consumer = client.subscribe(topic, "s")
        assert consumer.receive(5000).data() == b"%d" % first
        consumer.close()
        # by message id
        mid = got[1].message_id()
        body = {"ledgerId": mid.ledger_id(), "entryId": mid.entry_id(), "batchIndex": -1}
        assert call(base, "POST", f"{t}/subscription/s/resetcursor", body)[0] == 204
        assert call(base, "GET", t + "/stats")[1]["subscriptions"]["s"]["msgBacklog"] == 5
        # skip: the next two go
        assert call(base, "POST", f"{t}/subscription/s/skip/2")[0] == 204
        assert call(base, "GET", t + "/stats")[1]["subscriptions"]["s"]["msgBacklog"] == 3
        consumer = client.subscribe(topic, "s")
        assert consumer.receive(5000).data() == b"3"
        consumer.close()
        producer.close()
    finally:
        client.close()


def test_non_persistent_topics(pulsar_server: ServerProcess) -> None:
    base = pulsar_server.http_url
    t = "/non-persistent/public/default/rest-live"
    url = "non-persistent://public/default/rest-live"
    assert call(base, "PUT", t + "/partitions", 2)[0] == 204
    assert call(base, "PUT", t + "/partitions", 2)[0] == 409
    assert call(base, "PUT", "/persistent/public/default/rest-live/partitions", 2)[0] == 409
    assert call(base, "GET", "/persistent/public/default/rest-live/partitions")[0] == 404
    assert call(base, "POST", t + "/partitions", 3)[0] == 204
    assert call(base, "GET", t + "/partitions")[1] == {"partitions": 3}
    assert f"{url}-partition-2" in call(base, "GET", "/non-persistent/public/default")[1]
    assert url in call(base, "GET", "/non-persistent/public/default/partitioned")[1]
    assert url not in call(base, "GET", "/persistent/public/default/partitioned")[1]
    listed = call(base, "GET", "/persistent/public/default")[1]
    assert not [n for n in listed if "rest-live" in n]
    ns = "/namespaces/public/default/topics"
    assert f"{url}-partition-0" in call(base, "GET", ns + "?mode=NON_PERSISTENT")[1]
    assert f"{url}-partition-0" in call(base, "GET", ns + "?mode=ALL")[1]
    assert f"{url}-partition-0" not in call(base, "GET", ns)[1]  # PERSISTENT by default

    client = pulsar.Client(pulsar_server.pulsar_url, operation_timeout_seconds=5)
    try:
        assert client.get_topic_partitions(url) == [f"{url}-partition-{p}" for p in range(3)]
        with pytest.raises(pulsar.NotAllowedError):  # the topic is non-persistent
            client.create_producer("persistent://public/default/rest-live")
        consumer = client.subscribe(url, "live", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(
            url, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution
        )
        ids = [producer.send(b"%d" % i) for i in range(9)]
        assert {mid.partition() for mid in ids} == {0, 1, 2}
        got = [consumer.receive(5000) for _ in range(9)]
        assert sorted(m.data() for m in got) == sorted(b"%d" % i for i in range(9))
        assert call(base, "GET", t + "/subscriptions")[1] == ["live"]
        stats = call(base, "GET", t + "/stats")[1]
        assert (stats["msgInCounter"], stats["msgOutCounter"], stats["storageSize"]) == (9, 9, 0)
        assert stats["subscriptions"]["live"]["type"] == "Shared"
        assert len(stats["subscriptions"]["live"]["consumers"]) == 3  # one per partition
        assert sum(p["msgInCounter"] for p in stats["partitions"].values()) == 9
        internal = call(base, "GET", t + "/internalStats")[1]
        assert internal["entriesAddedCounter"] == 9 and internal["numberOfEntries"] == 0
        assert list(internal["cursors"]) == ["live"]
        # what needs stored messages or a kept position is refused, saying why
        for method, path in [
            ("PUT", "/subscription/other"),
            ("POST", "/subscription/live/skip_all"),
            ("POST", "/subscription/live/resetcursor/0"),
            ("PUT", "/compaction"),
        ]:
            status, err = call(base, method, t + path)
            assert status == 400 and "non-persistent" in err["reason"], (path, status, err)
        # a subscription or topic in use is not deleted (force would: the client, told,
        # comes back and creates them again, as a Pulsar client does)
        assert call(base, "DELETE", t + "/subscription/live")[0] == 412
        assert call(base, "DELETE", t + "/partitions")[0] == 412
        consumer.close()
        producer.close()
    finally:
        client.close()
    # the subscription outlives its consumers until it is deleted
    assert call(base, "GET", t + "/subscriptions")[1] == ["live"]
    assert call(base, "DELETE", t + "/subscription/live")[0] == 204
    assert call(base, "GET", t + "/subscriptions")[1] == []
    assert call(base, "DELETE", t + "/partitions")[0] == 204
    assert call(base, "GET", t + "/partitions")[0] == 404

    # a non-partitioned one
    single = "/non-persistent/public/default/rest-live-one"
    assert call(base, "PUT", single)[0] == 204
    assert call(base, "GET", single + "/partitions")[1] == {"partitions": 0}
    assert (
        "non-persistent://public/default/rest-live-one"
        in call(base, "GET", "/non-persistent/public/default")[1]
    )
    assert call(base, "GET", single + "/stats")[1]["partitions"] == {}
    assert call(base, "DELETE", single)[0] == 204
    assert call(base, "DELETE", single)[0] == 404
