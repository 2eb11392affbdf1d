"""`weir write` and `weir read` when things go wrong: refusals, a server killed or paused
mid-stream, a wrong port, size limits; and the edges of positions and progress bars."""

from __future__ import annotations

import collections
import os
import pty
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import ROOT, Result, Weir
from tests.conftest import ServerProcess
from weir.client.sync import Client

PER_PARTITION = 60_000  # enough that a read takes a moment, small enough to stay quick


def last_error(result: Result) -> str:
    """The one `error:` line a failed command ends with (notices such as "reconnecting..."
    may come before it)."""
    lines = result.err.splitlines()
    assert lines and lines[-1].startswith("error: "), result.err
    assert sum(line.startswith("error: ") for line in lines) == 1, result.err
    return lines[-1]


@pytest.fixture
def refused() -> Iterator[str]:
    """A loopback endpoint that refuses connections: the port is bound (so no other
    process can take it meanwhile) but not listening."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{s.getsockname()[1]}"


def wait_until(check: Callable[[], bool], timeout: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def fill(sdk: Client, topic: str, partitions: int = 2, n: int = PER_PARTITION) -> list[bytes]:
    """``n`` numbered messages in each partition; returns every value, as `weir read` prints them."""
    sdk.create_topic(topic, partitions)
    values = []
    for p in range(partitions):
        batch = [b"%d-%06d" % (p, i) for i in range(n)]
        with sdk.writer(topic, partition=p) as w:
            w.write_many(batch)
        values.extend(batch)
    return values


def first_line(proc: subprocess.Popen[bytes]) -> bytes:
    """The first line a command printed: it is running (and not done, with output left)."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read().decode() if proc.stderr else ""
    return line


def in_background(fn: Callable[[], Result]) -> Callable[[], Result]:
    """Start ``fn`` in a thread; the returned call waits for its result."""
    box: list[Result] = []
    t = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    t.start()

    def result() -> Result:
        t.join(120)
        assert box, "the command did not finish"
        return box[0]

    return result


def finish(proc: subprocess.Popen[bytes], first: bytes = b"", timeout: float = 60) -> Result:
    """Wait for a command started with `popen`; its output (after ``first``, read already)."""
    out: list[bytes] = []
    err: list[bytes] = []
    pumps = [
        threading.Thread(target=lambda: out.append(proc.stdout.read()) if proc.stdout else None),
        threading.Thread(target=lambda: err.append(proc.stderr.read()) if proc.stderr else None),
    ]
    for t in pumps:
        t.start()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        for t in pumps:
            t.join(10)
        raise AssertionError(
            f"still running after {timeout} s; stderr:\n{b''.join(err).decode()}"
        ) from None
    for t in pumps:
        t.join(10)
    return Result(proc.returncode, first + b"".join(out), b"".join(err).decode())


@pytest.fixture
def own(server: ServerProcess) -> Iterator[tuple[Weir, Client]]:
    """`weir` and the SDK aimed at a server of the test's own (to kill or pause it)."""
    c = Client(server.endpoint)
    yield Weir(server.endpoint), c
    c.close()


# ---------------------------------------------------------------------------- weir write


def test_write_to_a_full_partition_prints_the_reason_and_fails(
    weir: Weir, sdk: Client, topic_name: str
) -> None:
    """Refused writes used to be retried silently for ever: `seq 5 | weir write ovf
    --timeout 5` was still running at 20 s."""
    sdk.create_topic(topic_name, max_partition_messages=3, retention=None)
    assert weir("write", topic_name, input="a\nb\nc\n").code == 0
    result = weir("write", topic_name, "--timeout", "2", input="1\n2\n3\n4\n5\n", timeout=60)
    assert result.code == 1
    error = last_error(result)
    assert "holds 3 messages, limit 3" in error
    assert "gave up after 2 s, --timeout; 5 of 5 messages not acknowledged" in error
    assert "reconnecting to" in result.err  # said while it waited


def test_write_gives_up_mid_stream_when_the_server_dies(
    server: ServerProcess, own: tuple[Weir, Client], topic_name: str
) -> None:
    weir, sdk = own
    sdk.create_topic(topic_name)
    proc = subprocess.Popen(
        [sys.executable, "-m", "weir.cli", "write", topic_name, "--timeout", "2"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=weir.env(),
        cwd=ROOT,
    )
    assert proc.stdin is not None
    proc.stdin.write(b"before\n")
    proc.stdin.flush()
    wait_until(lambda: sdk.describe_topic(topic_name).messages == 1, what="the first line")
    server.kill()
    proc.stdin.write(b"after\n")
    proc.stdin.close()
    result = finish(proc)  # used to wait silently for over a minute
    assert result.code == 1
    assert "gave up after 2 s, --timeout" in last_error(result)
    assert f"reconnecting to {server.endpoint}..." in result.err


def test_refused_connection_is_reported_at_once(weir: Weir, topic_name: str, refused: str) -> None:
    endpoint = refused
    write, read, follow = weir.many(
        ["write", topic_name, "-e", endpoint],
        ["read", topic_name, "-e", endpoint],
        ["read", topic_name, "-e", endpoint, "--follow"],
    )
    for result in (write, read, follow):
        assert result.code == 1
        assert last_error(result) == f"error: cannot connect to {endpoint}: connection refused"


def test_messages_over_the_size_limit_are_refused(
    tmp_path: Path, sdk: Client, weir: Weir, topic_name: str
) -> None:
    sdk.create_topic(topic_name)
    too_big = weir("write", topic_name, "--max-message-bytes", "10", input="short\n12345678901\n")
    assert too_big.code == 1
    assert last_error(too_big) == (
        "error: message 2: a message of 11 bytes exceeds max_message_bytes of 10 bytes "
        "(1 message sent before it)"
    )
    assert weir("write", topic_name, "--max-message-bytes", "lots", input="x").code == 2

    limited = ServerProcess(tmp_path / "limited", env={"WEIR_LIMITS_MAX_MESSAGE_BYTES": "1KiB"})
    limited.start()
    try:
        small = Weir(limited.endpoint)
        with Client(limited.endpoint) as c:
            c.create_topic(topic_name)
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "weir.cli", "write", topic_name, *extra],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=small.env(),
                cwd=ROOT,
            )
            for extra in ([], ["--max-message-bytes", "1MiB"], [])
        ]
        results = [
            p.communicate(data, timeout=60)
            for p, data in zip(procs, [b"x" * 1025] * 2 + [b"x" * 1024], strict=True)
        ]
        over, lifted, at = (
            Result(p.returncode, out, err.decode())
            for p, (out, err) in zip(procs, results, strict=True)
        )
        assert over.code == 1
        assert "a message of 1025 bytes exceeds the server's limit of 1024 bytes" in over.err
        assert lifted.code == 1  # a setting above the server's limit does not lift it
        assert at.code == 0, at.err
    finally:
        limited.stop()


def test_one_message_is_singular_and_f_means_format_only(
    weir: Weir, sdk: Client, topic_name: str, tmp_path: Path
) -> None:
    sdk.create_topic(topic_name)
    one = weir("write", topic_name, "--partition", "0", "--json", input="only")
    assert one.json()["producer_id"]  # generated with --partition too
    single = weir("write", topic_name, input="one more")
    assert "wrote 1 message (8 B)" in single.err
    source = tmp_path / "m.txt"
    source.write_text("from file\n")
    assert weir("write", topic_name, "-f", str(source)).code == 2  # -f is read's --format
    assert weir("write", topic_name, "--file", str(source)).code == 0
    assert weir("read", topic_name, "-f", "{offset}:{value}").text.split("\n")[:3] == [
        "0:only",
        "1:one more",
        "2:from file",
    ]


def test_writing_a_file_shows_progress_in_mib_on_a_terminal(
    weir: Weir, sdk: Client, topic_name: str, tmp_path: Path
) -> None:
    """The bar used to depend on stdin, not on the file: typed at a terminal, `weir write
    --file big.txt` showed none. The bar and the summary count MiB alike."""
    sdk.create_topic(topic_name)
    source = tmp_path / "big.txt"
    source.write_bytes(b"".join(b"%07d\n" % i for i in range(300_000)))  # 2.3 MiB
    primary, terminal = pty.openpty()  # the user's terminal: stdin and stderr
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "weir.cli", "write", topic_name, "--file", str(source)],
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=terminal,
            env=weir.env({"TERM": "xterm", "COLUMNS": "120"}),
            cwd=ROOT,
        )
        os.close(terminal)
        shown = bytearray()
        reader = threading.Thread(target=drain, args=(primary, shown), daemon=True)
        reader.start()
        assert proc.wait(60) == 0
        reader.join(10)
    finally:
        os.close(primary)
    text = shown.decode(errors="replace")
    assert f"writing {topic_name}" in text, text  # the bar
    assert "/2.3 MiB" in text and "MB" not in text.replace("MiB", ""), text
    assert "wrote 300000 messages (2.0 MiB)" in text, text  # the data, without newlines


def drain(fd: int, into: bytearray) -> None:
    """Everything written to a pty, until it closes."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return
        if not chunk:
            return
        into += chunk


# ---------------------------------------------------------------------------- weir read


def test_read_says_so_when_the_server_dies_and_resumes_exactly_after_a_restart(
    server: ServerProcess, own: tuple[Weir, Client], topic_name: str
) -> None:
    """`weir read TOPIC` used to stop early on a lost server and exit 0 with part of the
    topic; a --follow read waited silently for ever."""
    weir, sdk = own
    values = fill(sdk, topic_name)
    # a restart within --timeout: the read goes on from where it was, nothing twice
    survivor = weir.popen("read", topic_name, "--timeout", "60")
    first = first_line(survivor)
    server.kill()
    # it prints what it has, then finds the server gone: it must retry until it is back
    result_of = in_background(lambda: finish(survivor, first))
    server.start()
    result = result_of()
    assert result.code == 0, result.err
    assert sorted(result.out.split()) == sorted(values)
    assert f"reconnecting to {server.endpoint}..." in result.err

    # the server stays away: the read ends with an error that says where it stopped
    plain = weir.popen("read", topic_name, "--timeout", "2")
    follow = weir.popen("read", topic_name, "--timeout", "2", "--follow")
    consumer = weir.popen("read", topic_name, "--timeout", "2", "--consumer", "c")
    firsts = [first_line(proc) for proc in (plain, follow, consumer)]  # reading, not done
    server.kill()
    plain_r, follow_r, consumer_r = (
        finish(p, f) for p, f in zip((plain, follow, consumer), firsts, strict=True)
    )
    assert plain_r.code == 1
    error = last_error(plain_r)
    assert "read stopped before the end: no answer from" in error
    assert f"of {PER_PARTITION}" in error  # where it stopped
    assert len(plain_r.out.split()) < len(values)
    assert follow_r.code == 1 and "no answer from" in last_error(follow_r)
    # losing the server while reading as a consumer is a lost connection, not a
    # "no longer read by this session" of some partition
    assert consumer_r.code == 1, consumer_r.err
    error = last_error(consumer_r)
    assert "lost the connection to" in error and "no longer read" not in error


def test_read_waits_out_a_short_pause_and_reports_a_long_one(
    server: ServerProcess, own: tuple[Weir, Client], topic_name: str
) -> None:
    weir, sdk = own
    values = fill(sdk, topic_name)
    assert server.proc is not None
    short = weir.popen("read", topic_name, "--timeout", "30")
    first = first_line(short)
    server.proc.send_signal(signal.SIGSTOP)
    result_of = in_background(lambda: finish(short, first))  # it reads on, up to the pause
    time.sleep(1)  # the fault: a pause shorter than --timeout
    server.proc.send_signal(signal.SIGCONT)
    result = result_of()
    assert result.code == 0, result.err
    lines = result.out.split()
    assert len(lines) == len(values) and sorted(lines) == sorted(values)
    assert [d for d, k in collections.Counter(lines).items() if k > 1] == []

    long = weir.popen("read", topic_name, "--timeout", "1")
    first = first_line(long)
    server.proc.send_signal(signal.SIGSTOP)  # longer than --timeout: give up and say so
    try:
        result = finish(long, first)
    finally:
        server.proc.send_signal(signal.SIGCONT)
    assert result.code == 1
    assert "read stopped before the end: no answer from" in last_error(result)


def test_relative_and_out_of_range_start_offsets(weir: Weir, sdk: Client, topic_name: str) -> None:
    sdk.create_topic(topic_name, 2)
    for p, n in ((0, 20), (1, 5)):
        with sdk.writer(topic_name, partition=p) as w:
            w.write_many([b"%d/%d" % (p, i) for i in range(n)])
    fmt = ["--format", "{partition}/{offset}"]
    follower = weir.popen("read", topic_name, "--from", "99999999", "--follow")
    last3, short, count, beyond = weir.many(
        ["read", topic_name, "--from", "-3", *fmt],
        ["read", topic_name, "-p", "1", "--from=-10", *fmt],
        ["read", topic_name, "-o", "-3", "--count", "2", "-p", "0", *fmt],
        ["read", topic_name, "--from", "99999999"],
    )
    try:
        assert follower.stderr is not None
        note = follower.stderr.readline().decode()
    finally:
        follower.kill()  # it would wait for offset 99999999 for ever
        follower.wait(10)
    assert sorted(last3.text.split()) == ["0/17", "0/18", "0/19", "1/2", "1/3", "1/4"]
    assert short.text.split() == [f"1/{i}" for i in range(5)]  # no more than there is
    assert count.text.split() == ["0/17", "0/18"]
    assert beyond.code == 0 and beyond.out == b""
    assert "offset 99999999 is beyond the end offset" in beyond.err
    assert "partition 0 ends at 20, 1 ends at 5" in beyond.err
    assert "offset 99999999 is beyond the end offset" in note and "waiting for it" in note
    assert weir("read", topic_name, "--from", "-x").code == 2


def test_consumer_read_stops_early_only_for_partitions_other_readers_hold(
    weir: Weir, sdk: Client, topic_name: str
) -> None:
    """The one documented early stop: another reader of the consumer holds a partition
    (and has not committed it): the command reads its own, then says which it left."""
    sdk.create_topic(topic_name, 2)
    for p in range(2):
        with sdk.writer(topic_name, partition=p) as w:
            w.write_many([b"%d-%d" % (p, i) for i in range(10)])
    other = sdk.reader(topic_name, consumer="shared")  # takes partitions, never commits
    try:
        other.wait_connected()
        wait_until(lambda: len(other.partitions) == 2, what="the other reader's partitions")
        result = weir("read", topic_name, "--consumer", "shared", timeout=60)
    finally:
        other.close()
    assert result.code == 0, result.err
    mine = {int(line.split(b"-")[0]) for line in result.out.split()}
    assert len(result.out.split()) == 10 and len(mine) == 1  # one partition was shared out
    (left,) = {0, 1} - mine
    assert (
        f"stopped after 5 s without data: partition {left} of {topic_name} is read by "
        "other readers of consumer shared" in result.err
    )
