"""`weir subscription ...` against a real server: tables, JSON, errors."""

from __future__ import annotations

from tests.cli.conftest import Weir, one_line_error
from weir.client.sync import Client


def test_create_list_describe_delete(weir: Weir, topic_name: str) -> None:
    with Client(weir.endpoint) as client:
        client.create_topic(topic_name, partitions=2)
        with client.writer(topic_name, partition=1) as w:
            for i in range(3):
                w.write(b"%d" % i)
    created = weir(
        "subscription",
        "create",
        topic_name,
        "jobs",
        "--type",
        "shared",
        "--initial-position",
        "earliest",
        "--json",
    ).json()
    assert (created["name"], created["type"], created["backlog"]) == ("jobs", "shared", 3)
    assert [p["mark_delete"] for p in created["partitions"]] == [0, 0]

    listed = weir("subscription", "list", topic_name, "--json").json()
    assert [(s["name"], s["backlog"]) for s in listed] == [("jobs", 3)]
    table = weir("subscription", "list", topic_name)
    assert table.code == 0 and "jobs" in table.text and "shared" in table.text

    with Client(weir.endpoint) as client:
        c = client.subscribe(topic_name, "jobs", type="shared").wait_connected()
        got = []
        while len(got) < 3:
            got.extend(c.receive_batch(timeout=10))
        c.acknowledge(got[0])
        described = weir("subscription", "describe", topic_name, "jobs")
        assert described.code == 0, described.err
        assert "mark-delete" in described.text and c.consumer_name in described.text
        doc = weir("subscription", "describe", topic_name, "jobs", "--json").json()
        assert (doc["backlog"], doc["unacked"], len(doc["consumers"])) == (2, 2, 1)
        # the rates of the last 10 s (their values: tests/broker/test_subscription_admin.py)
        assert {"msg_rate_out", "msg_rate_redeliver", "ack_rate"} <= set(doc)
        assert "msg/s acknowledged" in described.text
        busy = weir("subscription", "delete", topic_name, "jobs")
        assert busy.code == 1 and "attached" in one_line_error(busy)
        c.close()

    back = weir("subscription", "seek", topic_name, "jobs", "--offset", "1=1", "--json").json()
    assert [p["mark_delete"] for p in back["partitions"]] == [0, 1] and back["backlog"] == 2
    back = weir("subscription", "seek", topic_name, "jobs", "--time", "0", "--json").json()
    assert back["backlog"] == 3
    neither = weir("subscription", "seek", topic_name, "jobs")
    assert neither.code == 2 and "--offset" in one_line_error(neither)
    malformed = weir("subscription", "seek", topic_name, "jobs", "--offset", "1:1")
    assert malformed.code == 2 and "PARTITION=OFFSET" in one_line_error(malformed)

    deleted = weir("subscription", "delete", topic_name, "jobs", "--json").json()
    assert deleted == {"deleted": "jobs", "topic": topic_name}
    missing = weir("subscription", "describe", topic_name, "jobs")
    assert missing.code == 1 and "does not exist" in one_line_error(missing)
    bad = weir("subscription", "create", topic_name, "x", "--type", "round-robin")
    assert bad.code == 1 and "type" in one_line_error(bad)


def test_read_from_a_subscription_acknowledges_what_it_printed(weir: Weir, topic_name: str) -> None:
    with Client(weir.endpoint) as client:
        client.create_topic(topic_name, partitions=2)
        with client.writer(topic_name, producer_id="w") as w:
            for i in range(200):
                w.write(b"%d" % i)
    first = weir("read", topic_name, "--subscription", "s", "-n", "3")
    assert first.code == 0, first.err
    assert first.text.split() == ["0", "1", "2"]
    # two readers share the rest: every message printed once, then both stop
    a, b = weir.many(
        ["read", topic_name, "--subscription", "s", "--type", "shared"],
        ["read", topic_name, "--subscription", "s", "--type", "shared"],
    )
    assert a.code == 0 and b.code == 0, a.err + b.err
    printed = a.text.split() + b.text.split()
    assert sorted(map(int, printed)) == list(range(3, 200))
    with Client(weir.endpoint) as client:
        assert client.describe_subscription(topic_name, "s").backlog == 0
    clash = weir("read", topic_name, "--subscription", "s", "--consumer", "c")
    assert clash.code == 2 and "--subscription" in one_line_error(clash)
    at = weir("read", topic_name, "--subscription", "s", "--from", "5")
    assert at.code == 2 and "earliest or latest" in one_line_error(at)


def test_skip_acknowledges_the_oldest_or_everything(weir: Weir, topic_name: str) -> None:
    with Client(weir.endpoint) as client:
        client.create_topic(topic_name, partitions=2)
        for p, n in ((0, 3), (1, 2)):
            with client.writer(topic_name, partition=p, producer_id=f"w{p}") as w:
                for i in range(n):
                    w.write(b"%d" % i)
        client.create_subscription(topic_name, "s", initial_position="earliest")
    two = weir("subscription", "skip", topic_name, "s", "--count", "2", "--json").json()
    assert two["skipped"] == 4 and two["subscription"]["backlog"] == 1
    assert [p["mark_delete"] for p in two["subscription"]["partitions"]] == [2, 2]
    rest = weir("subscription", "skip", topic_name, "s", "--all", "--partition", "0")
    assert rest.code == 0 and "skipped 1 message" in rest.text
    with Client(weir.endpoint) as client:
        assert client.describe_subscription(topic_name, "s").backlog == 0
        with client.writer(topic_name, partition=1, producer_id="w1") as w:
            w.write(b"new")
        assert client.skip_subscription(topic_name, "s") == 1  # --all, every partition
    neither = weir("subscription", "skip", topic_name, "s")
    assert neither.code == 2 and "--count" in one_line_error(neither)
    zero = weir("subscription", "skip", topic_name, "s", "--count", "0")
    assert zero.code == 2
    nowhere = weir("subscription", "skip", topic_name, "s", "--all", "--partition", "5")
    assert nowhere.code == 1 and "partitions 0..1" in one_line_error(nowhere)
    unknown = weir("subscription", "skip", topic_name, "nope", "--all")
    assert unknown.code == 1 and "does not exist" in one_line_error(unknown)
