"""`weir write` and `weir read` as a person pipes them: framings, formats, positions, commits."""

from __future__ import annotations

import struct
import time
from pathlib import Path

from tests.cli.conftest import Weir, one_line_error
from weir.client.sync import Client


def put(sdk: Client, topic: str, values: list[str], partition: int = 0) -> None:
    """Messages stored through the SDK, for tests about reading them."""
    with sdk.writer(topic, partition=partition) as writer:
        for v in values:
            writer.write(v)


def test_lines_with_key_headers_and_producer_come_back_as_json(weir: Weir, topic_name: str) -> None:
    assert weir("topic", "create", topic_name).code == 0
    wrote = weir(
        "write",
        topic_name,
        "--key",
        "k1",
        "--header",
        "src=cli",
        "--header",
        "v=2",
        "--producer-id",
        "p-1",
        "--json",
        input="one\ntwo\n\nthree",
    ).json()
    assert wrote["messages"] == 4  # the empty line is a message; no final newline needed
    assert (wrote["partition"], wrote["first_offset"], wrote["last_offset"]) == (0, 0, 3)
    read = weir("read", topic_name, "--json").json_lines()
    assert [m["value"] for m in read] == ["one", "two", "", "three"]
    assert [m["offset"] for m in read] == [0, 1, 2, 3]
    assert {(m["key"], m["producer_id"]) for m in read} == {("k1", "p-1")}
    assert read[0]["headers"] == {"src": "cli", "v": "2"}
    assert [m["seq_no"] for m in read] == [1, 2, 3, 4]

    # the same producer id continues its seq_nos; the raw format is the value alone
    assert weir("write", topic_name, "--producer-id", "p-1", input="four\n").code == 0
    assert weir("read", topic_name).text == "one\ntwo\n\nthree\nfour\n"


def test_length_delimited_binary_and_key_delimiter(
    weir: Weir, sdk: Client, topic_name: str, tmp_path: Path
) -> None:
    sdk.create_topic(topic_name)
    payloads = [b"line\nbreak", b"\xff\x00binary", b""]
    framed = b"".join(struct.pack(">I", len(p)) + p for p in payloads)
    assert weir("write", topic_name, "--length-delimited", input=framed).code == 0
    got = weir("read", topic_name, "--json").json_lines()
    assert got[0]["value"] == "line\nbreak"
    assert got[1]["value_encoding"] == "base64" and got[1]["value"] == "/wBiaW5hcnk="
    assert got[2]["value"] == ""
    assert weir("read", topic_name, "--delimiter", r"\0").out == b"".join(
        p + b"\0" for p in payloads
    )

    truncated = weir(
        "write", topic_name, "--length-delimited", input=struct.pack(">I", 10) + b"abc"
    )
    assert truncated.code == 1
    assert "ends inside message 1" in one_line_error(truncated)

    source = tmp_path / "pairs.txt"
    source.write_text("alice:hi\nbob:yo\nnokey\n")
    assert weir("write", topic_name, "--file", str(source), "--key-delimiter", ":").code == 0
    pairs = weir("read", topic_name, "--from", "3", "--format", "{key}={value}").text
    assert pairs == "alice=hi\nbob=yo\n=nokey\n"


def test_read_positions_and_count(weir: Weir, sdk: Client, topic_name: str) -> None:
    sdk.create_topic(topic_name, 2)
    put(sdk, topic_name, ["a0", "a1", "a2"], partition=0)
    before = int(time.time() * 1000)
    put(sdk, topic_name, ["b0", "b1"], partition=1)
    fmt = ["--format", "{partition}/{offset}:{value}"]
    earliest, latest, offset, part, count, since = weir.many(
        ["read", topic_name, *fmt],
        ["read", topic_name, "--from", "latest"],
        ["read", topic_name, "--from", "1", *fmt],
        ["read", topic_name, "--partition", "1", *fmt],
        ["read", topic_name, "--partition", "0", "--count", "2", *fmt],
        ["read", topic_name, "--since", str(before), *fmt],
    )
    assert sorted(earliest.text.split()) == ["0/0:a0", "0/1:a1", "0/2:a2", "1/0:b0", "1/1:b1"]
    assert latest.code == 0 and latest.text == ""
    assert offset.text.split() == ["0/1:a1", "0/2:a2", "1/1:b1"]
    assert part.text.split() == ["1/0:b0", "1/1:b1"]
    assert count.text.split() == ["0/0:a0", "0/1:a1"]
    assert since.text.split() == ["1/0:b0", "1/1:b1"]


def test_consumer_commits_what_it_printed(weir: Weir, sdk: Client, topic_name: str) -> None:
    sdk.create_topic(topic_name)
    put(sdk, topic_name, ["m1", "m2", "m3"])
    assert weir("read", topic_name, "--consumer", "c", "--count", "2").text == "m1\nm2\n"
    lag = weir("consumer", "describe", topic_name, "c", "--json").json()
    assert (lag["partitions"][0]["committed_offset"], lag["lag"]) == (2, 1)
    assert weir("read", topic_name, "--consumer", "c").text == "m3\n"
    assert weir("read", topic_name, "--consumer", "c").text == ""
    assert weir("consumer", "describe", topic_name, "c", "--json").json()["lag"] == 0


def test_follow_prints_messages_written_later(weir: Weir, sdk: Client, topic_name: str) -> None:
    sdk.create_topic(topic_name)
    put(sdk, topic_name, ["first"])
    follower = weir.popen("read", topic_name, "--follow", "--count", "3", "--consumer", "tail")
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline() == b"first\n"  # it is connected and caught up
        put(sdk, topic_name, ["second", "third"])
        out, err = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait(10)
    assert follower.returncode == 0, err
    assert out == b"second\nthird\n"
    assert weir("consumer", "describe", topic_name, "tail", "--json").json()["lag"] == 0


def test_progress_bar_keeps_stdout_clean_and_a_closed_pipe_is_quiet(
    weir: Weir, sdk: Client, topic_name: str
) -> None:
    lines = "".join(f"{i}\n" for i in range(20_000))
    sdk.create_topic(topic_name)
    wrote = weir("write", topic_name, "--progress", input=lines)
    assert wrote.code == 0
    assert "wrote 20000 messages" in wrote.err
    read = weir("read", topic_name, "--progress")
    assert read.text == lines
    assert "reading" in read.err

    head = weir.shell(f"set -o pipefail; weir read {topic_name} | head -n 2")
    assert head.code == 0, head.err
    assert head.text == "0\n1\n"
    assert head.err == ""


def test_unknown_topic_is_a_one_line_error(weir: Weir, topic_name: str) -> None:
    # a topic is created on first use (topics.auto_create), in a namespace that exists
    missing = f"{topic_name}_ns/{topic_name}"
    results = weir.many(["read", missing], ["write", missing])
    for result in results:
        assert result.code == 1
        assert "does not exist" in one_line_error(result)


def test_keyed_lines_spread_by_key_hash_or_stay_pinned(
    weir: Weir, sdk: Client, topic_name: str
) -> None:
    from tests.client.test_routing import pulsar_partition

    sdk.create_topic(topic_name, partitions=3)
    lines = "".join(f"user-{i}:v{i}\n" for i in range(30))
    wrote = weir(
        "write", topic_name, "-K", ":", "--producer-id", "cli", "--json", input=lines
    ).json()
    assert wrote["messages"] == 30 and wrote["partition"] is None
    spread = {int(p): r for p, r in wrote["partitions"].items()}
    assert set(spread) == {pulsar_partition(f"user-{i}", 3) for i in range(30)}
    for m in weir("read", topic_name, "--json").json_lines():
        assert m["partition"] == pulsar_partition(m["key"], 3)
    text = weir("write", topic_name, "-K", ":", "--producer-id", "cli", input=lines)
    # auto seq_nos continue per partition: stored again, summed up per partition
    assert text.code == 0 and text.err.count(" offsets ") == len(spread), text.err
    pinned = weir(
        "write",
        topic_name,
        "-K",
        ":",
        "--routing",
        "pinned",
        "--producer-id",
        "pin",
        "--json",
        input=lines,
    ).json()
    assert pinned["partition"] is not None and len(pinned["partitions"]) == 1
    bad = weir("write", topic_name, "--routing", "hash", input="x\n")
    assert bad.code == 2 and "unknown routing 'hash'" in bad.err


def test_chunking_writes_a_message_over_the_limit(weir: Weir, sdk: Client, topic_name: str) -> None:
    sdk.create_topic(topic_name)
    line = "x" * 5000 + "\n"
    refused = weir("write", topic_name, "--max-message-bytes", "1000", input=line)
    assert refused.code == 1 and "exceeds" in refused.err
    wrote = weir(
        "write", topic_name, "--max-message-bytes", "1000", "--chunking", "--json", input=line
    ).json()
    assert (wrote["messages"], wrote["last_offset"]) == (1, 4)  # 5 chunks, the last at 4
    got = weir("read", topic_name, "--consumer", "c", "--count", "1", "--json").json_lines()
    assert [(m["offset"], len(m["value"])) for m in got] == [(4, 5000)]
