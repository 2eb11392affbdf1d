"""weir through its Pulsar front: the unmodified ``pulsar-client`` against weir and against a
null server.

The null server (``bench/pulsar_null_server.py``) answers receipts at once and serves
entries from memory, so the same client code against it is the ceiling any server can
give ``pulsar-client``; ``weir-pulsar / pulsar-null`` is the share of the client's own
speed that weir delivers (the issue's goal: at least 80 %).

Produce: one client process, one producer with batching on (the client's defaults:
up to 1,000 messages / 128 KiB / 10 ms per batch), ``send_async`` with a callback per
message, ``flush()`` at the end. Consume: one client process, a fresh Exclusive
subscription from the earliest message, ``receive()`` and ``acknowledge()`` per message
(the client groups acks). Workers are processes meeting at a barrier, as everywhere in
the harness; the server's CPU per message comes from /proc.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.peers import servers
from bench.peers.workloads import Gate, Result, Target, _now
from bench.throughput import Window, measure
from bench.weir_workloads import ROOT

SYSTEM_WEIR = "weir-pulsar"
SYSTEM_NULL = "pulsar-null"


def client_version() -> str:
    import pulsar

    return str(getattr(pulsar, "__version__", "?"))


def start_null_server(data_dir: Path, timeout: float = 60.0) -> Any:
    """bench/pulsar_null_server.py: answers receipts at once, serves entries from memory."""
    return servers.start_null_server(
        ROOT / "bench" / "pulsar_null_server.py",
        data_dir,
        system=SYSTEM_NULL,
        version=f"Pulsar null server (pulsar-client {client_version()})",
        notes="answers receipts at once, serves entries from memory",
        timeout=timeout,
    )


def weir_target(h: Any) -> Target:
    """The Pulsar port of a running weir server (``bench.weir_workloads.start_server``)."""
    return Target(
        SYSTEM_WEIR,
        "pulsar",
        h.host,
        h.ports["pulsar"],
        True,
        f"{h.version} + pulsar-client {client_version()}",
    )


def null_target(h: Any) -> Target:
    return Target(SYSTEM_NULL, "pulsar", h.host, h.port, False, h.version)


@dataclass
class TopicRef:
    topic: str  # the topic name as the clients give it


def prepare_topic(t: Target, tag: str, size: int) -> TopicRef:
    """A fresh name; the null server serves ``size``-byte messages to consumers of it (weir
    creates the topic on first use: one partition)."""
    return TopicRef(f"wb{tag}{uuid.uuid4().hex[:8]}-s{size}")


def drop_topic(native: Target | None, ref: TopicRef) -> None:
    """Drop the topic on weir (through the native SDK); nothing to do on the null server."""
    if native is None:
        return
    import weir

    with weir.Client(f"{native.host}:{native.port}") as c, contextlib.suppress(Exception):
        c.drop_topic(f"public/default/{ref.topic}")


def _client(t: Target) -> Any:
    import pulsar

    return pulsar.Client(
        f"pulsar://{t.host}:{t.port}",
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


# --------------------------------------------------------------------------
# workers
# --------------------------------------------------------------------------


def _produce_worker(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:

    import pulsar

    payloads = [os.urandom(p["size"]) for _ in range(256)]
    n = p["n"]
    client = _client(t)
    try:
        producer = client.create_producer(
            p["topic"],
            batching_enabled=True,
            max_pending_messages=10_000,
            block_if_queue_full=True,
            send_timeout_millis=0,
        )
        lock = threading.Lock()
        counts = {"ok": 0, "failed": 0}

        def done(res: Any, _mid: Any) -> None:
            with lock:
                counts["ok" if res == pulsar.Result.Ok else "failed"] += 1

        w = Window(gate, p["max_seconds"])
        sent = 0
        while sent < n:
            if sent % 1000 == 0 and w.over():
                break
            producer.send_async(payloads[sent & 255], done)
            sent += 1
        producer.flush()
        t1 = _now()
        cpu = w.cpu()
        producer.close()
    finally:
        client.close()
    acked = counts["ok"]
    return w.result(acked, acked * p["size"], t1, cpu, sent=sent, failed=sent - acked)


def _consume_worker(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:

    import pulsar

    client = _client(t)
    try:
        consumer = client.subscribe(
            p["topic"],
            f"c{uuid.uuid4().hex[:8]}",
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=1000,
        )
        w = Window(gate, p["max_seconds"])
        count = nbytes = 0
        t_last = w.t0
        while count < p["n"]:
            if count % 1000 == 0 and w.over():
                break
            try:
                m = consumer.receive(int(p["max_idle"] * 1000))
            except pulsar.Timeout:
                break
            count += 1
            nbytes += len(m.data())
            consumer.acknowledge(m)
            t_last = _now()
        cpu = w.cpu()
        consumer.close()
    finally:
        client.close()
    return w.result(count, nbytes, t_last, cpu)


# --------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------


def produce(
    t: Target, ref: TopicRef, n: int, size: int, max_seconds: float, server_pid: int | None = None
) -> Result:
    spec = dict(topic=ref.topic, n=n, size=size, max_seconds=max_seconds)
    run = measure(t, [(_produce_worker, spec)], max_seconds, server_pid)
    return run.row(
        f"pulsar produce P=1 {size_label(size)} batched",
        dict(
            target_messages=n,
            size=size,
            how="pulsar-client producer, batching on (defaults), send_async + callback, flush()",
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
    spec = dict(topic=ref.topic, n=available, size=size, max_idle=5.0, max_seconds=max_seconds)
    run = measure(t, [(_consume_worker, spec)], max_seconds, server_pid)
    return run.row(
        f"pulsar consume C=1 {size_label(size)}",
        dict(available=available, size=size, how="pulsar-client receive() + acknowledge()"),
        available=available,
    )


def size_label(size: int) -> str:
    return f"{size // 1024}KB" if size >= 1024 else f"{size}B"
