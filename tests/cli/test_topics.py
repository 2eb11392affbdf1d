"""`weir topic ...` and `weir consumer ...` against a real server: tables, JSON, errors."""

from __future__ import annotations

import socket

from tests.cli.conftest import Weir, one_line_error
from weir.client import Consumer
from weir.client.sync import Client


def test_create_describe_alter_list_drop(weir: Weir, topic_name: str) -> None:
    created = weir(
        "topic",
        "create",
        topic_name,
        "--partitions",
        "2",
        "--retention",
        "12h",
        "--max-partition-bytes",
        "1GiB",
        "--consumer",
        "audit",
        "--json",
    ).json()
    assert created["name"] == topic_name
    assert created["partitions"] == 2
    assert created["retention_ms"] == 12 * 3600 * 1000
    assert created["max_partition_bytes"] == 1 << 30
    assert [c["name"] for c in created["consumers"]] == ["audit"]

    table = weir("topic", "describe", topic_name)
    assert table.code == 0, table.err
    assert topic_name in table.text and "12h" in table.text and "audit" in table.text

    altered = weir(
        "topic",
        "alter",
        topic_name,
        "--partitions",
        "3",
        "--retention",
        "none",
        "--add-important-consumer",
        "billing",
        "--drop-consumer",
        "audit",
        "--json",
    ).json()
    assert altered["partitions"] == 3
    assert altered["retention_ms"] is None
    assert altered["consumers"] == [{"name": "billing", "important": True, "read_from_ms": 0}]
    assert [p["partition"] for p in altered["partition_info"]] == [0, 1, 2]

    listed = weir("topic", "list", topic_name[:10], "--json").json()
    assert topic_name in [t["name"] for t in listed]
    assert topic_name in weir("topic", "list").text

    assert weir("topic", "drop", topic_name, "--json").json() == {"dropped": topic_name}
    gone = weir("topic", "describe", topic_name)
    assert gone.code == 1
    assert "does not exist" in one_line_error(gone)


def test_server_refusals_are_one_line_errors_with_status_1(
    weir: Weir, sdk: Client, topic_name: str
) -> None:
    sdk.create_topic(topic_name, 2)
    again, shrink, nobody = weir.many(
        ["topic", "create", topic_name],
        ["topic", "alter", topic_name, "--partitions", "1"],
        ["consumer", "describe", topic_name, "nobody"],
    )
    assert (again.code, shrink.code, nobody.code) == (1, 1, 1)
    assert "already exists" in one_line_error(again)
    assert "never removed" in one_line_error(shrink)
    assert "nobody" in one_line_error(nobody)


def test_bad_arguments_are_one_line_errors_with_status_2(weir: Weir, topic_name: str) -> None:
    cases = [
        (["topic", "create", topic_name, "--partitions", "many"], "--partitions"),
        (["topic", "create", topic_name, "--retention", "forever"], "--retention"),
        (["topic", "create", topic_name, "--codec", "brotli"], "--codec"),
        (["topic", "create", topic_name, "--bogus"], "--bogus"),
        (["topic", "alter", topic_name], "nothing to change"),
        (["topic", "describe"], "topic"),
        (["read", topic_name, "--from", "yesterday"], "--from"),
        (["read", topic_name, "--format", "{nope}"], "{nope}"),
        (["read", topic_name, "--since", "last tuesday"], "--since"),
        (["write", topic_name, "--header", "novalue"], "--header"),
        (["frobnicate"], "frobnicate"),
    ]
    for (args, mentioned), result in zip(cases, weir.many(*(a for a, _ in cases)), strict=True):
        assert result.code == 2, (args, result.err)
        assert mentioned in one_line_error(result), (args, result.err)
    # nothing was created by the refused commands
    assert weir("topic", "describe", topic_name).code == 1


def test_unreachable_server_is_a_one_line_error() -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = Weir(f"127.0.0.1:{port}")("topic", "list", "--timeout", "0.5")
    assert result.code == 1
    assert f"127.0.0.1:{port}" in one_line_error(result)


def test_consumer_describe_and_commit(weir: Weir, sdk: Client, topic_name: str) -> None:
    sdk.create_topic(topic_name, 2)
    with sdk.writer(topic_name, partition=1) as writer:
        for value in ("a", "b", "c"):
            writer.write(value)
    moved = weir("consumer", "commit", topic_name, "ops", "1", "2", "--json").json()
    assert moved["changed"] is True
    assert moved["lag"] == 1
    assert [
        (p["partition"], p["committed_offset"], p["end_offset"], p["lag"])
        for p in moved["partitions"]
    ] == [(0, 0, 0, 0), (1, 2, 3, 1)]
    # refused, so a failure: a script must not take it for a rewind
    back, back_json = weir.many(
        ["consumer", "commit", topic_name, "ops", "1", "0"],
        ["consumer", "commit", topic_name, "ops", "1", "0", "--json"],
    )
    for refused in (back, back_json):
        assert refused.code == 1 and refused.out == b""
        assert one_line_error(refused) == (
            "error: offset 0 is behind the committed offset 2 of consumer 'ops' in partition 1; "
            "nothing changed (use --allow-backwards to rewind)"
        )
    same = weir("consumer", "commit", topic_name, "ops", "1", "2")  # not backwards: fine
    assert same.code == 0, same.err
    assert "committed" in same.text and "lag" in same.text  # the table
    rewound = weir("consumer", "commit", topic_name, "ops", "1", "0", "--allow-backwards", "--json")
    assert rewound.json()["lag"] == 3


def test_create_if_not_exists(weir: Weir, topic_name: str) -> None:
    created = weir("topic", "create", topic_name, "--partitions", "2", "--if-not-exists")
    assert created.code == 0, created.err
    assert created.text.startswith(f"created topic {topic_name} with 2 partitions")
    again = weir("topic", "create", topic_name, "--partitions", "2", "--if-not-exists")
    assert again.code == 0, again.err
    assert again.text.startswith(f"topic {topic_name} already exists with 2 partitions")
    assert (
        weir("topic", "create", topic_name, "--if-not-exists", "--json").json()["partitions"] == 2
    )
    other = weir("topic", "create", topic_name, "--partitions", "4", "--if-not-exists")
    assert other.code == 1
    assert one_line_error(other) == (
        f"error: topic {topic_name!r} already exists with 2 partitions, not 4"
    )
    plain = weir("topic", "create", topic_name, "--partitions", "2")
    assert plain.code == 1 and "already exists" in one_line_error(plain)


def test_topic_list_never_cuts_a_name(weir: Weir, sdk: Client, topic_name: str) -> None:
    """The table is 80 columns wide in a pipe: long names must still print whole."""
    names = [f"{topic_name}_{'x' * 50}_{i}" for i in range(3)]
    for name in names:
        sdk.create_topic(name, partitions=1, consumers=[Consumer("a-consumer-with-a-long-name")])
    text = weir("topic", "list", topic_name).text
    for name in names:
        assert name in text, text


def test_compact_then_read_compacted(weir: Weir, sdk: Client, topic_name: str) -> None:
    """`weir topic compact --wait`, `compaction-status --json`, and `weir read --compacted`:
    the latest of each key at its own offset, then the tail written after the run."""
    sdk.create_topic(topic_name, partitions=1)
    with sdk.writer(topic_name) as w:
        for k, v in [("a", "1"), ("b", "1"), ("a", "2"), ("c", "1"), ("b", "")]:
            w.write(v, key=k)
    done = weir("topic", "compact", topic_name, "--wait", "--json").json()
    assert done["running"] is False and done["keys"] == 2
    status = weir("topic", "compaction-status", topic_name, "--json").json()
    assert status["partitions"][0]["position"] == 5
    assert status["partitions"][0]["tombstones"] == 1
    with sdk.writer(topic_name) as w:
        w.write("3", key="c")
    fmt = ["--format", "{offset} {key}={value}"]
    got = weir("read", topic_name, "--compacted", *fmt)
    assert got.code == 0, got.err
    assert got.text.splitlines() == ["2 a=2", "3 c=1", "4 b=", "5 c=3"]
    # the whole log without it; --compacted is for offset ranges, not subscriptions
    assert len(weir("read", topic_name, *fmt).text.splitlines()) == 6
    refused = weir("read", topic_name, "--compacted", "--subscription", "s")
    assert refused.code == 2 and "--compacted" in one_line_error(refused)
