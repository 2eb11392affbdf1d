"""weir through its Kafka front: confluent-kafka (librdkafka) against weir and a null server.

The null server (``bench/kafka_null_server.py``) acknowledges produce requests without
storing anything, so the same producer against it is the ceiling any server gives
confluent-kafka on this machine; ``weir-kafka / kafka-null`` is the share weir
delivers (the goal: at least 80 %, and 300,000 msgs/s of 100 B with acks=all).
``kafka-null-fsync`` is the same server appending each Produce's records to a file and
answering after an fdatasync (group commit, nothing else): the floor any durable
server has on this disk, so ``weir-kafka / kafka-null-fsync`` tells a slow disk from a
slow server.

Rows: ``kafka produce P=1 {size}B acks=all`` (librdkafka defaults but linger.ms=5 and
1 MB batches), the same with ``enable.idempotence`` (librdkafka sends one request per
partition at a time once a request holds more than 5 messages, so an idempotent
producer is bound by the commit latency per partition), and ``kafka consume C=1``
(weir only: an assigned consumer reading the produced messages back).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.peers import servers
from bench.peers.workloads import Gate, Result, Target, _now
from bench.throughput import Window, measure
from bench.weir_workloads import ROOT

SYSTEM_WEIR = "weir-kafka"
SYSTEM_NULL = "kafka-null"
SYSTEM_NULL_FSYNC = "kafka-null-fsync"


def client_version() -> str:
    import confluent_kafka

    return f"confluent-kafka {confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})"


def start_null_server(data_dir: Path, timeout: float = 60.0, fsync: bool = False) -> Any:
    """bench/kafka_null_server.py: acks without storing, the ceiling of confluent-kafka;
    with ``fsync`` the durable floor (append + fdatasync before the answer)."""
    if fsync:
        return servers.start_null_server(
            ROOT / "bench" / "kafka_null_server.py",
            data_dir,
            system=SYSTEM_NULL_FSYNC,
            version=f"kafka null server + fdatasync ({client_version()})",
            notes="appends the records and fdatasyncs before it acks: the floor of any "
            "durable server on this disk",
            args=("--fsync", str(data_dir / "records.log")),
            timeout=timeout,
            fsync_before_ack=True,
        )
    return servers.start_null_server(
        ROOT / "bench" / "kafka_null_server.py",
        data_dir,
        system=SYSTEM_NULL,
        version=f"kafka null server ({client_version()})",
        notes="acks without storing: the ceiling of confluent-kafka",
        timeout=timeout,
    )


def weir_target(h: Any) -> Target:
    return Target(SYSTEM_WEIR, "kafka", h.host, h.ports["kafka"], True, h.version)


def null_target(h: Any) -> Target:
    return Target(h.system, "kafka", h.host, h.port, h.fsync_before_ack, h.version)


@dataclass
class TopicRef:
    name: str


def prepare_topic(t: Target, tag: str) -> TopicRef:
    from confluent_kafka.admin import AdminClient, NewTopic

    ref = TopicRef(f"kb{tag}{uuid.uuid4().hex[:8]}")
    admin = AdminClient({"bootstrap.servers": f"{t.host}:{t.port}"})
    for f in admin.create_topics([NewTopic(ref.name, 1)]).values():
        f.result(30)
    return ref


def drop_topic(t: Target, ref: TopicRef) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": f"{t.host}:{t.port}"})
    for f in admin.delete_topics([ref.name]).values():
        f.result(30)


def _produce_worker(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    import os

    from confluent_kafka import Producer

    conf = {
        "bootstrap.servers": f"{t.host}:{t.port}",
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "enable.idempotence": p["idempotent"],
    }
    producer = Producer(conf)
    producer.list_topics(p["topic"], timeout=15)
    payloads = [os.urandom(p["size"]) for _ in range(256)]
    failed = [0]

    def done(err: object, _msg: object) -> None:
        if err is not None:
            failed[0] += 1

    n = p["n"]
    w = Window(gate, p["max_seconds"])
    sent = 0
    topic = p["topic"]
    while sent < n:
        if (sent & 0x3FFF) == 0 and w.over():
            break
        try:
            producer.produce(topic, payloads[sent & 255], on_delivery=done)
        except BufferError:
            producer.poll(0.001)
            continue
        sent += 1
        if (sent & 0x1FFF) == 0:
            producer.poll(0)
    left = producer.flush(120)
    t1 = _now()
    acked = sent - failed[0] - left
    return w.result(
        acked, acked * p["size"], t1, sent=sent, failed=sent - acked, ack_timeout=left > 0
    )


def _produce_txn_worker(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """A confluent-kafka transactional producer: transactions of ``txn`` messages, each
    begun, produced (round robin over the partitions) and committed."""
    import os
    import uuid

    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": f"{t.host}:{t.port}",
            "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    producer.init_transactions(30)
    payloads = [os.urandom(p["size"]) for _ in range(256)]
    n, size, topic = p["n"], p["txn"], p["topic"]
    w = Window(gate, p["max_seconds"])
    sent = txns = 0
    while sent < n and not w.over():
        producer.begin_transaction()
        k = min(size, n - sent)
        i = 0
        while i < k:
            try:
                producer.produce(topic, payloads[(sent + i) & 255])
            except BufferError:
                producer.poll(0.001)
                continue
            i += 1
        producer.commit_transaction(120)  # flushes, then EndTxn
        sent += k
        txns += 1
    return w.result(sent, sent * p["size"], _now(), sent=sent, txns=txns)


def _consume_worker(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:

    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": f"{t.host}:{t.port}",
            "group.id": f"bench{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 << 20,
        }
    )
    c.assign([TopicPartition(p["topic"], 0, 0)])
    w = Window(gate, p["max_seconds"])
    got = nbytes = 0
    while got < p["n"] and not w.over():
        for msg in c.consume(num_messages=10_000, timeout=1.0):
            if msg.error() is None:
                got += 1
                nbytes += len(msg.value() or b"")
    t1 = _now()
    c.close()
    return w.result(got, nbytes, t1)


def produce(
    t: Target,
    ref: TopicRef,
    n: int,
    size: int,
    idempotent: bool,
    max_seconds: float,
    server_pid: int | None = None,
) -> Result:
    spec = dict(topic=ref.name, n=n, size=size, idempotent=idempotent, max_seconds=max_seconds)
    run = measure(t, [(_produce_worker, spec)], max_seconds, server_pid)
    label = "idempotent" if idempotent else "acks=all"
    return run.row(
        f"kafka produce P=1 {size}B {label}",
        dict(
            target_messages=n,
            size=size,
            how=f"confluent-kafka Producer, acks=all{', enable.idempotence' if idempotent else ''}, "
            "linger.ms=5, 1 MB batches, flush() at the end",
        ),
    )


def consume(
    t: Target,
    ref: TopicRef,
    available: int,
    size: int,
    max_seconds: float,
    server_pid: int | None = None,
) -> Result:
    spec = dict(topic=ref.name, n=available, max_seconds=max_seconds)
    run = measure(t, [(_consume_worker, spec)], max_seconds, server_pid)
    return run.row(
        f"kafka consume C=1 {size}B",
        dict(available=available, size=size, how="confluent-kafka Consumer, assigned partition"),
        available=available,
    )


def produce_transactions(
    t: Target,
    ref: TopicRef,
    n: int,
    size: int,
    txn: int,
    max_seconds: float,
    server_pid: int | None = None,
) -> Result:
    """N messages of ``size`` bytes from one confluent-kafka transactional producer, in
    transactions of ``txn`` messages."""
    spec = dict(topic=ref.name, n=n, size=size, txn=txn, max_seconds=max_seconds)
    run = measure(t, [(_produce_txn_worker, spec)], max_seconds, server_pid)
    return run.row(
        f"kafka produce txn={txn} {size}B",
        dict(
            target_messages=n,
            size=size,
            txn_messages=txn,
            transactions=run.parts[0]["txns"],
            how="confluent-kafka Producer with transactional.id: begin_transaction, "
            f"produce() {txn} messages, commit_transaction; linger.ms=5, 1 MB batches",
        ),
    )
