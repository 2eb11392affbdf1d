"""Kafka transactions against a real weir server: confluent-kafka's (librdkafka) and
kafka-python's transactional producers, read_committed and read_uncommitted consumers
side by side, consume-transform-produce, fencing, timeouts and bad calls."""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import weir
from tests.conftest import ServerProcess
from tests.doc_blocks import block
from weir.protocols.kafka import messages as km
from weir.protocols.kafka import txn_messages as ktm
from weir.protocols.kafka.codec import Api, decode_response_frame, encode_request_frame
from weir.protocols.kafka.errors import ErrorCode
from weir.protocols.kafka.records import ATTR_TRANSACTIONAL, build_batch


def _create(bootstrap: str, *topics: tuple[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, p) for n, p in topics]).values():
        f.result(10)


def _txn_producer(bootstrap: str, tid: str, **conf: object) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 2, **conf})
    p.init_transactions(20)
    return p


def _consumer(bootstrap: str, isolation: str, **conf: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **conf,
        }
    )


def _read_all(
    c: Consumer, parts: list[TopicPartition], until: Callable[[list], bool], timeout: float = 30
) -> list:
    """Every message of ``parts`` from the start, until ``until(messages)`` or the timeout."""
    c.assign([TopicPartition(tp.topic, tp.partition, 0) for tp in parts])
    out: list = []
    deadline = time.monotonic() + timeout
    while not until(out) and time.monotonic() < deadline:
        for m in c.consume(num_messages=500, timeout=0.3):
            if m.error() is None:
                out.append(m)
            else:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
    return out


def _values(msgs: list) -> list[bytes]:
    return sorted(m.value() for m in msgs)


def _wait(cond: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _high(c: Consumer, tp: TopicPartition) -> int:
    return int(c.get_watermark_offsets(tp, timeout=10, cached=False)[1])


TOPICS = [("tx-a", 3), ("tx-b", 2), ("tx-c", 4)]


def _parts() -> list[TopicPartition]:
    return [TopicPartition(t, p) for t, n in TOPICS for p in range(n)]


def _produce_round(p: Producer, tag: str, per_partition: int = 3) -> list[bytes]:
    sent = []
    for topic, n in TOPICS:
        for part in range(n):
            for i in range(per_partition):
                v = f"{tag}-{topic}-{part}-{i}".encode()
                p.produce(topic, value=v, key=b"k", partition=part)
                sent.append(v)
    return sent


def test_commit_and_abort_across_three_topics(bootstrap: str) -> None:
    _create(bootstrap, *TOPICS)
    p = _txn_producer(bootstrap, "tx-3topics")
    p.begin_transaction()
    first = _produce_round(p, "c1")
    p.commit_transaction(20)
    p.begin_transaction()
    aborted = _produce_round(p, "ab")
    p.flush(20)  # stored: read_uncommitted readers see them now
    p.abort_transaction(20)
    p.begin_transaction()
    second = _produce_round(p, "c2")
    p.commit_transaction(20)

    committed = _consumer(bootstrap, "read_committed")
    uncommitted = _consumer(bootstrap, "read_uncommitted")
    try:
        want = sorted(first + second)
        got = _read_all(committed, _parts(), lambda ms: len(ms) >= len(want))
        assert _values(got) == want
        everything = sorted(first + aborted + second)
        got_all = _read_all(uncommitted, _parts(), lambda ms: len(ms) >= len(everything))
        assert _values(got_all) == everything
        # each partition: data at their offsets, the markers (control records) in between
        for tp in _parts():
            offs = [
                m.offset() for m in got if (m.topic(), m.partition()) == (tp.topic, tp.partition)
            ]
            assert offs == [0, 1, 2, 8, 9, 10]  # 3 msgs, commit marker, 3 aborted, abort marker

        # an open transaction: read_uncommitted sees its messages, read_committed stops at
        # the last stable offset before them
        p.begin_transaction()
        opened = _produce_round(p, "open", per_partition=1)
        p.flush(20)
        tp = TopicPartition("tx-a", 0)
        assert _high(uncommitted, tp) == 13
        assert _high(committed, tp) == 12  # ListOffsets(read_committed): the LSO
        extra = _read_all(uncommitted, _parts(), lambda ms: len(ms) >= len(everything) + 9)
        assert sorted(set(_values(extra)) - set(everything)) == sorted(opened)
        # nothing of the open one (its partitions polled a little past what is expected)
        again = _read_all(committed, _parts(), lambda ms: len(ms) > len(want), timeout=2)
        assert _values(again) == want
        p.commit_transaction(20)
        assert _high(committed, tp) == 14
        final = _read_all(committed, _parts(), lambda ms: len(ms) >= len(want) + 9)
        assert _values(final) == sorted(want + opened)
    finally:
        committed.close()
        uncommitted.close()


def test_consume_transform_produce_moves_offsets_only_on_commit(bootstrap: str) -> None:
    _create(bootstrap, ("ctp-in", 2), ("ctp-out", 2))
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(40):
        plain.produce("ctp-in", value=b"w%d" % i, partition=i % 2)
    assert plain.flush(20) == 0
    group = "ctp-job"
    consumer = _consumer(bootstrap, "read_committed", **{"group.id": group})
    producer = _txn_producer(bootstrap, "ctp-job-1")
    ins = [TopicPartition("ctp-in", 0), TopicPartition("ctp-in", 1)]

    # the group's committed offsets, as a read_uncommitted client sees them at once (the
    # job's own read_committed consumer waits while a transaction holds new ones: KIP-447)
    watcher = _consumer(bootstrap, "read_uncommitted", **{"group.id": group})

    def committed_total() -> int:
        return sum(max(tp.offset, 0) for tp in watcher.committed(ins, timeout=10))

    def step(n: int, commit: bool) -> list[bytes]:
        """Consume ``n`` messages, produce them transformed and their offsets in one
        transaction; commit or abort it."""
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            got += [m for m in consumer.consume(n - len(got), timeout=0.5) if m.error() is None]
        assert len(got) == n
        producer.begin_transaction()
        for m in got:
            producer.produce("ctp-out", value=m.value().upper(), partition=m.partition())
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 20
        )
        assert committed_total() == before  # not before the commit
        with pytest.raises(KafkaException):  # UNSTABLE_OFFSET_COMMIT until it ends
            consumer.committed(ins, timeout=1)
        if commit:
            producer.commit_transaction(20)
        else:
            producer.abort_transaction(20)
        return [m.value().upper() for m in got]

    try:
        consumer.assign([TopicPartition(t.topic, t.partition, 0) for t in ins])
        before = 0
        done = step(10, commit=True)
        assert committed_total() == 10
        before = 10
        step(10, commit=False)  # aborted: the offsets stay, the outputs are dropped
        assert committed_total() == 10
        # the job restarts from its committed offsets, as after a crash
        for tp in consumer.committed(ins, timeout=10):
            consumer.seek(tp)
        done += step(30, commit=True)
        assert committed_total() == 40
        reader = _consumer(bootstrap, "read_committed")
        try:
            out = _read_all(
                reader,
                [TopicPartition("ctp-out", 0), TopicPartition("ctp-out", 1)],
                lambda ms: len(ms) >= 40,
            )
            assert _values(out) == sorted(b"W%d" % i for i in range(40))  # each exactly once
            assert sorted(done) == _values(out)
        finally:
            reader.close()
    finally:
        consumer.close()
        watcher.close()


def test_a_newer_instance_fences_the_older(bootstrap: str) -> None:
    _create(bootstrap, ("fence", 1))
    old = _txn_producer(bootstrap, "fence-tid")
    old.begin_transaction()
    old.produce("fence", value=b"old-1", partition=0)
    old.flush(20)
    new = _txn_producer(bootstrap, "fence-tid")  # aborts what the old one had open
    reader = _consumer(bootstrap, "read_uncommitted")
    try:
        tp = TopicPartition("fence", 0)
        high = _high(reader, tp)  # old-1 and the abort marker
        assert high == 2
        old.produce("fence", value=b"old-2", partition=0)
        with pytest.raises(KafkaException) as err:  # the write is refused: fatal for it
            old.flush(10)
            old.commit_transaction(10)
        assert err.value.args[0].code() == KafkaError._FENCED, err.value
        assert err.value.args[0].fatal()
        assert _high(reader, tp) == high  # the fenced write changed nothing
        new.begin_transaction()
        new.produce("fence", value=b"new-1", partition=0)
        new.commit_transaction(20)
        committed = _consumer(bootstrap, "read_committed")
        try:
            got = _read_all(committed, [tp], lambda ms: len(ms) >= 1)
            assert _values(got) == [b"new-1"]
        finally:
            committed.close()
    finally:
        reader.close()


def test_a_transaction_past_its_timeout_is_aborted(bootstrap: str) -> None:
    _create(bootstrap, ("slow", 1))
    p = _txn_producer(bootstrap, "slow-tid", **{"transaction.timeout.ms": 1500})
    tp = TopicPartition("slow", 0)
    committed = _consumer(bootstrap, "read_committed")
    uncommitted = _consumer(bootstrap, "read_uncommitted")
    try:
        p.begin_transaction()
        p.produce("slow", value=b"late", partition=0)
        p.flush(20)
        # the server aborts it: its marker is written and the LSO reaches the end
        _wait(lambda: _high(uncommitted, tp) == 2, "the abort marker")
        assert _high(committed, tp) == 2
        with pytest.raises(KafkaException) as err:
            p.commit_transaction(10)
        assert err.value.args[0].txn_requires_abort(), err.value.args[0]
        p.abort_transaction(20)
        p.begin_transaction()
        p.produce("slow", value=b"on-time", partition=0)
        p.commit_transaction(20)
        got = _read_all(committed, [tp], lambda ms: len(ms) >= 1)
        assert _values(got) == [b"on-time"]
    finally:
        committed.close()
        uncommitted.close()


# ---------------------------------------------------------------------- bad calls, by hand


def _call(srv: ServerProcess, api: Api, version: int, body: dict) -> dict:
    """One request on a fresh connection, its answer decoded (the calls a client would
    make in a wrong order, which no client library sends on purpose)."""
    frame = encode_request_frame(api, version, 7, body)
    with socket.create_connection(("127.0.0.1", srv.kafka_port), timeout=10) as s:
        s.sendall(frame)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = s.recv(65536)
            assert chunk, "the server closed the connection"
            data += chunk
    return decode_response_frame(api, version, data[4:])[1]


def _init(srv: ServerProcess, tid: str, timeout_ms: int = 60_000) -> tuple[int, int, int]:
    r = _call(
        srv,
        ktm.INIT_PRODUCER_ID,
        4,
        {"transactional_id": tid, "transaction_timeout_ms": timeout_ms},
    )
    return r["error_code"], r["producer_id"], r["producer_epoch"]


def _end_txn(srv: ServerProcess, tid: str, pid: int, epoch: int, commit: bool) -> int:
    body = {
        "transactional_id": tid,
        "producer_id": pid,
        "producer_epoch": epoch,
        "committed": commit,
    }
    return int(_call(srv, ktm.END_TXN, 3, body)["error_code"])


def _add(srv: ServerProcess, tid: str, pid: int, epoch: int, topic: str) -> int:
    body = {
        "transactional_id": tid,
        "producer_id": pid,
        "producer_epoch": epoch,
        "topics": [{"name": topic, "partitions": [0]}],
    }
    return int(
        _call(srv, ktm.ADD_PARTITIONS_TO_TXN, 3, body)["results"][0]["results"][0]["error_code"]
    )


def _produce(srv: ServerProcess, tid: str, pid: int, epoch: int, seq: int, topic: str) -> int:
    records = build_batch(
        0,
        [1_700_000_000_000],
        [None],
        [b"raw-%d" % seq],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        attributes=ATTR_TRANSACTIONAL,
    )
    body = {
        "transactional_id": tid,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }
    r = _call(srv, km.PRODUCE, 9, body)
    return int(r["responses"][0]["partition_responses"][0]["error_code"])


def _add_offsets(srv: ServerProcess, tid: str, pid: int, epoch: int, group: str) -> int:
    body = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "group_id": group}
    return int(_call(srv, ktm.ADD_OFFSETS_TO_TXN, 3, body)["error_code"])


def _txn_offset_commit(
    srv: ServerProcess, tid: str, pid: int, epoch: int, group: str, offset: int
) -> int:
    body = {
        "transactional_id": tid,
        "group_id": group,
        "producer_id": pid,
        "producer_epoch": epoch,
        "topics": [
            {"name": "tx-bad", "partitions": [{"partition_index": 0, "committed_offset": offset}]}
        ],
    }
    r = _call(srv, ktm.TXN_OFFSET_COMMIT, 3, body)
    return int(r["topics"][0]["partitions"][0]["error_code"])


def test_wrong_transactional_calls_get_kafka_errors_and_change_nothing(
    kafka_server: ServerProcess, bootstrap: str
) -> None:
    _create(bootstrap, ("tx-bad", 1))
    reader = _consumer(bootstrap, "read_uncommitted")
    tp = TopicPartition("tx-bad", 0)
    try:
        assert (
            _init(kafka_server, "raw", timeout_ms=10**9)[0] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        )
        assert _end_txn(kafka_server, "never-seen", 1 << 48, 0, True) == (
            ErrorCode.INVALID_PRODUCER_ID_MAPPING
        )
        err, pid, epoch = _init(kafka_server, "raw")
        assert err == 0
        # nothing open: EndTxn and a transactional Produce are refused, nothing is stored
        assert _end_txn(kafka_server, "raw", pid, epoch, True) == ErrorCode.INVALID_TXN_STATE
        assert _produce(kafka_server, "raw", pid, epoch, 0, "tx-bad") == ErrorCode.INVALID_TXN_STATE
        assert _high(reader, tp) == 0
        # one transaction, committed; the same EndTxn again is a retry, the other outcome not
        assert _add(kafka_server, "raw", pid, epoch, "tx-bad") == 0
        assert _produce(kafka_server, "raw", pid, epoch, 0, "tx-bad") == 0
        assert _end_txn(kafka_server, "raw", pid, epoch, True) == 0
        assert _end_txn(kafka_server, "raw", pid, epoch, True) == 0
        assert _end_txn(kafka_server, "raw", pid, epoch, False) == ErrorCode.INVALID_TXN_STATE
        assert _high(reader, tp) == 2  # the message and its commit marker
        # a newer instance: everything of the old epoch is fenced and changes nothing
        err, pid2, epoch2 = _init(kafka_server, "raw")
        assert (err, pid2, epoch2) == (0, pid, epoch + 1)
        assert _add(kafka_server, "raw", pid, epoch, "tx-bad") == ErrorCode.PRODUCER_FENCED
        assert _produce(kafka_server, "raw", pid, epoch, 1, "tx-bad") == (
            ErrorCode.INVALID_PRODUCER_EPOCH
        )
        assert _end_txn(kafka_server, "raw", pid, epoch, True) == ErrorCode.PRODUCER_FENCED
        assert _end_txn(kafka_server, "raw", pid + 1, epoch2, True) == (
            ErrorCode.INVALID_PRODUCER_ID_MAPPING
        )
        assert _high(reader, tp) == 2
        # TxnOffsetCommit past the partition's end offset (2): refused, and the transaction's
        # commit stores no offset for the group and writes nothing to the partition
        assert _add_offsets(kafka_server, "raw", pid2, epoch2, "tx-bad-g") == 0
        assert _txn_offset_commit(kafka_server, "raw", pid2, epoch2, "tx-bad-g", 99) == (
            ErrorCode.INVALID_REQUEST
        )
        assert _end_txn(kafka_server, "raw", pid2, epoch2, True) == 0
        assert _high(reader, tp) == 2
        group = _consumer(bootstrap, "read_committed", **{"group.id": "tx-bad-g"})
        try:
            assert group.committed([tp], timeout=10)[0].offset < 0  # no offset stored
        finally:
            group.close()
        # a partition that does not exist: the others of the request are not attempted
        assert _add(kafka_server, "raw", pid2, epoch2, "no-such-topic-here") in (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        )
    finally:
        reader.close()


# ---------------------------------------------------------------------- kafka-python


def test_kafka_python_transactional_producer(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import TopicPartition as KTopicPartition

    _create(bootstrap, ("kp-tx", 2))
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-tx-1")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(10):
            p.send("kp-tx", value=b"c%d" % i, partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(10):
            p.send("kp-tx", value=b"a%d" % i, partition=i % 2)
        p.flush()
        p.abort_transaction()
    finally:
        p.close()
    parts = [KTopicPartition("kp-tx", 0), KTopicPartition("kp-tx", 1)]
    for isolation, want in (
        ("read_committed", sorted(b"c%d" % i for i in range(10))),
        (
            "read_uncommitted",
            sorted([b"c%d" % i for i in range(10)] + [b"a%d" % i for i in range(10)]),
        ),
    ):
        c = KafkaConsumer(
            bootstrap_servers=bootstrap, isolation_level=isolation, auto_offset_reset="earliest"
        )
        try:
            c.assign(parts)
            c.seek_to_beginning()
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(got) < len(want) and time.monotonic() < deadline:
                for recs in c.poll(timeout_ms=300).values():
                    got += [r.value for r in recs]
            assert sorted(got) == want, isolation
        finally:
            c.close()


# ---------------------------------------------------------------------- the docs' example


def test_the_docs_kafka_example_runs(bootstrap: str, tmp_path: Path) -> None:
    code = block("docs/transactions.md", "transactions-kafka").code.replace(
        "127.0.0.1:9092", bootstrap
    )
    for _ in range(2):  # and again: the job reads only the new words
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
        )
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout.splitlines() == ["[b'ALPHA', b'BETA', b'GAMMA']"]
    parts = [TopicPartition("kshouts", 0)]
    committed = _consumer(bootstrap, "read_committed")
    uncommitted = _consumer(bootstrap, "read_uncommitted")
    try:
        want = sorted([b"ALPHA", b"BETA", b"GAMMA"] * 2)
        assert _values(_read_all(committed, parts, lambda ms: len(ms) >= 6)) == want
        seen = _values(_read_all(uncommitted, parts, lambda ms: len(ms) >= 8))
        assert seen == sorted(want + [b"NEVER"] * 2)
        group = Consumer({"bootstrap.servers": bootstrap, "group.id": "kshouter"})
        try:
            assert group.committed([TopicPartition("kwords", 0)], timeout=10)[0].offset == 6
        finally:
            group.close()
    finally:
        committed.close()
        uncommitted.close()


# ---------------------------------------------------------------------- restart


def test_after_a_restart_the_open_transaction_is_aborted_and_the_producer_goes_on(
    tmp_path: Path,
) -> None:
    srv = _fixed_port_server(tmp_path / "data")
    srv.start()
    try:
        boot = srv.kafka
        _create(boot, ("rs", 1))
        p = _txn_producer(
            boot, "rs-tid", **{"reconnect.backoff.max.ms": 200, "retry.backoff.max.ms": 200}
        )
        p.begin_transaction()
        p.produce("rs", value=b"kept", partition=0)
        p.commit_transaction(20)
        p.begin_transaction()
        p.produce("rs", value=b"lost", partition=0)
        p.flush(20)
        srv.restart()
        assert srv.kafka == boot
        tp = TopicPartition("rs", 0)
        committed = _consumer(boot, "read_committed")
        try:
            # the restart aborted the open one: its marker is there, nothing is held back
            assert _high(committed, tp) == 4
            p.produce("rs", value=b"after", partition=0)
            with pytest.raises(KafkaException) as err:
                p.commit_transaction(20)
            assert err.value.args[0].txn_requires_abort(), err.value
            p.abort_transaction(20)
            p.begin_transaction()
            p.produce("rs", value=b"again", partition=0)
            p.commit_transaction(20)
            got = _read_all(committed, [tp], lambda ms: len(ms) >= 2)
            assert _values(got) == [b"again", b"kept"]
        finally:
            committed.close()
    finally:
        srv.stop()


def test_aiokafka_transactional_producer(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATopicPartition

    async def run() -> tuple[list[bytes], list[bytes]]:
        _create(bootstrap, ("aio-tx", 2))
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-tx-1")
        await p.start()
        try:
            async with p.transaction():
                for i in range(6):
                    await p.send("aio-tx", value=b"c%d" % i, partition=i % 2)
            with pytest.raises(RuntimeError):
                async with p.transaction():  # an exception inside aborts
                    for i in range(6):
                        await (await p.send("aio-tx", value=b"a%d" % i, partition=i % 2))
                    raise RuntimeError("abort")
        finally:
            await p.stop()
        seen = []
        for isolation in ("read_committed", "read_uncommitted"):
            c = AIOKafkaConsumer(
                bootstrap_servers=bootstrap,
                isolation_level=isolation,
                auto_offset_reset="earliest",
            )
            await c.start()
            try:
                c.assign([ATopicPartition("aio-tx", 0), ATopicPartition("aio-tx", 1)])
                await c.seek_to_beginning()
                got: list[bytes] = []
                deadline = time.monotonic() + 30
                want = 6 if isolation == "read_committed" else 12
                while len(got) < want and time.monotonic() < deadline:
                    for recs in (await c.getmany(timeout_ms=300)).values():
                        got += [r.value for r in recs]
                seen.append(sorted(got))
            finally:
                await c.stop()
        return seen[0], seen[1]

    committed, uncommitted = asyncio.run(run())
    assert committed == sorted(b"c%d" % i for i in range(6))
    assert uncommitted == sorted([b"c%d" % i for i in range(6)] + [b"a%d" % i for i in range(6)])


@pytest.mark.slow
def test_after_a_restart_an_idle_producer_aborts_once_and_goes_on(tmp_path: Path) -> None:
    srv = _fixed_port_server(tmp_path / "data")
    srv.start()
    try:
        boot = srv.kafka
        _create(boot, ("rs", 1))
        tp = TopicPartition("rs", 0)
        p = _txn_producer(
            boot, "rs-tid", **{"reconnect.backoff.max.ms": 200, "retry.backoff.max.ms": 200}
        )
        p.begin_transaction()
        p.produce("rs", value=b"kept", partition=0)
        p.commit_transaction(20)
        # a restart while it is idle: its next transaction is refused once (the server cannot
        # tell it had none open), it aborts and goes on
        srv.restart()
        p.begin_transaction()
        p.produce("rs", value=b"refused", partition=0)
        with pytest.raises(KafkaException) as err:
            p.commit_transaction(20)
        assert err.value.args[0].txn_requires_abort(), err.value
        p.abort_transaction(20)
        p.begin_transaction()
        p.produce("rs", value=b"last", partition=0)
        p.commit_transaction(20)
        committed = _consumer(boot, "read_committed")
        try:
            got = _read_all(committed, [tp], lambda ms: len(ms) >= 2)
            assert _values(got) == [b"kept", b"last"]
        finally:
            committed.close()
    finally:
        srv.stop()


# ---------------------------------------------------------------------- kill -9


def _fixed_port_server(data_dir: Path) -> ServerProcess:
    with socket.socket() as s:  # one Kafka port for every run: the clients reconnect to it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return ServerProcess(data_dir, env={"WEIR_KAFKA_LISTEN": f"127.0.0.1:{port}"})


@pytest.mark.slow
def test_kafka_transactions_are_all_or_nothing_across_kill_9(tmp_path: Path) -> None:
    """A confluent-kafka transactional producer commits and aborts at random while the
    server is killed with SIGKILL during commits: read_committed then shows every
    transaction whole or not at all, every acknowledged commit, no acknowledged abort."""
    rng = random.Random(19)
    srv = _fixed_port_server(tmp_path / "data").start()
    topics = [("kc-a", 3), ("kc-b", 2)]
    parts = [(t, p) for t, n in topics for p in range(n)]
    per_txn = 5
    conf = {"reconnect.backoff.max.ms": 200, "retry.backoff.max.ms": 200}
    committed_ok: set[int] = set()
    aborted_ok: set[int] = set()
    try:
        boot = srv.kafka
        _create(boot, *topics)
        p = _txn_producer(boot, "kc", **conf)

        def settle(exc: KafkaException) -> Producer:
            """After a failed call: abort (the client bumps its epoch), or start a new
            instance when the error is fatal."""
            err = exc.args[0]
            for _ in range(5):
                if err.fatal():
                    return _txn_producer(boot, "kc", **conf)
                try:
                    p.abort_transaction(30)
                    return p
                except KafkaException as again:
                    err = again.args[0]
            return _txn_producer(boot, "kc", **conf)

        tag = 0
        for _kill in range(4):
            for step in range(rng.randint(3, 8)):
                tag += 1
                last = step == 0  # the first of the round is committed under a kill
                try:
                    p.begin_transaction()
                    for j in range(per_txn):
                        t, part = parts[rng.randrange(len(parts))]
                        p.produce(t, value=b"%d-%d" % (tag, j), partition=part)
                    if not last and rng.random() < 0.3:
                        p.abort_transaction(30)
                        aborted_ok.add(tag)
                        continue
                    if last:
                        result: list[BaseException | None] = []
                        th = threading.Thread(
                            target=lambda r=result, commit=p.commit_transaction: r.append(
                                _try(commit, 60)
                            )
                        )
                        th.start()
                        time.sleep(rng.uniform(0, 0.03))  # a random point of the commit
                        srv.kill()
                        srv.start()
                        th.join(90)
                        assert not th.is_alive()
                        if result[0] is None:
                            committed_ok.add(tag)
                        else:
                            assert isinstance(result[0], KafkaException), result[0]
                            p = settle(result[0])
                        continue
                    p.commit_transaction(30)
                    committed_ok.add(tag)
                except KafkaException as exc:
                    p = settle(exc)
        srv.kill()  # the last word: what survives a kill -9
        srv.start()
        reader = _consumer(boot, "read_committed")
        try:
            tps = [TopicPartition(t, n) for t, n in parts]
            want = per_txn * len(committed_ok)
            got = _read_all(reader, tps, lambda ms: len(ms) >= want)
            got += _read_all(reader, tps, lambda ms: False, timeout=2)[len(got) :]
        finally:
            reader.close()
        values = [m.value() for m in got]
        assert len(values) == len(set(values)), "a message read twice"
        by_txn: dict[int, int] = {}
        for v in values:
            by_txn[int(v.split(b"-")[0])] = by_txn.get(int(v.split(b"-")[0]), 0) + 1
        assert all(n == per_txn for n in by_txn.values()), "a transaction seen in part"
        assert committed_ok <= set(by_txn), "an acknowledged commit is missing"
        assert not aborted_ok & set(by_txn), "an acknowledged abort is visible"
        print(
            f"kafka txns: {len(committed_ok)} acked commits, {len(aborted_ok)} aborts, "
            f"{len(by_txn)} visible, {tag} in all"
        )
    finally:
        srv.stop()


def _try(call: Callable[..., object], *args: object) -> BaseException | None:
    try:
        call(*args)
    except BaseException as exc:  # handed back to the test's thread
        return exc
    return None


def test_a_compacted_topic_shows_committed_values_only(
    kafka_server: ServerProcess, bootstrap: str
) -> None:
    """cleanup.policy=compact over transactions: the compacted log a read_committed
    consumer fetches holds the latest committed value of each key, never an aborted one
    (nor an aborted delete), and nothing of an open transaction until it commits."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    conf = {"cleanup.policy": "compact"}
    for f in admin.create_topics([NewTopic("tx-cmp", 1, config=conf)]).values():
        f.result(10)
    p = _txn_producer(bootstrap, "tx-cmp-1")
    p.begin_transaction()
    for k in (b"k0", b"k1", b"k2", b"k3"):
        p.produce("tx-cmp", key=k, value=b"committed", partition=0)
    p.produce("tx-cmp", key=b"k3", value=None, partition=0)  # a delete, committed
    p.commit_transaction(20)
    p.begin_transaction()
    p.produce("tx-cmp", key=b"k0", value=b"aborted", partition=0)
    p.produce("tx-cmp", key=b"k1", value=None, partition=0)  # a delete, aborted
    p.produce("tx-cmp", key=b"k9", value=b"aborted", partition=0)
    p.flush(20)
    p.abort_transaction(20)
    later = _txn_producer(bootstrap, "tx-cmp-2")
    later.begin_transaction()  # open while the log is compacted
    later.produce("tx-cmp", key=b"k2", value=b"open", partition=0)
    later.flush(20)
    with weir.Client(kafka_server.endpoint) as native:
        assert native.compact("tx-cmp", wait=True).last_error == ""

    def fetch(n: int, timeout: float) -> list[tuple[bytes, bytes | None]]:
        c = _consumer(bootstrap, "read_committed")
        try:
            msgs = _read_all(c, [TopicPartition("tx-cmp", 0)], lambda o: len(o) >= n, timeout)
        finally:
            c.close()
        return [(m.key(), m.value()) for m in msgs]

    # the view: the latest committed value of each key (the delete kept for readers
    # behind), nothing aborted; the open transaction holds the consumer back
    view = [(b"k0", b"committed"), (b"k1", b"committed"), (b"k2", b"committed"), (b"k3", None)]
    assert fetch(len(view), 20) == view
    assert fetch(len(view) + 1, 1) == view
    later.commit_transaction(20)
    assert fetch(len(view) + 1, 20) == [*view, (b"k2", b"open")]  # the tail past the view
    p.flush(5)
    later.flush(5)
