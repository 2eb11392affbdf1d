"""Writer delivery: producer ids, refusals and backoff, delivery timeouts, unreachable servers,
reconnect hooks and the message size limit (sync and asyncio twins, against real servers)."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

import weir
from tests.conftest import ServerProcess


def stored(client: weir.Client, topic: str) -> list[weir.Message]:
    out: list[weir.Message] = []
    for p in client.describe_topic(topic).partition_info:
        for chunk in client.read_range(topic, p.partition, p.start_offset, p.end_offset):
            out.extend(chunk.messages())
    return out


def wait_until(check: Callable[[], bool], timeout: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        time.sleep(0.02)


def stored_count(client: weir.Client, topic: str) -> int:
    return sum(p.end_offset for p in client.describe_topic(topic).partition_info)


def test_writer_pinned_to_a_partition_resends_without_duplicates(
    server: ServerProcess, topic_name: str
) -> None:
    """A writer given partition= but no producer id had none, so the broker could not
    drop what it resent after a reconnect: kill -9 while writing stored duplicates.

    To lose acks every time (not only when the kill happens to land between a commit
    and its ack), the writer's event loop is held while the server stores what it was
    sent; then the server is killed, and the writer must resend all of it."""
    admin = weir.Client(server.endpoint)
    admin.create_topic(topic_name, partitions=2)
    c = weir.Client(server.endpoint)
    w = c.writer(topic_name, partition=1, max_buffer_messages=5000)
    written = 0
    stop = threading.Event()

    def produce() -> None:
        nonlocal written
        while not stop.is_set():
            w.write(b"m%d" % written, timeout=60)
            written += 1

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        for _ in range(2):
            base = stored_count(admin, topic_name)
            wait_until(lambda b=base: stored_count(admin, topic_name) > b + 2000, what="writes")
            held = threading.Event()
            c._loop.loop.call_soon_threadsafe(held.wait)  # acks stay unread from now on
            last = -1
            while (now := stored_count(admin, topic_name)) != last:  # until all sent is stored
                last = now
                time.sleep(0.3)
            server.kill()
            held.set()
            server.start()
        stop.set()
        producer.join(60)
        w.flush(timeout=60)
    finally:
        stop.set()
        w.close(timeout=10)
    msgs = stored(admin, topic_name)
    dups = [d for d, k in collections.Counter(m.data for m in msgs).items() if k > 1]
    assert (len(dups), len(msgs)) == (0, written)
    assert sorted(int(m.data[1:]) for m in msgs) == list(range(written))
    assert {m.partition for m in msgs} == {1}
    assert {m.producer_id for m in msgs} == {w.producer_id} and w.producer_id  # generated
    c.close()
    admin.close()
