"""`weir tenant ...`, `weir namespace ...` and topic policies, run as a user runs them
against a real server: human output, --json, one-line errors."""

from __future__ import annotations

from tests.cli.conftest import Weir, one_line_error


def test_tenant_and_namespace_lifecycle(weir: Weir, topic_name: str) -> None:
    tenant = f"cli-{topic_name}"[:60]
    created = weir("tenant", "create", tenant)
    assert created.code == 0 and created.text == f"created tenant {tenant}\n"
    ns = weir(
        "namespace",
        "create",
        f"{tenant}/shop",
        "--policy",
        "retention_ms=12h",
        "--policy",
        "max_message_bytes=1MiB",
        "--json",
    )
    assert ns.code == 0, ns.err
    assert ns.json()["policies"] == {"retention_ms": 43_200_000, "max_message_bytes": 1 << 20}
    listed = weir("tenant", "list", "--json").json()
    assert {"name": tenant, "namespaces": ["shop"]}.items() <= next(
        t for t in listed if t["name"] == tenant
    ).items()
    assert "public" in weir("tenant", "list").text
    assert weir("tenant", "describe", tenant, "--json").json()["namespaces"] == ["shop"]
    assert weir("namespace", "list", tenant, "--json").json()[0]["name"] == f"{tenant}/shop"
    table = weir("namespace", "list", tenant).text
    assert f"{tenant}/shop" in table and "retention_ms=12h" in table

    # a topic inherits; the namespace's changes reach it
    topic = f"{tenant}/shop/orders"
    assert weir("topic", "create", topic).code == 0
    assert weir("topic", "describe", topic, "--json").json()["retention_ms"] == 43_200_000
    changed = weir("namespace", "set-retention", f"{tenant}/shop", "--time", "1d", "--size", "1GiB")
    assert changed.code == 0, changed.err
    assert "retention_ms" in changed.text and "1d" in changed.text
    doc = weir("topic", "describe", topic, "--json").json()
    assert (doc["retention_ms"], doc["retention_bytes"]) == (86_400_000, 1 << 30)
    dedup = weir("namespace", "set-deduplication", f"{tenant}/shop", "off", "--json").json()
    assert dedup["policies"]["deduplication"] is False
    ttl = weir("namespace", "set-policy", f"{tenant}/shop", "message_ttl_ms=1h", "--json").json()
    assert ttl["effective_policies"]["message_ttl_ms"] == 3_600_000
    evict = weir(
        "namespace",
        "set-policy",
        f"{tenant}/shop",
        "backlog_quota_policy=Consumer_Backlog_Eviction",
    )
    assert evict.code == 0 and "consumer_backlog_eviction" in evict.text
    removed = weir("namespace", "remove-policy", f"{tenant}/shop", "message_ttl_ms", "--json")
    assert "message_ttl_ms" not in removed.json()["policies"]
    described = weir("namespace", "describe", f"{tenant}/shop")
    assert "orders" in described.text and "deduplication" in described.text

    # a topic's own policy, and back to the namespace's
    own = weir("topic", "alter", topic, "--policy", "retention_ms=2h", "--json").json()
    assert own["retention_ms"] == 7_200_000 and own["policies"] == {"retention_ms": 7_200_000}
    assert "own policies" in weir("topic", "describe", topic).text
    back = weir("topic", "alter", topic, "--inherit", "retention_ms", "--json").json()
    assert back["retention_ms"] == 86_400_000 and back["policies"] == {}

    # not empty: one line, exit 1, nothing changed
    refused = weir("namespace", "delete", f"{tenant}/shop")
    assert refused.code == 1 and "is not empty" in one_line_error(refused)
    refused = weir("tenant", "delete", tenant)
    assert refused.code == 1 and "is not empty" in one_line_error(refused)
    assert weir("topic", "drop", topic).code == 0
    assert (
        weir("namespace", "delete", f"{tenant}/shop").text == f"deleted namespace {tenant}/shop\n"
    )
    assert weir("tenant", "delete", tenant, "--json").json() == {"deleted": tenant}
    gone = weir("tenant", "describe", tenant)
    assert gone.code == 1 and "does not exist" in one_line_error(gone)


def test_bad_input_is_one_line_and_changes_nothing(weir: Weir, topic_name: str) -> None:
    before = weir("namespace", "list", "--json").json()
    for args, message in (
        (["namespace", "create", "a/b/c"], "3 parts"),
        (["namespace", "create", "x-" + topic_name[:40], "--policy", "retention_bytes=-1"], "size"),
        (["namespace", "create", "x-" + topic_name[:40], "--policy", "nope=1"], "unknown policy"),
        (["namespace", "create", "x-" + topic_name[:40], "--policy", "novalue"], "KEY=VALUE"),
        (["namespace", "set-deduplication", "default", "maybe"], "on or off"),
        (["namespace", "set-policy", "default", "max_producers_per_topic=-3"], "negative"),
        (["namespace", "set-policy", "default", "backlog_quota_policy=drop"], "is one of"),
        (["namespace", "set-retention", "default"], "nothing to change"),
        (["tenant", "create", "bad name"], "bad tenant name"),
        (
            ["namespace", "create", "default", "--policy", "retention_ms=1h", "--if-not-exists"],
            "already exists with retention_ms=unset, not 1h",
        ),
        (["topic", "create", "a/b/c/d"], "4 parts"),
    ):
        result = weir(*args)
        assert result.code != 0, args
        assert message in one_line_error(result), (args, result.err)
    assert weir("namespace", "list", "--json").json() == before
