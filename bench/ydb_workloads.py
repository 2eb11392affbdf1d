"""weir through its YDB front: the unmodified ``ydb`` SDK against weir and against a null server.

The null server (``bench/ydb_null_server.py``) acknowledges writes without
storing anything, so the same SDK code against it is the ceiling any server can
give that SDK; ``weir-ydb / ydb-null`` is then the share of the SDK's own speed
that weir delivers (the goal: at least 80 %).

Two writer patterns, because the SDK's cost depends on them far more than on
the server: ``write(msg)`` per message (one WriteRequest each, ~1-2k msgs/s,
bound by the SDK) and ``write([100 msgs])``.  Consumption goes through the
SDK's reader (weir only: the null server serves no partitions).  Workers are
processes meeting at a barrier, as everywhere in the harness.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.peers import servers
from bench.peers.workloads import Gate, Result, Target, _now
from bench.throughput import Window, measure
from bench.weir_workloads import ROOT

DATABASE = "/local"
SYSTEM_WEIR = "weir-ydb"
SYSTEM_NULL = "ydb-null"


def start_null_server(data_dir: Path, timeout: float = 60.0) -> Any:
    """bench/ydb_null_server.py: acks without storing, the ceiling of the ydb SDK."""
    return servers.start_null_server(
        ROOT / "bench" / "ydb_null_server.py",
        data_dir,
        system=SYSTEM_NULL,
        version=f"ydb null server (ydb SDK {ydb_version()})",
        notes="acks without storing: the ceiling of the ydb SDK",
        args=("--log-level", "WARNING"),
        timeout=timeout,
    )


def ydb_version() -> str:
    import ydb

    return str(getattr(ydb, "__version__", "?"))


def weir_target(h: Any) -> Target:
    """The YDB front of a running weir server (same port as the native protocol)."""
    return Target(
        SYSTEM_WEIR, "ydb", h.host, h.port, True, f"{h.version} + ydb SDK {ydb_version()}"
    )


def null_target(h: Any) -> Target:
    return Target(SYSTEM_NULL, "ydb", h.host, h.port, False, h.version)


@dataclass
class TopicRef:
    path: str


def _driver(t: Target) -> Any:
    import ydb

    d = ydb.Driver(endpoint=f"grpc://{t.host}:{t.port}", database=DATABASE)
    d.wait(timeout=15, fail_fast=True)
    return d


def prepare_topic(t: Target, tag: str) -> TopicRef:
    ref = TopicRef(f"{DATABASE}/wb{tag}{uuid.uuid4().hex[:8]}")
    with _driver(t) as d:
        d.topic_client.create_topic(ref.path, min_active_partitions=1)
    return ref


def drop_topic(t: Target, ref: TopicRef) -> None:
    import ydb

    with _driver(t) as d, contextlib.suppress(ydb.Error):
        d.topic_client.drop_topic(ref.path)


# --------------------------------------------------------------------------
# workers
# --------------------------------------------------------------------------


def _produce_worker(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """One sync SDK writer: ``write(msg)`` or ``write([per_call msgs])``, then ``flush()``."""

    import ydb

    payloads = [os.urandom(p["size"]) for _ in range(256)]
    n, per_call = p["n"], p["per_call"]
    with _driver(t) as driver:
        writer = driver.topic_client.writer(p["path"], producer_id=f"ydb-{uuid.uuid4().hex[:8]}")
        writer.wait_init(timeout=15)
        w = Window(gate, p["max_seconds"])
        sent = 0
        while sent < n and not w.over():
            if per_call == 1:
                for i in range(sent, min(n, sent + 100)):
                    writer.write(ydb.TopicWriterMessage(payloads[i & 255]))
                sent = min(n, sent + 100)
            else:
                k = min(per_call, n - sent)
                writer.write([ydb.TopicWriterMessage(payloads[(sent + i) & 255]) for i in range(k)])
                sent += k
        ack_timeout = False
        try:
            writer.flush(timeout=120)
        except Exception:  # TimeoutError or an SDK error: not acked
            ack_timeout = True
        t1 = _now()
        cpu = w.cpu()
        with contextlib.suppress(Exception):
            writer.close(flush=False)
    acked = 0 if ack_timeout else sent
    return w.result(
        acked, acked * p["size"], t1, cpu, sent=sent, failed=sent - acked, ack_timeout=ack_timeout
    )


def _consume_worker(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """The SDK's sync reader of a fresh consumer; commits every batch."""

    with _driver(t) as driver:
        w = Window(gate, p["max_seconds"])
        reader = driver.topic_client.reader(p["path"], consumer=p["consumer"])
        count = nbytes = 0
        t_last = w.t0
        idle_since = _now()
        while count < p["n"]:
            now = _now()
            if w.over(now):
                break
            try:
                batch = reader.receive_batch(timeout=0.2)
            except TimeoutError:
                batch = None
            if batch is None or not batch.messages:
                if now - idle_since > p["max_idle"] * 1e9:
                    break
                continue
            count += len(batch.messages)
            nbytes += sum(len(m.data) for m in batch.messages)
            reader.commit(batch)
            t_last = idle_since = _now()
        cpu = w.cpu()
        with contextlib.suppress(Exception):
            reader.close(flush=True, timeout=10)  # waits for the commit acks
    return w.result(count, nbytes, t_last, cpu)


# --------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------


def pattern_label(per_call: int) -> str:
    return "write(msg)" if per_call == 1 else f"write([{per_call} msgs])"


def produce(
    t: Target,
    ref: TopicRef,
    n: int,
    size: int,
    per_call: int,
    max_seconds: float,
    server_pid: int | None = None,
) -> Result:
    """One SDK writer process writing ``n`` messages, ``per_call`` per ``write()``."""
    spec = dict(path=ref.path, n=n, size=size, per_call=per_call, max_seconds=max_seconds)
    run = measure(t, [(_produce_worker, spec)], max_seconds, server_pid)
    return run.row(
        f"ydb produce P=1 {size}B {pattern_label(per_call)}",
        dict(
            target_messages=n,
            size=size,
            per_call=per_call,
            how=f"ydb sync TopicWriter, {pattern_label(per_call)}, flush() at the end",
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
    """Read ``available`` messages back through the SDK's reader (one consumer)."""
    spec = dict(
        path=ref.path,
        n=available,
        consumer=f"c{uuid.uuid4().hex[:8]}",
        max_idle=5.0,
        max_seconds=max_seconds,
    )
    run = measure(t, [(_consume_worker, spec)], max_seconds, server_pid)
    return run.row(
        f"ydb consume C=1 {size}B",
        dict(available=available, size=size, how="ydb sync TopicReader, commit per batch"),
        available=available,
    )
