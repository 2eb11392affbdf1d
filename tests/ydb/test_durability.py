"""Producers across server restarts and kill -9: seq_nos continue, resends are skipped,
every acknowledged message survives, and nothing is stored twice."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import Future, wait

import ydb

from tests.conftest import ServerProcess
from tests.ydb.conftest import connect, path, receive

WINDOW = 20  # write calls in flight during the kill -9 load


def read_everything(srv: ServerProcess, topic: str, consumer: str) -> list[ydb.TopicReaderMessage]:
    """Every stored message of ``topic`` (a fresh consumer reads to the end offsets)."""
    with connect(srv) as driver:
        info = driver.topic_client.describe_topic(topic)
        total = sum(
            p.partition_stats.partition_end - p.partition_stats.partition_start
            for p in info.partitions
        )
        reader = driver.topic_client.reader(topic, consumer=consumer)
        try:
            msgs = receive(reader, total, timeout=60)
        finally:
            reader.close(flush=False)
    assert len(msgs) == total
    return msgs


def test_restart_between_writes_continues_seq_nos_and_skips_resent(
    server: ServerProcess, topic_name: str
) -> None:
    topic = path(topic_name)
    with connect(server) as driver:
        driver.topic_client.create_topic(topic, min_active_partitions=2)
        with driver.topic_client.writer(topic, producer_id="steady") as w:
            w.write([ydb.TopicWriterMessage(b"a%d" % i) for i in range(100)])

    server.restart()
    with connect(server) as driver:
        tc = driver.topic_client
        w = tc.writer(topic, producer_id="steady")
        assert w.wait_init(timeout=10).last_seqno == 100
        assert w.write_with_ack(ydb.TopicWriterMessage(b"b0")) == ydb.TopicWriteResult.Written(
            offset=100
        )
        # The same writer object lives through a restart: the SDK reconnects and goes on.
        server.restart()
        w.write([ydb.TopicWriterMessage(b"b%d" % i) for i in range(1, 50)])
        w.close()
        # A producer that resends (explicit seq_nos, as after a lost ack): the stored ones
        # are reported skipped, the new ones written.
        resend = tc.writer(topic, producer_id="steady", auto_seqno=False)
        results = resend.write_with_ack(
            [ydb.TopicWriterMessage(b"dup", seqno=s) for s in range(141, 156)]
        )
        resend.close()
    assert [type(r).__name__ for r in results] == ["Skipped"] * 10 + ["Written"] * 5
    assert [r.offset for r in results[10:]] == [150, 151, 152, 153, 154]

    msgs = read_everything(server, topic, "check")
    assert [m.seqno for m in msgs] == list(range(1, 156))
    assert [m.data for m in msgs] == (
        [b"a%d" % i for i in range(100)] + [b"b%d" % i for i in range(50)] + [b"dup"] * 5
    )
    assert [m.offset for m in msgs] == list(range(155))


def test_kill_9_during_sdk_write_load_loses_no_acknowledged_message(
    server: ServerProcess, topic_name: str
) -> None:
    """Ten rounds: an SDK writer streams messages, the server is killed with SIGKILL at a
    random moment after the round's first ack, then restarted. Every round must get acks
    (the SDK writes again after each restart), every message whose ack the SDK saw must be
    stored, and no message may be stored twice."""
    topic = path(topic_name)
    rng = random.Random(9)
    with connect(server) as driver:
        driver.topic_client.create_topic(topic, min_active_partitions=2)
    acked: set[bytes] = set()
    in_flight_at_kill: list[int] = []
    rounds = 10
    for rnd in range(rounds):
        if rnd:
            server.start()
        # A channel of its own: the default shared gRPC subchannel to this address is still in
        # reconnect backoff from the previous round's dead server.
        driver = connect(server, channel_options=[("grpc.use_local_subchannel_pool", 1)])
        writer = driver.topic_client.writer(topic, producer_id="crash", codec=ydb.TopicCodec.RAW)
        writer.wait_init(timeout=10)
        killed = threading.Event()
        first_ack = threading.Event()
        futures: list[tuple[list[bytes], Future[list[ydb.TopicWriteResult]]]] = []

        def killer(
            after: float = rng.uniform(0.0, 0.5),
            done: threading.Event = killed,
            acked_once: threading.Event = first_ack,
            futs: list[tuple[list[bytes], Future[list[ydb.TopicWriteResult]]]] = futures,
        ) -> None:
            acked_once.wait(30)  # a round that got no ack would prove nothing
            time.sleep(after)  # the fault: a random moment inside the write load
            in_flight_at_kill.append(sum(not f.done() for _, f in list(futs)))
            server.kill()
            done.set()

        def on_ack(f: Future[list[ydb.TopicWriteResult]], ev: threading.Event = first_ack) -> None:
            if f.exception() is None:
                ev.set()

        threading.Thread(target=killer, daemon=True).start()
        chunk = 0
        deadline = time.monotonic() + 60
        while not killed.is_set() and time.monotonic() < deadline:
            data = [b"%d:%d:%d" % (rnd, chunk, j) for j in range(20)]
            msgs = [ydb.TopicWriterMessage(d) for d in data]
            fut = writer.async_write_with_ack(msgs)
            fut.add_done_callback(on_ack)
            futures.append((data, fut))
            chunk += 1
            if len(futures) > WINDOW:  # a bounded window of unacknowledged writes
                wait([futures[-WINDOW][1]], timeout=0.5)
        assert killed.wait(60), f"round {rnd}: no ack came, so the server was never killed"
        round_acked = 0
        for data, fut in futures:
            if fut.done() and fut.exception() is None:
                results = fut.result()
                assert all(isinstance(r, ydb.TopicWriteResult.Written) for r in results)
                acked.update(data)
                round_acked += len(data)
        writer.close(flush=False, timeout=10)
        driver.stop(timeout=0.2)
        assert round_acked > 0, f"round {rnd} acknowledged nothing"
    server.start()
    msgs = read_everything(server, topic, "verify")
    stored = [m.data for m in msgs]
    assert len(stored) == len(set(stored)), "nothing stored twice"
    assert acked <= set(stored), f"{len(acked - set(stored))} acknowledged messages lost"
    seqs = [m.seqno for m in msgs]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    # the kills landed inside the load: writes were waiting for their acks
    assert any(in_flight_at_kill), in_flight_at_kill
