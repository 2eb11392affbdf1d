"""Routing writers of partitioned topics: Pulsar's key hash, round robin, a custom
router, the pinned mode; dedup per (producer, partition) across reopen and kill -9."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from pathlib import Path

import crc32c
import pytest

import weir
from tests.conftest import ServerProcess
from tests.reliability.history import History, Stored, check, make_data, message_id
from weir.client.routing import ROUND_ROBIN_RUN, murmur3_partition
from weir.errors import BadRequestError, UnknownPartitionError
from weir.hashing import kafka_partition, murmur2


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86_32 written from Austin Appleby's definition (SMHasher's
    MurmurHash3.cpp): 4-byte little-endian blocks mixed with c1, c2, rotations 15 and
    13, h = h * 5 + 0xe6546b64; the tail; the length; the fmix32 finalizer. Pulsar's
    Java client (Murmur3_32Hash, seed 0) then clears the sign bit and takes the
    result modulo the partition count (signSafeMod of a non-negative int)."""
    c1, c2, mask = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF

    def mix(k: int) -> int:
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        return (k * c2) & mask

    h = seed
    whole = len(data) // 4 * 4
    for i in range(0, whole, 4):
        h ^= mix(int.from_bytes(data[i : i + 4], "little"))
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + 0xE6546B64) & mask
    tail = data[whole:]
    if tail:
        h ^= mix(int.from_bytes(tail, "little"))
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    return h ^ (h >> 16)


def pulsar_partition(key: str, partitions: int) -> int:
    return (murmur3_32(key.encode()) & 0x7FFFFFFF) % partitions


def test_the_reference_hash_gives_the_published_vectors() -> None:
    # MurmurHash3 x86_32 test vectors (SMHasher; also the ones Wikipedia lists)
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"", 1) == 0x514E28B7
    assert murmur3_32(b"hello") == 0x248BFA47
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723


@pytest.mark.parametrize(
    ("key", "partitions", "expected"),
    # expected from the definition above: (murmur3_32(key) & 0x7fffffff) % partitions;
    # e.g. "hello": 0x248BFA47 = 613153351 = 4 * 153288337 + 3 = 7 * 87593335 + 6
    [("user-1", 4, 3), ("abc", 4, 2), ("a", 4, 2), ("hello", 4, 3), ("hello", 7, 6)],
)
def test_a_key_lands_where_pulsars_client_puts_it(key: str, partitions: int, expected: int) -> None:
    assert pulsar_partition(key, partitions) == expected
    assert murmur3_partition(key.encode(), partitions) == expected


def test_the_sdk_hash_agrees_with_the_definition_on_many_keys() -> None:
    for i in range(2000):
        key = f"key-{i}-{'x' * (i % 7)}"
        for n in (1, 2, 3, 4, 16, 100):
            assert murmur3_partition(key.encode(), n) == pulsar_partition(key, n), (key, n)


def read_topic(c: weir.Client, topic: str) -> dict[int, list[weir.Message]]:
    out: dict[int, list[weir.Message]] = {}
    for p in c.describe_topic(topic).partition_info:
        out[p.partition] = [
            m
            for ch in c.read_range(topic, p.partition, p.start_offset, p.end_offset)
            for m in ch.messages()
            if m.offset >= p.start_offset
        ]
    return out


def test_keys_go_by_hash_and_keyless_messages_home(
    shared_server: ServerProcess, topic_name: str
) -> None:
    with weir.Client(shared_server.endpoint) as c:
        c.create_topic(topic_name, partitions=4)
        with c.writer(topic_name, producer_id="router") as w:
            results = [w.write_with_result(f"v{i}", key=f"user-{i}") for i in range(40)]
            w.write_many([f"m{i}" for i in range(40)], keys=[f"user-{i}" for i in range(40)])
            keyless = [w.write_with_result(f"plain{i}") for i in range(5)]
            assert w.partition == crc32c.crc32c(b"router") % 4  # the home partition
        for i, r in enumerate(results):
            assert r.partition == pulsar_partition(f"user-{i}", 4)
        assert {r.partition for r in keyless} == {w.partition}
        stored = read_topic(c, topic_name)
        assert len({p for p, ms in stored.items() if ms}) == 4
        for p, ms in stored.items():
            for m in ms:
                if m.key:
                    assert pulsar_partition(m.key.decode(), 4) == p
                assert m.producer_id == "router"
            # seq_nos are the producer's in each partition: 1, 2, 3... with no gap
            assert [m.seq_no for m in ms] == list(range(1, len(ms) + 1))
        assert sum(len(ms) for ms in stored.values()) == 85


def test_reopened_routing_writer_resends_are_deduplicated_per_partition(
    shared_server: ServerProcess, topic_name: str
) -> None:
    keys = [f"k{i}" for i in range(200)]
    with weir.Client(shared_server.endpoint) as c:
        c.create_topic(topic_name, partitions=4)
        for attempt in range(2):  # the second writer resends everything: all skipped
            with c.writer(topic_name, producer_id="again") as w:
                futs = [w.write_future(f"v{i}", key=k, seq_no=i + 1) for i, k in enumerate(keys)]
                w.flush()
            assert all(f.result().skipped == (attempt == 1) for f in futs)
        assert sum(len(ms) for ms in read_topic(c, topic_name).values()) == 200


def test_round_robin_custom_and_pinned(shared_server: ServerProcess, topic_name: str) -> None:
    with weir.Client(shared_server.endpoint) as c:
        c.create_topic(topic_name, partitions=3)
        with c.writer(topic_name, routing="round-robin") as w:
            parts = [w.write_with_result(b"x").partition for _ in range(3 * ROUND_ROBIN_RUN)]
        assert {parts.count(p) for p in range(3)} == {ROUND_ROBIN_RUN}
        with c.writer(topic_name, routing=lambda key, n: n - 1) as w:
            assert {w.write_with_result(b"y", key=str(i)).partition for i in range(10)} == {2}
        with c.writer(topic_name, producer_id="pin", routing="pinned") as w:
            assert len({w.write_with_result(b"z", key=str(i)).partition for i in range(10)}) == 1
        with c.writer(topic_name, partition=1) as w:
            assert w.write_with_result(b"p", key="user-1").partition == 1


def test_bad_routing_is_refused_and_stores_nothing(
    shared_server: ServerProcess, topic_name: str
) -> None:
    with weir.Client(shared_server.endpoint) as c:
        c.create_topic(topic_name, partitions=2)
        with pytest.raises(BadRequestError, match="unknown routing 'hash'"):
            c.writer(topic_name, routing="hash")
        with pytest.raises(BadRequestError, match="routing='round-robin' cannot apply"):
            c.writer(topic_name, partition=0, routing="round-robin")
        w = c.writer(topic_name, routing=lambda key, n: n).wait_init()
        with pytest.raises(BadRequestError, match="returned 2 for a topic of 2 partitions"):
            w.write(b"x", key="k")
        # before the writer knows the partition count the write is queued and its future
        # fails; a writer that connected already refuses the call itself
        early = c.writer(topic_name, routing=lambda key, n: n)
        try:
            fut = early.write_future(b"x", key="k")
        except BadRequestError as err:
            refused = err
        else:
            with pytest.raises(BadRequestError) as caught:
                fut.result(timeout=30)
            refused = caught.value
        assert "returned 2 for a topic of 2 partitions" in str(refused)
        early.close()
        w.close()
        assert sum(len(ms) for ms in read_topic(c, topic_name).values()) == 0


def _home_of(partitions: int, prefix: str) -> str:
    """A producer id whose home partition (where the broker places it) is 0."""
    return next(
        f"{prefix}{i}"
        for i in range(1000)
        if crc32c.crc32c(f"{prefix}{i}".encode()) % partitions == 0
    )


def test_a_routing_writer_spreads_keys_over_partitions_added_while_it_runs(
    shared_server: ServerProcess, topic_name: str
) -> None:
    keys = [f"user-{i}" for i in range(40)]
    with weir.Client(shared_server.endpoint) as c:
        c.create_topic(topic_name, partitions=2)
        with (
            c.writer(topic_name, partitions_refresh_interval=0.2) as w,
            c.writer(topic_name, partitions_refresh_interval=None) as fixed,
        ):
            assert {w.write_with_result(b"a", key=k).partition for k in keys} == {0, 1}
            fixed.write_with_result(b"f", key=keys[0])
            c.alter_topic(topic_name, partitions=4)
            # a key of partition 3 goes there once the writer has looked again
            k3 = next(k for k in keys if pulsar_partition(k, 4) == 3)
            deadline = time.monotonic() + 60
            while w.write_with_result(b"probe", key=k3).partition != 3:
                assert time.monotonic() < deadline, "the writer never saw the new partitions"
                time.sleep(0.1)
            after = [w.write_with_result(b"b", key=k).partition for k in keys]
            # a writer told never to look again keeps the count it connected with
            kept = {fixed.write_with_result(b"f", key=k).partition for k in keys}
        assert after == [pulsar_partition(k, 4) for k in keys]
        assert kept == {0, 1}


def test_a_routing_writer_routes_by_the_count_of_a_topic_made_again_smaller(
    server: ServerProcess, topic_name: str, tmp_path: Path
) -> None:
    """The server comes back on a fresh data directory, where the writer's own reconnect
    auto-creates the topic with one partition: the sessions of partitions 1..3 are
    answered "unknown partition", the writer looks at the count again, and later keys
    all go to partition 0."""
    keys = [f"user-{i}" for i in range(40)]
    with weir.Client(server.endpoint) as c:
        c.create_topic(topic_name, partitions=4)
        pid = _home_of(4, "shrink")
        with c.writer(topic_name, producer_id=pid, partitions_refresh_interval=None) as w:
            assert {w.write_with_result(b"a", key=k).partition for k in keys} == {0, 1, 2, 3}
            server.stop()
            server.data_dir = tmp_path / "fresh"
            server.start()
            k3 = next(k for k in keys if pulsar_partition(k, 4) == 3)
            deadline = time.monotonic() + 60
            while True:  # a message routed to a lost partition fails, and says why
                try:
                    if w.write_with_result(b"probe", key=k3).partition == 0:
                        break
                except UnknownPartitionError:
                    pass
                assert time.monotonic() < deadline, "the writer never routed by the new count"
                time.sleep(0.1)
            assert {w.write_with_result(b"b", key=k).partition for k in keys} == {0}
        assert c.describe_topic(topic_name).partitions == 1


def test_keyed_writer_across_4_partitions_survives_kill_9(
    server: ServerProcess, topic_name: str
) -> None:
    """kill -9 the server three times under a keyed writer: nothing acknowledged lost,
    nothing stored twice (tests/reliability/history.py)."""
    history = History()
    acks = threading.Semaphore(0)
    with weir.Client(server.endpoint) as c:
        c.create_topic(topic_name, partitions=4)
        w = c.writer(topic_name, producer_id="keyed", max_buffer_messages=2000)

        def on_ack(mid: str) -> object:
            def done(f: Future[weir.WriteResult]) -> None:
                if f.exception() is None:
                    r = f.result()
                    history.acked(mid, r.partition, r.offset)
                    acks.release()

            return done

        n = 0
        for _round in range(4):
            for _ in range(1500):
                data = make_data("keyed", n, 100)
                mid = message_id(data)
                history.attempted(mid)
                w.write_future(data, key=f"user-{n % 97}").add_done_callback(on_ack(mid))
                n += 1
            if _round < 3:
                for _ in range(300):  # some of this round acknowledged, the rest in flight
                    assert acks.acquire(timeout=60)
                server.kill()
                history.fault("kill -9")
                server.start()
        w.flush(timeout=120)
        w.close()
        assert w.reconnects >= 3
        stored = {
            p: [Stored(m.offset, message_id(m.data), m.producer_id, m.seq_no) for m in ms]
            for p, ms in read_topic(c, topic_name).items()
        }
    report = check(history, stored, {}, routed={"keyed"})
    assert report.ok, report.summary()
    assert report.acknowledged == n == report.stored
    assert len([p for p, rows in stored.items() if rows]) == 4


async def test_the_asyncio_twin_routes_the_same(
    shared_server: ServerProcess, topic_name: str
) -> None:
    import weir.aio

    async with weir.aio.Client(shared_server.endpoint) as c:
        await c.create_topic(topic_name, partitions=4)
        async with c.writer(topic_name, producer_id="aio-router") as w:
            results = [await w.write_with_result(b"v", key=f"user-{i}") for i in range(20)]
            await w.write_many([b"m"] * 20, keys=[f"user-{i}" for i in range(20)])
        assert [r.partition for r in results] == [
            pulsar_partition(f"user-{i}", 4) for i in range(20)
        ]
        async with c.writer(topic_name, routing="round-robin") as w:
            parts = [
                (await w.write_with_result(b"x")).partition for _ in range(4 * ROUND_ROBIN_RUN)
            ]
        assert sorted(set(parts)) == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("key", "signed"),
    # Kafka's own vectors for Utils.murmur2 (its UtilsTest), as Java's signed ints
    [
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_is_kafkas(key: bytes, signed: int) -> None:
    assert murmur2(key) == signed & 0xFFFFFFFF
    assert kafka_partition(key, 7) == (signed & 0x7FFFFFFF) % 7


def test_an_unknown_key_hash_is_refused(shared_server: ServerProcess) -> None:
    with weir.Client(shared_server.endpoint) as c, pytest.raises(BadRequestError, match="murmur2"):
        c.writer("hash-choice", key_hash="md5")


def test_a_writer_with_murmur2_puts_keys_where_kafka_does(shared_server: ServerProcess) -> None:
    with weir.Client(shared_server.endpoint) as c:
        c.create_topic("kafka-keys", partitions=5, exist_ok=True)
        with c.writer("kafka-keys", routing="key", key_hash="murmur2") as w:
            got = {k: w.write_with_result(b"v", key=k).partition for k in ("a", "b", "user-7")}
        assert got == {k: kafka_partition(k.encode(), 5) for k in got}
