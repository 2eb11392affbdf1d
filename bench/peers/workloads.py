"""Produce, consume and fixed-rate latency workloads against the peer brokers.

Each workload drives a peer the way a competent user of its Python client
would (async acks for NATS, pipelines for Redis, batched sends with confirms
for RabbitMQ streams) and returns :class:`Result` rows of one shape, so the
harness can put peers and weir side by side.

Concurrency model: every producer and consumer runs in its own OS process
(``multiprocessing`` spawn context) with its own connection.  The clients are
pure Python and CPU bound, so asyncio tasks in one process would share one
core and one GIL and "4 producers" would measure nothing but the client;
processes are what a user scales Python producers with.  Inside a process,
NATS and RabbitMQ use asyncio (nats-py, rstream are asyncio-only), Redis uses
the synchronous redis-py client with hiredis.  Workers meet at a barrier after
connecting; the clock runs from the barrier to the last ack (producers) or the
last message processed (consumers), so connection setup is not measured.

Every loop is bounded twice: by a message count and by a wall-clock limit; a
capped run reports what it did (``extra["capped_by_time"]``).

Clock: ``time.monotonic_ns()`` is CLOCK_MONOTONIC, shared by all processes on
one Linux machine, so a timestamp embedded by a producer process can be
compared by a consumer process.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing as mp
import os
import queue as queue_mod
import struct
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

MB = 1_000_000
_SPAWN = mp.get_context("spawn")
_STAMP = struct.Struct("<qq")  # intended send time (ns, monotonic), sequence number


# --------------------------------------------------------------------------
# result shape
# --------------------------------------------------------------------------


@dataclass
class Result:
    """One measurement; the shape weir's own harness also emits."""

    system: str
    workload: str
    messages: int
    bytes: int
    seconds: float
    fsync_before_ack: bool
    p50_ms: float | None
    p99_ms: float | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / MB / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["msgs_per_s"] = self.msgs_per_s
        d["mb_per_s"] = self.mb_per_s
        return d


@dataclass(frozen=True)
class Target:
    """Where a running peer listens and what its ack promises (picklable)."""

    system: str
    kind: str  # "nats" | "redis" | "rabbitmq"
    host: str
    port: int
    fsync_before_ack: bool
    version: str = ""


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of an already sorted sequence (None if empty)."""
    if not sorted_values:
        return None
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100.0 * len(sorted_values)) - 1))
    return float(sorted_values[k])


class _Lat(list):  # type: ignore[type-arg]
    """Latency samples (ms) that also remember when the last one completed."""

    last_ns: int = 0

    def append(self, x: float) -> None:
        super().append(x)
        self.last_ns = time.monotonic_ns()

    def extend(self, xs: Any) -> None:
        super().extend(xs)
        self.last_ns = time.monotonic_ns()


def _byte_capped(size: int, cap_bytes: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, cap_bytes // max(1, size)))


# --------------------------------------------------------------------------
# process orchestration
# --------------------------------------------------------------------------


class Gate:
    """Start barrier plus a shared counter, handed to every worker process."""

    def __init__(self, parties: int) -> None:
        self.barrier = _SPAWN.Barrier(parties)
        self.total = _SPAWN.Value("q", -1)  # latency: messages sent, -1 = still sending
        self.done = _SPAWN.Value("q", 0)  # consumer groups: messages processed by the group

    def wait(self, timeout: float = 120.0) -> None:
        self.barrier.wait(timeout)


WorkerFn = Callable[..., Any]


def _worker_main(
    fn: WorkerFn, target: Target, params: dict[str, Any], gate: Gate, q: Any, idx: int
) -> None:
    try:
        if asyncio.iscoroutinefunction(fn):
            res = asyncio.run(fn(target, params, gate))
        else:
            res = fn(target, params, gate)
        q.put((idx, res, None))
    except BaseException:  # report, never hang the parent
        with contextlib.suppress(Exception):
            gate.barrier.abort()
        q.put((idx, None, traceback.format_exc()))


def _run_workers(
    target: Target, specs: Sequence[tuple[WorkerFn, dict[str, Any]]], timeout: float
) -> list[dict[str, Any]]:
    """Run one process per (fn, params), return their result dicts in order."""
    gate = Gate(len(specs))
    q = _SPAWN.Queue()
    procs = [
        _SPAWN.Process(target=_worker_main, args=(fn, target, p, gate, q, i), daemon=True)
        for i, (fn, p) in enumerate(specs)
    ]
    for p in procs:
        p.start()
    results: list[dict[str, Any] | None] = [None] * len(specs)
    errors: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        got = 0
        while got < len(specs):
            if time.monotonic() > deadline:
                errors.append(f"workers timed out after {timeout:.0f}s")
                break
            try:
                idx, res, err = q.get(timeout=0.5)
            except queue_mod.Empty:
                # a worker that died without reporting (e.g. killed, import error)
                if all(p.exitcode is not None for p in procs) and q.empty():
                    errors.append(f"workers exited without a result: {[p.exitcode for p in procs]}")
                    break
                continue
            got += 1
            if err:
                errors.append(err)
                break
            results[idx] = res
    except BaseException:  # interrupted: do not wait for workers to finish their phase
        for p in procs:
            if p.is_alive():
                p.terminate()
        raise
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.terminate()
                p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)
    if errors:
        raise RuntimeError(f"{target.system}: worker failed:\n" + "\n".join(errors))
    return [r for r in results if r is not None]


def _merge_throughput(
    target: Target, workload: str, parts: list[dict[str, Any]], extra: dict[str, Any]
) -> Result:
    t0 = min(p["t_start"] for p in parts)
    t1 = max(p["t_end"] for p in parts)
    msgs = sum(p["messages"] for p in parts)
    nbytes = sum(p["bytes"] for p in parts)
    ex = dict(extra)
    ex["capped_by_time"] = any(p.get("capped", False) for p in parts)
    ex["per_worker_messages"] = [p["messages"] for p in parts]
    for key in ("failed", "sent"):
        if any(key in p for p in parts):
            ex[key] = sum(p.get(key, 0) for p in parts)
    errs = sorted({e for p in parts for e in p.get("server_errors", [])})
    if errs:
        ex["server_errors"] = errs[:3]
    if any(p.get("ack_timeout") for p in parts):
        ex["ack_timeout"] = True
    return Result(
        system=target.system,
        workload=workload,
        messages=msgs,
        bytes=nbytes,
        seconds=max(1e-9, (t1 - t0) / 1e9),
        fsync_before_ack=target.fsync_before_ack,
        p50_ms=None,
        p99_ms=None,
        extra=ex,
    )


def _now() -> int:
    return time.monotonic_ns()


def _split(n: int, parts: int) -> list[int]:
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


# --------------------------------------------------------------------------
# NATS JetStream
# --------------------------------------------------------------------------


async def _nats_connect(t: Target) -> Any:
    import nats

    async def on_error(e: Exception) -> None:
        # nats-py raises server API errors (e.g. 429) inside its async-reply
        # handler; they surface here.  Counted by the callers, not printed.
        _NATS_ERRORS.append(repr(e))

    return await nats.connect(
        f"nats://{t.host}:{t.port}",
        connect_timeout=5,
        allow_reconnect=False,
        pending_size=8 * 1024 * 1024,
        error_cb=on_error,
    )


_NATS_ERRORS: list[str] = []  # per worker process


async def _nats_setup(t: Target, stream: str, subject: str) -> None:
    from nats.js.api import StorageType, StreamConfig

    nc = await _nats_connect(t)
    try:
        await nc.jetstream().add_stream(
            StreamConfig(name=stream, subjects=[subject], storage=StorageType.FILE, num_replicas=1)
        )
    finally:
        await nc.close()


async def _nats_add_consumer(t: Target, stream: str, durable: str) -> None:
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    nc = await _nats_connect(t)
    try:
        await nc.jetstream().add_consumer(
            stream,
            ConsumerConfig(
                durable_name=durable,
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.ALL,
                max_ack_pending=200_000,
                ack_wait=120,
            ),
        )
    finally:
        await nc.close()


async def _nats_drop(t: Target, stream: str) -> None:
    nc = await _nats_connect(t)
    try:
        await nc.jetstream().delete_stream(stream)
    finally:
        await nc.close()


async def _nats_produce(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """js.publish_async with a bounded window of un-acked publishes."""
    nc = await _nats_connect(t)
    js = nc.jetstream(publish_async_max_pending=p["window"])
    payload = os.urandom(p["size"])
    subject, n = p["subject"], p["n"]
    acked = failed = 0

    def on_ack(f: asyncio.Future[Any]) -> None:
        nonlocal acked, failed
        if f.cancelled() or f.exception() is not None:
            failed += 1
        else:
            acked += 1

    gate.wait()
    t0 = _now()
    deadline = t0 + int(p["max_seconds"] * 1e9)
    sent = 0
    capped = False
    while sent < n:
        if sent & 255 == 0 and _now() > deadline:
            capped = True
            break
        fut = await js.publish_async(subject, payload)
        fut.add_done_callback(on_ack)
        sent += 1
    await nc.flush()
    ack_timeout = False
    try:
        await asyncio.wait_for(js.publish_async_completed(), timeout=60)
    except TimeoutError:
        # a future nats-py never resolves (server error reply, see README)
        ack_timeout = True
    t1 = _now()
    await nc.close()
    return dict(
        messages=acked,
        bytes=acked * p["size"],
        t_start=t0,
        t_end=t1,
        sent=sent,
        failed=sent - acked,
        capped=capped,
        ack_timeout=ack_timeout,
        server_errors=sorted(set(_NATS_ERRORS))[:3],
    )


async def _nats_consume(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """Durable pull consumer: fetch batches, explicit ack per message."""
    import nats.errors

    nc = await _nats_connect(t)
    js = nc.jetstream()
    sub = await js.pull_subscribe_bind(durable=p["durable"], stream=p["stream"])
    batch = p["batch"]
    gate.wait()
    t0 = _now()
    deadline = t0 + int(p["max_seconds"] * 1e9)
    count = nbytes = idle = 0
    t_last = t0
    capped = False
    # Run until the *group* has processed everything: a fetch that expires
    # while the server is still delivering leaves messages in this
    # subscription's queue, and the next fetch must pick them up (leaving
    # early would strand them as ack-pending until ack_wait).
    while gate.done.value < p["n"]:
        if _now() > deadline:
            capped = True
            break
        want = max(1, min(batch, p["n"] - gate.done.value))
        try:
            msgs = await sub.fetch(want, timeout=p["idle_timeout"])
        except (TimeoutError, nats.errors.TimeoutError):
            msgs = []
        if not msgs:
            idle += 1
            if idle >= p["max_idle"]:
                break  # nothing more for us; reported via the group total
            continue
        idle = 0
        for m in msgs:
            nbytes += len(m.data)
            await m.ack()
        count += len(msgs)
        with gate.done.get_lock():
            gate.done.value += len(msgs)
        t_last = _now()
    f0 = _now()
    await nc.flush()
    t_last += _now() - f0  # the last acks' flush belongs to the work
    await nc.close()
    return dict(messages=count, bytes=nbytes, t_start=t0, t_end=t_last, capped=capped)


async def _nats_lat_producer(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    nc = await _nats_connect(t)
    js = nc.jetstream(publish_async_max_pending=p["max_inflight"])
    lat = _Lat()

    def on_ack(intended: int, f: asyncio.Future[Any]) -> None:
        if not f.cancelled() and f.exception() is None:
            lat.append((_now() - intended) / 1e6)

    async def send(seq: int, intended: int, payload: bytes) -> None:
        fut = await js.publish_async(p["subject"], payload)
        fut.add_done_callback(lambda f, i=intended: on_ack(i, f))

    res = await _paced_async(p, gate, send)
    await nc.flush()
    try:
        await asyncio.wait_for(js.publish_async_completed(), timeout=p["grace"])
    except TimeoutError:
        res["ack_timeout"] = True
    gate.total.value = res["sent"]
    await nc.close()
    res["ack_ms"], res["last_ns"] = list(lat), lat.last_ns
    return res


async def _nats_lat_consumer(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """Push consumer (callback per message, explicit ack): the low-latency path.

    A pull ``fetch(batch)`` waits for its batch to fill (or time out), which
    adds ~batch/rate to every message; throughput consumers use fetch, a
    latency-sensitive user subscribes.
    """
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    nc = await _nats_connect(t)
    e2e = _Lat()

    async def on_msg(m: Any) -> None:
        e2e.append((_now() - _STAMP.unpack_from(m.data)[0]) / 1e6)
        await m.ack()

    sub = await nc.jetstream().subscribe(
        p["subject"],
        stream=p["stream"],
        cb=on_msg,
        manual_ack=True,
        config=ConsumerConfig(
            ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL, max_ack_pending=100_000
        ),
    )
    gate.wait()
    hard = _now() + int((p["duration"] + p["grace"] + 2.0) * 1e9)
    while _now() < hard:
        total = gate.total.value
        if 0 <= total <= len(e2e):
            break
        await asyncio.sleep(0.05)
    await sub.unsubscribe()
    await nc.close()
    return dict(e2e_ms=list(e2e), last_ns=e2e.last_ns)


# --------------------------------------------------------------------------
# Redis Streams
# --------------------------------------------------------------------------


def _redis(t: Target) -> Any:
    import redis

    return redis.Redis(host=t.host, port=t.port, socket_timeout=120, socket_connect_timeout=5)


def _redis_produce(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """Pipelined XADD (no MULTI), one pipeline in flight per connection."""
    r = _redis(t)
    r.ping()
    payload = os.urandom(p["size"])
    key, n, pipe_n = p["key"], p["n"], p["pipeline"]
    gate.wait()
    t0 = _now()
    deadline = t0 + int(p["max_seconds"] * 1e9)
    done = 0
    capped = False
    while done < n:
        if _now() > deadline:
            capped = True
            break
        k = min(pipe_n, n - done)
        pipe = r.pipeline(transaction=False)
        for _ in range(k):
            pipe.xadd(key, {b"d": payload})
        pipe.execute()
        done += k
    t1 = _now()
    r.close()
    return dict(messages=done, bytes=done * p["size"], t_start=t0, t_end=t1, capped=capped)


def _redis_consume(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """XREADGROUP with a large COUNT; XACK of the previous batch rides in the same round trip."""
    r = _redis(t)
    r.ping()
    key, group, me, count_n = p["key"], p["group"], p["consumer"], p["count"]
    gate.wait()
    t0 = _now()
    deadline = t0 + int(p["max_seconds"] * 1e9)
    count = nbytes = 0
    pending_ids: list[bytes] = []
    capped = False
    while True:
        if _now() > deadline:
            capped = True
            break
        pipe = r.pipeline(transaction=False)
        if pending_ids:
            pipe.xack(key, group, *pending_ids)
        want = min(count_n, p["n"] - count)
        if want > 0:
            pipe.xreadgroup(group, me, {key: ">"}, count=want)
        out = pipe.execute()
        pending_ids = []
        if want <= 0:
            break
        reply = out[-1]
        if not reply:
            break  # drained
        entries = reply[0][1]
        for eid, fields in entries:
            nbytes += len(fields[b"d"])
            pending_ids.append(eid)
        count += len(entries)
    t1 = _now()
    r.close()
    return dict(messages=count, bytes=nbytes, t_start=t0, t_end=t1, capped=capped)


def _redis_lat_producer(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """Paced XADD: everything due at a tick goes in one pipeline (group commit)."""
    r = _redis(t)
    r.ping()
    pad = os.urandom(max(0, p["size"] - _STAMP.size))
    rate, total = p["rate"], int(p["rate"] * p["duration"])
    interval = 1e9 / rate
    lat = _Lat()
    gate.wait()
    start = _now()
    hard = start + int((p["duration"] + p["grace"]) * 1e9)
    seq = 0
    max_batch = 0
    while seq < total and _now() < hard:
        due = min(total, int((_now() - start) / interval) + 1)
        if seq >= due:
            time.sleep(min(0.0005, max(0.0, (start + seq * interval - _now()) / 1e9)))
            continue
        pipe = r.pipeline(transaction=False)
        intended = []
        for s in range(seq, due):
            it = start + int(s * interval)
            intended.append(it)
            pipe.xadd(p["key"], {b"d": _STAMP.pack(it, s) + pad})
        pipe.execute()
        now = _now()
        lat.extend((now - it) / 1e6 for it in intended)
        max_batch = max(max_batch, due - seq)
        seq = due
    end = _now()
    gate.total.value = seq
    r.close()
    return dict(
        sent=seq,
        t_start=start,
        t_end=end,
        ack_ms=list(lat),
        last_ns=lat.last_ns,
        max_pipeline=max_batch,
    )


def _redis_lat_consumer(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """Plain XREAD BLOCK from the start of the (fresh) stream."""
    r = _redis(t)
    r.ping()
    e2e = _Lat()
    last = b"0-0"
    gate.wait()
    hard = _now() + int((p["duration"] + p["grace"] + 2.0) * 1e9)
    while _now() < hard:
        total = gate.total.value
        if 0 <= total <= len(e2e):
            break
        reply = r.xread({p["key"]: last}, count=1000, block=100)
        if not reply:
            continue
        now = _now()
        for eid, fields in reply[0][1]:
            e2e.append((now - _STAMP.unpack_from(fields[b"d"])[0]) / 1e6)
            last = eid
    r.close()
    return dict(e2e_ms=list(e2e), last_ns=e2e.last_ns)


# --------------------------------------------------------------------------
# RabbitMQ streams (rstream)
# --------------------------------------------------------------------------

RABBIT_USER = RABBIT_PASSWORD = "guest"
RABBIT_FRAME_BUDGET = 900_000  # stay under the 1 MiB stream frame_max


def _tune_rstream() -> None:
    """rstream reads its socket 256 bytes per await (rstream.connection.CHUNK_SIZE).

    A ~900 KB chunk of 10 KB messages then costs ~3,500 event-loop round
    trips and the consumer, not the broker, is measured (~1,700 msg/s).  A
    64 KiB read size is what any user who profiled this would set.
    """
    import rstream.connection

    rstream.connection.CHUNK_SIZE = 64 * 1024


def _rabbit_producer(t: Target) -> Any:
    from rstream import Producer

    _tune_rstream()

    return Producer(t.host, t.port, username=RABBIT_USER, password=RABBIT_PASSWORD)


async def _rabbit_setup(t: Target, stream: str) -> None:
    async with _rabbit_producer(t) as prod:
        await prod.create_stream(stream, exists_ok=True)


async def _rabbit_drop(t: Target, stream: str) -> None:
    async with _rabbit_producer(t) as prod:
        await prod.delete_stream(stream, missing_ok=True)


async def _rabbit_produce(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """Producer.send_batch of frame-sized batches, window of unconfirmed messages."""
    payload = os.urandom(p["size"])
    n, window = p["n"], p["window"]
    per_batch = _byte_capped(p["size"] + 24, RABBIT_FRAME_BUDGET, 1, 2000)
    confirmed = failed = 0
    progress = asyncio.Event()

    def on_confirm(status: Any) -> None:
        nonlocal confirmed, failed
        if status.is_confirmed:
            confirmed += 1
        else:
            failed += 1
        progress.set()

    prod = _rabbit_producer(t)
    await prod.start()
    gate.wait()
    t0 = _now()
    deadline = t0 + int(p["max_seconds"] * 1e9)
    sent = 0
    capped = False
    while sent < n:
        if _now() > deadline:
            capped = True
            break
        while sent - confirmed - failed > window:
            progress.clear()
            await asyncio.wait_for(progress.wait(), timeout=60)
        k = min(per_batch, n - sent)
        await prod.send_batch(p["stream"], [payload] * k, on_publish_confirm=on_confirm)
        sent += k
    drain_deadline = _now() + 60 * 10**9
    while confirmed + failed < sent and _now() < drain_deadline:
        progress.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(progress.wait(), timeout=1)
    t1 = _now()
    await prod.close()
    return dict(
        messages=confirmed,
        bytes=confirmed * p["size"],
        t_start=t0,
        t_end=t1,
        sent=sent,
        failed=failed,
        capped=capped,
    )


async def _rabbit_consume(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """Stream consumer reading offsets [first, end) and stopping there."""
    from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

    first, end = p["first"], p["end"]
    count = nbytes = 0
    t_last = 0
    done = asyncio.Event()

    def on_msg(body: bytes, ctx: Any) -> None:
        nonlocal count, nbytes, t_last
        if first <= ctx.offset < end:
            count += 1
            nbytes += len(body)
            if ctx.offset == end - 1 or count >= end - first:
                t_last = _now()
                done.set()

    _tune_rstream()
    cons = Consumer(t.host, t.port, username=RABBIT_USER, password=RABBIT_PASSWORD)
    await cons.start()
    gate.wait()
    t0 = _now()
    spec = (
        ConsumerOffsetSpecification(OffsetType.FIRST, None)
        if first == 0
        else ConsumerOffsetSpecification(OffsetType.OFFSET, first)
    )
    await cons.subscribe(p["stream"], on_msg, offset_specification=spec, initial_credit=p["credit"])
    capped = False
    try:
        await asyncio.wait_for(done.wait(), timeout=p["max_seconds"])
    except TimeoutError:
        capped = True
        t_last = _now()
    await cons.close()
    return dict(messages=count, bytes=nbytes, t_start=t0, t_end=t_last, capped=capped)


async def _rabbit_lat_producer(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """Paced send_batch (all messages due at a tick), confirm latency per publishing id."""
    from rstream import RawMessage

    lat = _Lat()
    intended_by_id: dict[int, int] = {}

    def on_confirm(status: Any) -> None:
        it = intended_by_id.pop(status.message_id, None)
        if it is not None and status.is_confirmed:
            lat.append((_now() - it) / 1e6)

    prod = _rabbit_producer(t)
    await prod.start()
    pending: list[Any] = []

    async def send(seq: int, intended: int, payload: bytes) -> None:
        intended_by_id[seq + 1] = intended
        pending.append(RawMessage(payload, publishing_id=seq + 1))

    async def flush() -> None:
        if pending:
            batch = list(pending)
            pending.clear()
            await prod.send_batch(p["stream"], batch, on_publish_confirm=on_confirm)

    res = await _paced_async(p, gate, send, flush)
    drain = _now() + int(p["grace"] * 1e9)
    while intended_by_id and _now() < drain:
        await asyncio.sleep(0.01)
    gate.total.value = res["sent"]
    await prod.close()
    res["ack_ms"], res["last_ns"] = list(lat), lat.last_ns
    return res


async def _rabbit_lat_consumer(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

    e2e = _Lat()

    def on_msg(body: bytes, ctx: Any) -> None:
        e2e.append((_now() - _STAMP.unpack_from(body)[0]) / 1e6)

    _tune_rstream()
    cons = Consumer(t.host, t.port, username=RABBIT_USER, password=RABBIT_PASSWORD)
    await cons.start()
    await cons.subscribe(
        p["stream"],
        on_msg,
        offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
        initial_credit=10,
    )
    gate.wait()
    hard = _now() + int((p["duration"] + p["grace"] + 2.0) * 1e9)
    while _now() < hard:
        total = gate.total.value
        if 0 <= total <= len(e2e):
            break
        await asyncio.sleep(0.05)
    await cons.close()
    return dict(e2e_ms=list(e2e), last_ns=e2e.last_ns)


# --------------------------------------------------------------------------
# shared pacing loop (asyncio clients)
# --------------------------------------------------------------------------


async def _paced_async(
    p: dict[str, Any],
    gate: Gate,
    send: Callable[[int, int, bytes], Any],
    flush: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Send ``rate`` msg/s for ``duration`` s; every message due is sent at each tick.

    Timestamps are the *intended* send times (start + seq/rate), so a client
    that falls behind shows it in its latency instead of hiding it
    (no coordinated omission).
    """
    pad = os.urandom(max(0, p["size"] - _STAMP.size))
    rate, total = p["rate"], int(p["rate"] * p["duration"])
    interval = 1e9 / rate
    gate.wait()
    start = _now()
    hard = start + int((p["duration"] + p["grace"]) * 1e9)
    seq = 0
    max_batch = 0
    while seq < total and _now() < hard:
        due = min(total, int((_now() - start) / interval) + 1)
        if due > seq:
            max_batch = max(max_batch, due - seq)
        while seq < due:
            it = start + int(seq * interval)
            await send(seq, it, _STAMP.pack(it, seq) + pad)
            seq += 1
        if flush is not None:
            await flush()
        await asyncio.sleep(0.0005)
    return dict(sent=seq, t_start=start, t_end=_now(), max_pipeline=max_batch)


# --------------------------------------------------------------------------
# public API: one function per workload, same for every peer
# --------------------------------------------------------------------------


@dataclass
class StreamRef:
    """Names of one fresh stream/key on a peer."""

    name: str
    subject: str = ""


def prepare_stream(t: Target, tag: str) -> StreamRef:
    """Create a fresh, empty stream for one workload run."""
    name = f"wb{tag}{uuid.uuid4().hex[:8]}"
    if t.kind == "nats":
        ref = StreamRef(name, subject=f"s.{name}")
        asyncio.run(_nats_setup(t, ref.name, ref.subject))
    elif t.kind == "redis":
        ref = StreamRef(name)  # XADD creates the key
    elif t.kind == "rabbitmq":
        ref = StreamRef(name)
        asyncio.run(_rabbit_setup(t, name))
    else:
        raise ValueError(t.kind)
    return ref


def drop_stream(t: Target, ref: StreamRef) -> None:
    """Delete a stream and its data (keeps the peer's disk use bounded)."""
    if t.kind == "nats":
        asyncio.run(_nats_drop(t, ref.name))
    elif t.kind == "redis":
        r = _redis(t)
        r.delete(ref.name)
        r.close()
    elif t.kind == "rabbitmq":
        asyncio.run(_rabbit_drop(t, ref.name))


def produce(
    t: Target, ref: StreamRef, n: int, size: int, producers: int, max_seconds: float
) -> Result:
    """N messages of ``size`` bytes from ``producers`` processes; clock stops at the last ack."""
    counts = _split(n, producers)
    if t.kind == "nats":
        fn: WorkerFn = _nats_produce
        # <= 4,000 un-acked per producer and <= 32 MB in flight per stream in
        # total: nats-server 2.15 answers 429 "too many requests" beyond its
        # per-stream ingest queue limit.
        common = dict(subject=ref.subject, window=_byte_capped(size * producers, 32 * MB, 64, 4000))
        how = f"js.publish_async, window {common['window']} un-acked"
    elif t.kind == "redis":
        fn = _redis_produce
        common = dict(key=ref.name, pipeline=_byte_capped(size, 4 * MB, 10, 1000))
        how = f"pipelined XADD, {common['pipeline']} per pipeline"
    else:
        fn = _rabbit_produce
        common = dict(stream=ref.name, window=_byte_capped(size, 64 * MB, 2000, 100_000))
        how = (
            f"send_batch {_byte_capped(size + 24, RABBIT_FRAME_BUDGET, 1, 2000)}/frame, "
            f"window {common['window']} unconfirmed"
        )
    specs = [(fn, dict(common, n=c, size=size, max_seconds=max_seconds)) for c in counts]
    parts = _run_workers(t, specs, timeout=max_seconds + 180)
    wl = f"produce P={producers} {_size_label(size)}"
    return _merge_throughput(
        t,
        wl,
        parts,
        dict(target_messages=n, size=size, producers=producers, mode="processes", how=how),
    )


def consume(
    t: Target, ref: StreamRef, available: int, size: int, consumers: int, max_seconds: float
) -> Result:
    """Read back the ``available`` messages of ``ref`` with 1 or 2 consumers."""
    if t.kind == "nats":
        durable = f"d{uuid.uuid4().hex[:8]}"
        asyncio.run(_nats_add_consumer(t, ref.name, durable))
        fn: WorkerFn = _nats_consume
        batch = _byte_capped(size, 4 * MB, 50, 2000)
        specs = [
            (
                fn,
                dict(
                    stream=ref.name,
                    durable=durable,
                    batch=batch,
                    n=available,
                    idle_timeout=1.0,
                    max_idle=3,
                    max_seconds=max_seconds,
                ),
            )
            for _ in range(consumers)
        ]
        how = f"durable pull consumer shared by {consumers}, fetch {batch}, explicit ack"
    elif t.kind == "redis":
        group = f"g{uuid.uuid4().hex[:8]}"
        r = _redis(t)
        r.xgroup_create(ref.name, group, id="0")
        r.close()
        cnt = _byte_capped(size, 4 * MB, 50, 2000)
        specs = [
            (
                _redis_consume,
                dict(
                    key=ref.name,
                    group=group,
                    consumer=f"c{i}",
                    count=cnt,
                    n=available,
                    max_seconds=max_seconds,
                ),
            )
            for i in range(consumers)
        ]
        how = f"XREADGROUP COUNT {cnt} in one group of {consumers}, XACK pipelined"
    else:
        bounds = [0]
        for c in _split(available, consumers):
            bounds.append(bounds[-1] + c)
        specs = [
            (
                _rabbit_consume,
                dict(
                    stream=ref.name,
                    first=bounds[i],
                    end=bounds[i + 1],
                    credit=10,
                    max_seconds=max_seconds,
                ),
            )
            for i in range(consumers)
        ]
        how = (
            "stream consumer from offset 'first'"
            if consumers == 1
            else f"{consumers} consumers splitting the offset range (no SAC/super streams in 3.10)"
        )
    parts = _run_workers(t, specs, timeout=max_seconds + 180)
    wl = f"consume C={consumers} {_size_label(size)}"
    res = _merge_throughput(
        t,
        wl,
        parts,
        dict(available=available, size=size, consumers=consumers, mode="processes", how=how),
    )
    res.extra["unread"] = available - res.messages
    return res


def latency(
    t: Target, rate: int = 5000, duration: float = 10.0, size: int = 100, grace: float = 15.0
) -> list[Result]:
    """Paced producer at ``rate`` msg/s plus a concurrent consumer (separate processes).

    Returns two rows: publish-to-ack and publish-to-consume (end to end).
    """
    ref = prepare_stream(t, "lat")
    common: dict[str, Any] = dict(
        rate=rate, duration=duration, size=max(size, _STAMP.size), grace=grace
    )
    try:
        specs: list[tuple[WorkerFn, dict[str, Any]]]
        if t.kind == "nats":
            specs = [
                (_nats_lat_producer, dict(common, subject=ref.subject, max_inflight=50_000)),
                (_nats_lat_consumer, dict(common, stream=ref.name, subject=ref.subject)),
            ]
        elif t.kind == "redis":
            specs = [
                (_redis_lat_producer, dict(common, key=ref.name)),
                (_redis_lat_consumer, dict(common, key=ref.name)),
            ]
        else:
            specs = [
                (_rabbit_lat_producer, dict(common, stream=ref.name)),
                (_rabbit_lat_consumer, dict(common, stream=ref.name)),
            ]
        prod, cons = _run_workers(t, specs, timeout=duration + grace + 180)
    finally:
        drop_stream(t, ref)
    return latency_rows(t, prod, cons, rate, duration, common["size"])


def latency_rows(
    t: Target,
    prod: dict[str, Any],
    cons: dict[str, Any],
    rate: int,
    duration: float,
    size: int,
    how: str | None = None,
) -> list[Result]:
    """The ack and end-to-end rows of a paced producer's and a consumer's results
    (weir's own latency workload makes its rows here too, ``how`` naming its API)."""
    ack_timeline = timeline(prod["ack_ms"], rate)
    e2e_timeline = timeline(cons["e2e_ms"], rate)
    ack = sorted(prod["ack_ms"])
    e2e = sorted(cons["e2e_ms"])
    t0 = prod["t_start"]
    send_secs = (prod["t_end"] - t0) / 1e9
    # rows are timed to the last completion, so msgs/s is the rate sustained
    ack_secs = max(send_secs, (prod["last_ns"] - t0) / 1e9)
    e2e_secs = max(send_secs, (cons["last_ns"] - t0) / 1e9)
    # A peer that cannot sustain the rate either leaves messages un-acked or
    # unread when the bounded wait ends, or completes them well after the send
    # window: its percentiles then measure queueing and are lower bounds.
    want = int(rate * duration)
    saturated = (
        prod["sent"] < want
        or len(ack) < prod["sent"]
        or len(e2e) < prod["sent"]
        or len(ack) / ack_secs < 0.95 * rate
        or len(e2e) / e2e_secs < 0.95 * rate
    )
    base = dict(
        target_rate=rate,
        duration_s=duration,
        size=size,
        sent=prod["sent"],
        achieved_send_rate=prod["sent"] / send_secs if send_secs > 0 else 0.0,
        max_batch_per_tick=prod.get("max_pipeline"),
        saturated=saturated,
        acked=len(ack),
        consumed=len(e2e),
    )
    if how is not None:
        base["how"] = how
    label = f"@{rate}/s {_size_label(size)}"
    return [
        Result(
            t.system,
            f"latency-ack {label}",
            len(ack),
            len(ack) * size,
            ack_secs,
            t.fsync_before_ack,
            percentile(ack, 50),
            percentile(ack, 99),
            dict(
                base,
                p999_ms=percentile(ack, 99.9),
                max_ms=ack[-1] if ack else None,
                timeline=ack_timeline,
            ),
        ),
        Result(
            t.system,
            f"latency-e2e {label}",
            len(e2e),
            len(e2e) * size,
            e2e_secs,
            t.fsync_before_ack,
            percentile(e2e, 50),
            percentile(e2e, 99),
            dict(
                base,
                p999_ms=percentile(e2e, 99.9),
                max_ms=e2e[-1] if e2e else None,
                lost=prod["sent"] - len(e2e),
                timeline=e2e_timeline,
            ),
        ),
    ]


TIMELINE_WINDOW_S = 0.1


def timeline(samples_ms: list[float], rate: int) -> list[list[float]]:
    """Latency over time: ``[t_s, p50, p99, max]`` per 100 ms of the paced send.

    The samples are in completion order, which for one paced partition is send
    order, so sample ``i`` was sent about ``i / rate`` s after the start; each
    window holds ``rate / 10`` of them (the last one what is left)."""
    per = max(1, int(rate * TIMELINE_WINDOW_S))
    out = []
    for i in range(0, len(samples_ms), per):
        w = sorted(samples_ms[i : i + per])
        out.append(
            [
                round(i / rate, 3),
                round(percentile(w, 50) or 0.0, 3),
                round(percentile(w, 99) or 0.0, 3),
                round(w[-1], 3),
            ]
        )
    return out


def _size_label(size: int) -> str:
    if size >= 1024 and size % 1024 == 0:
        return f"{size // 1024}KB"
    return f"{size}B"
