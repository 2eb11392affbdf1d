"""Kafka's idempotent producer under faults: confluent-kafka (enable.idempotence) writes
through a proxy that cuts every connection now and then, to a server killed with SIGKILL
and restarted; afterwards the history checker finds no acknowledged record lost, none
stored twice, none out of its producer's order."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

import weir
from tests.conftest import ServerProcess
from tests.reliability.conftest import SEED
from tests.reliability.history import History, Stored, check, make_data, message_id
from tests.reliability.proxy import FaultyProxy

PARTITIONS = 2


def run_producer_under_faults(tmp_path: Path, kills: int, drops: int, messages: int) -> int:
    """Returns how many resent batches the server recognised as duplicates."""
    rng = random.Random(SEED)
    holder: dict[str, ServerProcess] = {}
    proxy = FaultyProxy(lambda: holder["srv"].kafka_port)
    srv = ServerProcess(tmp_path / "data", env={"WEIR_KAFKA_ADVERTISED_LISTENER": proxy.endpoint})
    holder["srv"] = srv
    srv.start()
    history = History()
    with weir.Client(srv.endpoint) as c:
        c.create_topic("kf", partitions=PARTITIONS)
    producer = Producer(
        {
            "bootstrap.servers": proxy.endpoint,
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 300_000,
            "reconnect.backoff.max.ms": 200,
            "retry.backoff.max.ms": 200,
        }
    )
    stop = threading.Event()
    errors: list[str] = []
    acks = [0]

    def delivered(err: object, msg: object) -> None:
        acks[0] += 1
        if err is not None:
            errors.append(str(err))
            return
        mid = message_id(msg.value())  # type: ignore[attr-defined]
        offset = msg.offset()  # type: ignore[attr-defined]
        history.acked(mid, msg.partition(), None if offset < 0 else offset)  # type: ignore[attr-defined]

    def produce() -> None:
        for n in range(messages):
            if stop.is_set():
                return
            data = make_data("kp", n, 60)
            history.attempted(message_id(data))
            while True:
                try:
                    producer.produce("kf", data, partition=n % PARTITIONS, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
            if n % 10 == 0:
                time.sleep(0.002)  # pacing: the writes span the fault schedule

    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    faults = ["kill"] * kills + ["drop"] * drops
    rng.shuffle(faults)
    try:
        for fault in faults:
            # the next fault once the producer is acknowledged again (it is producing), then
            # after a random pause in its stream of writes
            seen = acks[0]
            deadline = time.monotonic() + 60
            while acks[0] == seen and acks[0] < messages and time.monotonic() < deadline:
                producer.poll(0.01)
            if acks[0] >= messages:
                break  # everything is acknowledged: no more faults to inject
            time.sleep(rng.uniform(0.0, 0.15))  # the fault schedule, not a synchronisation
            if fault == "kill":
                srv.kill()
                history.fault("kill9")
                srv.start()
            else:
                proxy.drop_all()
                history.fault("drop")
        writer.join(120)
        left = producer.flush(120)
        assert left == 0, f"{left} records never acknowledged"
    finally:
        stop.set()
        proxy.close()
    assert not errors, errors[:5]
    stored: dict[int, list[Stored]] = {}
    starts: dict[int, int] = {}
    with weir.Client(srv.endpoint) as c:
        for p in range(PARTITIONS):
            rows = [
                Stored(m.offset, message_id(m.data), m.producer_id, m.seq_no)
                for chunk in c.read_range("kf", p, 0)
                for m in chunk.messages()
            ]
            stored[p] = rows
            starts[p] = rows[0].offset if rows else 0
    srv.stop()
    resends = sum("is a duplicate" in line for line in srv.log)
    # one producer writes both partitions on purpose: its order is judged per partition
    report = check(history, stored, starts, routed={"kp"})
    why = f"seed {SEED}: {report.summary()}"
    assert report.acknowledged == messages, why
    assert report.ok, why
    return resends


def test_idempotent_kafka_producer_survives_cuts_and_kill9(tmp_path: Path) -> None:
    resends = run_producer_under_faults(tmp_path, kills=3, drops=12, messages=20_000)
    print(f"{resends} resent batches answered as duplicates")


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_idempotent_kafka_producer_soak(tmp_path: Path) -> None:
    run_producer_under_faults(tmp_path, kills=40, drops=60, messages=200_000)
