"""The Pulsar-style admin REST (/admin/v2) with a plain HTTP client, against a real server."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pulsar

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
    assert call(base, "DELETE", t + "/subscription/audit")[0] == 204
    assert call(base, "DELETE", t + "/partitions")[0] == 204
    assert call(base, "GET", t + "/partitions")[0] == 404
    assert call(base, "PUT", "/non-persistent/public/default/x/partitions", 1)[0] == 501


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
