"""weir through its native SDK: produce, consume, latency and many-partitions workloads.

The same shapes as ``bench/peers/workloads.py`` so the rows sit next to the
peers' in one table: every producer and consumer is a spawned process with its
own ``weir.Client`` (one gRPC connection), workers meet at a barrier after
connecting, producers are timed barrier -> last ack (``flush()``), consumers
barrier -> last message processed, and every loop stops at N messages or T
seconds, whichever comes first.

How weir is driven (what a user of the SDK would write):

* topics of the throughput workloads have 2 partitions, so that a consumer
  group of 2 (two readers with one consumer name) has something to share; the
  P=1 producer is one process with one writer per partition, writing
  alternating runs of messages; P=4 is four processes, writer ``i`` on
  partition ``i % 2``.  Writers carry a producer_id (dedup on), as durable
  producers do.
* consumers create their reader after the barrier (like the peers' subscribe)
  and commit every batch they processed; a group of 2 includes the rebalance
  that spreads the partitions, and counts a message read twice during it once
  (``extra.duplicates``).
* latency: a paced ``write_future`` per message, the ack time taken when the
  future resolves, and a reader in another process comparing the intended send
  time carried in the payload with its clock (CLOCK_MONOTONIC, shared).
* many partitions: one topic of P partitions written round-robin (message i
  to partition i mod P) by 2 producer processes; fsyncs per second are the
  group commits counted by the server's ``weir_group_commit_seconds``
  histogram, scraped from its metrics endpoint at the barrier and after the
  last ack.

The server runs as a child in its own session, bound to 127.0.0.1, acks after
fsync (always: weir has no other mode), and is stopped by PID.
"""

from __future__ import annotations

import os
import re
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

from bench.peers import servers
from bench.peers.workloads import (
    _SPAWN,
    _STAMP,
    Gate,
    Result,
    Target,
    _Lat,
    _now,
    _run_workers,
    _size_label,
    _split,
    latency_rows,
)
from bench.throughput import Window, measure, scrape

SYSTEM = "weir-native"
ROOT = Path(__file__).resolve().parents[1]
_LISTEN = re.compile(r"weir listening on (\S+):(\d+)")
_data = attrgetter("data")


def _values(batch: Any) -> list[bytes]:
    """The payloads of a batch: ``Batch.values`` (columns, the SDK's path for
    high-volume consumers), or the messages' data on SDKs without it."""
    values = getattr(batch, "values", None)
    if values is not None:
        return list(values) if not isinstance(values, list) else values
    return list(map(_data, batch.messages))


# --------------------------------------------------------------------------
# the server
# --------------------------------------------------------------------------


def weir_version() -> str:
    import weir

    return f"weir {getattr(weir, '__version__', '?')}"


def start_server(data_dir: Path, env: dict[str, str] | None = None, timeout: float = 60.0) -> Any:
    """``weir serve`` on free loopback ports (gRPC + metrics); ready once it says it listens."""
    data_dir.mkdir(parents=True, exist_ok=True)
    port, mport, pport = servers.free_ports(3)
    log = data_dir / "weir.log"
    cmd = [sys.executable, "-m", "weir.cli", "serve", "--data-dir", str(data_dir / "data")]
    cmd += ["--listen", f"{servers.LOOPBACK}:{port}", "--log-level", "warning"]
    full_env = dict(
        os.environ,
        WEIR_METRICS_ENABLED="true",
        WEIR_METRICS_LISTEN=f"{servers.LOOPBACK}:{mport}",
        WEIR_PULSAR_LISTEN=f"{servers.LOOPBACK}:{pport}",
        WEIR_HTTP_LISTEN=f"{servers.LOOPBACK}:0",  # its default may be taken
        PYTHONPYCACHEPREFIX=str(Path(data_dir).parent / "pycache"),
        **(env or {}),
    )
    proc = servers._spawn(cmd, log, env=full_env, cwd=ROOT)
    h = servers._register(
        servers.ServerHandle(
            system=SYSTEM,
            version=weir_version(),
            host=servers.LOOPBACK,
            ports={"main": port, "metrics": mport, "pulsar": pport},
            proc=proc,
            data_dir=data_dir,
            log_path=log,
            fsync_before_ack=True,
            notes="acks after the group commit's fsync (LMDB)",
        )
    )
    try:
        servers._wait_until(
            lambda: bool(_LISTEN.search(log.read_text(errors="replace"))),
            proc,
            timeout,
            "weir serve",
            log,
        )
    except BaseException:
        h.stop()
        raise
    return h


def target_of(h: Any, system: str = SYSTEM) -> Target:
    return Target(system, "weir", h.host, h.port, True, h.version)


def endpoint(t: Target) -> str:
    return f"{t.host}:{t.port}"


def commit_stats(
    before: dict[str, float], after: dict[str, float], seconds: float
) -> dict[str, Any]:
    """Group commits (one LMDB transaction + fsync each) between two scrapes.

    p50/p99 are the histogram bucket bounds that hold them (upper bounds).
    """
    if not before or not after:
        return {}
    name = "weir_group_commit_seconds"

    def delta(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    n = delta(f"{name}_count")
    if n <= 0:
        return {"commits": 0}
    buckets = sorted(
        (float(k.split("|", 1)[1]), delta(k))
        for k in after
        if k.startswith(f"{name}_bucket|") and k.split("|", 1)[1] != "+Inf"
    )

    def q(frac: float) -> float | None:
        for le, cum in buckets:
            if cum >= frac * n:
                return le * 1e3
        return None

    jobs = delta("weir_group_commit_jobs_sum")
    return dict(
        commits=int(n),
        fsyncs_per_s=n / seconds if seconds > 0 else None,
        mean_commit_ms=delta(f"{name}_sum") / n * 1e3,
        commit_p50_ms_le=q(0.5),
        commit_p99_ms_le=q(0.99),
        jobs_per_commit=jobs / n,
        # LMDB's data file grew (new pages) or reused freed ones: writing into new file
        # space costs the file system about twice the CPU per byte here (performance.md)
        file_grew_mb=delta("weir_storage_used_bytes") / 1e6,
    )


# --------------------------------------------------------------------------
# topics
# --------------------------------------------------------------------------


@dataclass
class TopicRef:
    """One fresh topic of a workload run."""

    name: str
    partitions: int


@dataclass(frozen=True)
class SecureTarget(Target):
    """A weir server behind TLS and a JWT (grants checked): the CA to trust, the token."""

    ca: str = ""
    token: str = field(default="", repr=False)


@dataclass(frozen=True)
class TcpTarget(Target):
    """A weir server whose writers use its native TCP port (``transport="tcp"``)."""

    tcp_port: int = 0


def tcp_target_of(h: Any) -> TcpTarget:
    return TcpTarget(
        "weir-native-tcp", "weir", h.host, h.port, True, h.version, h.ports["native_tcp"]
    )


def _client(t: Target) -> Any:
    import weir

    if isinstance(t, TcpTarget):
        return weir.Client(endpoint(t), transport="tcp", tcp_endpoint=f"{t.host}:{t.tcp_port}")
    if isinstance(t, SecureTarget):
        return weir.Client(endpoint(t), tls=weir.Tls(ca=t.ca), credentials=weir.Token(t.token))
    return weir.Client(endpoint(t))


def prepare_topic(t: Target, tag: str, partitions: int = 2) -> TopicRef:
    ref = TopicRef(f"wb{tag}{uuid.uuid4().hex[:8]}", partitions)
    c = _client(t)
    try:
        c.create_topic(ref.name, partitions=partitions, timeout=120)
    finally:
        c.close()
    return ref


def drop_topic(t: Target, ref: TopicRef) -> None:
    c = _client(t)
    try:
        c.drop_topic(ref.name, timeout=120)
    finally:
        c.close()


def end_offsets(t: Target, ref: TopicRef) -> list[int]:
    c = _client(t)
    try:
        info = c.describe_topic(ref.name)
    finally:
        c.close()
    return [p.end_offset for p in sorted(info.partition_info, key=lambda p: p.partition)]


# --------------------------------------------------------------------------
# workers (each runs in its own process)
# --------------------------------------------------------------------------


def _produce_worker(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """Writers on ``partitions``, alternating runs of ``run`` messages; flush = last ack."""
    from weir.errors import WeirError

    client = _client(t)
    tag = uuid.uuid4().hex[:8]
    writers = [
        client.writer(p["topic"], producer_id=f"bench-{tag}-{part}", partition=part).wait_init()
        for part in p["partitions"]
    ]
    payload = os.urandom(p["size"])
    n, run, k = p["n"], p["run"], len(writers)
    win = Window(gate, p["max_seconds"])
    sent = 0
    i = 0
    while sent < n and not win.over():
        write = writers[i % k].write
        m = min(run, n - sent)
        for _ in range(m):
            write(payload)
        sent += m
        i += 1
    failed = 0
    ack_timeout = False
    for w in writers:
        try:
            w.flush(timeout=60)
        except WeirError:
            ack_timeout = True
            failed += w._core.unacknowledged
    t1 = _now()
    cpu = win.cpu()
    for w in writers:
        w.close(timeout=5)
    client.close()
    acked = sent - failed
    return win.result(
        acked, acked * p["size"], t1, cpu, sent=sent, failed=failed, ack_timeout=ack_timeout
    )


def _produce_txn_worker(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """Transactions of ``txn`` messages: each begins, writes runs alternating over the
    partitions through writers of its own, and commits (flushes, then one commit)."""
    client = _client(t)
    tag = uuid.uuid4().hex[:8]
    parts = p["partitions"]
    payload = os.urandom(p["size"])
    n, run, size = p["n"], p["run"], p["txn"]
    win = Window(gate, p["max_seconds"])
    sent = txns = 0
    i = 0
    while sent < n and not win.over():
        with client.transaction() as tx:
            writers: dict[int, Any] = {}
            left = min(size, n - sent)
            while left:
                part = parts[i % len(parts)]
                w = writers.get(part)
                if w is None:
                    w = writers[part] = tx.writer(
                        p["topic"], producer_id=f"bench-{tag}-{part}", partition=part
                    )
                m = min(run, left)
                write = w.write
                for _ in range(m):
                    write(payload)
                left -= m
                sent += m
                i += 1
        txns += 1
    t1 = _now()
    cpu = win.cpu()
    client.close()
    return win.result(sent, sent * p["size"], t1, cpu, sent=sent, txns=txns)


def produce_transactions(
    t: Target,
    ref: TopicRef,
    n: int,
    size: int,
    txn: int,
    max_seconds: float,
    server_pid: int | None = None,
) -> Result:
    """N messages of ``size`` bytes from one process, in transactions of ``txn`` messages
    (the same shape as the P=1 produce row: runs alternating over the partitions)."""
    run = max(1, min(1000, (1 << 20) // size, txn))
    spec = dict(
        topic=ref.name,
        partitions=list(range(ref.partitions)),
        n=n,
        size=size,
        run=run,
        txn=txn,
        max_seconds=max_seconds,
    )
    measured = measure(t, [(_produce_txn_worker, spec)], max_seconds, server_pid)
    return measured.row(
        f"produce txn={txn} {_size_label(size)}",
        dict(
            target_messages=n,
            size=size,
            producers=1,
            mode="processes",
            partitions=ref.partitions,
            txn_messages=txn,
            transactions=measured.parts[0]["txns"],
            how=f"with client.transaction(): tx.writer() per partition, write() per message; "
            f"{txn} messages per transaction over {ref.partitions} partitions",
        ),
    )


def _consume_worker(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """A reader of the group ``consumer``; commits each batch; stops when the group is done."""
    client = _client(t)
    hw, ends = p["hw"], p["ends"]
    parts = range(len(ends))

    def group_done() -> bool:
        with hw.get_lock():
            return all(hw[i] >= ends[i] for i in parts)

    win = Window(gate, p["max_seconds"])
    t0 = win.t0
    reader = client.reader(p["topic"], consumer=p["consumer"], buffer_bytes=p["buffer_bytes"])
    count = nbytes = 0
    t_last = t0
    first_ms: float | None = None
    idle_since = _now()
    stalled = False
    while not group_done():
        now = _now()
        if win.over(now):
            break
        b = reader.receive_batch(timeout=0.1)
        if b is None:
            if now - idle_since > p["max_idle"] * 1e9:
                stalled = not group_done()  # no data for max_idle s, the group not done
                break
            continue
        if first_ms is None:
            first_ms = (_now() - t0) / 1e6
        values = _values(b)
        count += len(values)
        nbytes += sum(map(len, values))
        reader.commit(b)
        end = b.end_offset
        with hw.get_lock():
            if hw[b.partition] < end:
                hw[b.partition] = end
        t_last = idle_since = _now()
    cpu = win.cpu()
    core = reader._inner._core
    reconnects = core.reconnects  # a broken read stream shows here
    held = [ps.partition for ps in core.partitions]
    reader.close(timeout=10)
    client.close()
    return win.result(
        count,
        nbytes,
        t_last,
        cpu,
        reconnects=reconnects,
        stalled=stalled,
        held=held,
        first_batch_ms=first_ms,
    )


def _lat_producer(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """Paced ``write_future``: everything due at a tick is written, ack time per future."""
    client = _client(t)
    w = client.writer(p["topic"], producer_id=f"lat-{uuid.uuid4().hex[:8]}", partition=0)
    w.wait_init()
    pad = os.urandom(max(0, p["size"] - _STAMP.size))
    rate, total = p["rate"], int(p["rate"] * p["duration"])
    interval = 1e9 / rate
    lat = _Lat()
    failed = 0

    def on_ack(intended: int) -> Callable[[Any], None]:
        def done(f: Any) -> None:
            nonlocal failed
            if f.cancelled() or f.exception() is not None:
                failed += 1
            else:
                lat.append((_now() - intended) / 1e6)

        return done

    gate.wait()
    start = _now()
    hard = start + int((p["duration"] + p["grace"]) * 1e9)
    seq = max_batch = 0
    while seq < total and _now() < hard:
        due = min(total, int((_now() - start) / interval) + 1)
        if seq >= due:
            time.sleep(min(0.0005, max(0.0, (start + seq * interval - _now()) / 1e9)))
            continue
        for s in range(seq, due):
            it = start + int(s * interval)
            w.write_future(_STAMP.pack(it, s) + pad).add_done_callback(on_ack(it))
        max_batch = max(max_batch, due - seq)
        seq = due
    end = _now()
    while len(lat) + failed < seq and _now() < hard:
        time.sleep(0.005)
    gate.total.value = seq
    w.close(timeout=5)
    client.close()
    return dict(
        sent=seq,
        t_start=start,
        t_end=end,
        ack_ms=list(lat),
        last_ns=lat.last_ns,
        max_pipeline=max_batch,
        failed=failed,
    )


def _lat_consumer(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """A reader without consumer from the start of the (fresh) topic, as the peers' XREAD /
    stream consumer; e2e = receive time - intended send time."""
    client = _client(t)
    reader = client.reader(p["topic"]).wait_connected()
    e2e = _Lat()
    unpack = _STAMP.unpack_from
    gate.wait()
    hard = _now() + int((p["duration"] + p["grace"] + 2.0) * 1e9)
    while _now() < hard:
        total = gate.total.value
        if 0 <= total <= len(e2e):
            break
        b = reader.receive_batch(timeout=0.05)
        if b is None:
            continue
        now = _now()
        e2e.extend([(now - unpack(v)[0]) / 1e6 for v in _values(b)])
    reader.close(timeout=5)
    client.close()
    return dict(e2e_ms=list(e2e), last_ns=e2e.last_ns)


def _spread_worker(t: Target, p: dict[str, Any], gate: Gate) -> dict[str, Any]:
    """Round-robin over this worker's partitions, one message each.

    Worker 0 scrapes the metrics between two barriers (before anyone writes)
    and again once every worker has its last ack, so the count of group
    commits covers exactly the writing.
    """
    client = _client(t)
    tag = uuid.uuid4().hex[:8]
    writers = [
        client.writer(p["topic"], producer_id=f"mp-{tag}-{part}", partition=part)
        for part in p["partitions"]
    ]
    for w in writers:
        w.wait_init(timeout=120)
    fns = [w.write for w in writers]
    payload = os.urandom(p["size"])
    n, k = p["n"], len(fns)
    gate.wait()  # every writer is connected: worker 0 scrapes while the others wait
    before = scrape(p["metrics_port"]) if p["scraper"] else {}
    win = Window(gate, p["max_seconds"])
    sent = 0
    while sent < n and not win.over():
        m = min(1000, n - sent)
        for j in range(sent, sent + m):
            fns[j % k](payload)
        sent += m
    for w in writers:
        w.flush(timeout=120)
    t1 = _now()
    cpu = win.cpu()
    with gate.done.get_lock():
        gate.done.value += 1
    after: dict[str, float] = {}
    t_scrape = t1
    if p["scraper"]:
        wait_until = _now() + 120 * 10**9
        while gate.done.value < p["workers"] and _now() < wait_until:
            time.sleep(0.002)
        t_scrape = _now()
        after = scrape(p["metrics_port"])
    for w in writers:
        w.close(timeout=10)
    client.close()
    return win.result(
        sent,
        sent * p["size"],
        t1,
        cpu,
        before=before,
        after=after,
        t_scrape=t_scrape,
    )


# --------------------------------------------------------------------------
# public API: the same workloads as the peers
# --------------------------------------------------------------------------


def produce(
    t: Target,
    ref: TopicRef,
    n: int,
    size: int,
    producers: int,
    max_seconds: float,
    server_pid: int | None = None,
    metrics_port: int | None = None,
) -> Result:
    """N messages of ``size`` bytes from ``producers`` processes; clock stops at the last ack."""
    run = max(1, min(1000, (1 << 20) // size))  # ~1 MB per writer in turn
    if producers == 1:
        plan = [list(range(ref.partitions))]
    else:
        plan = [[i % ref.partitions] for i in range(producers)]
    specs = [
        (
            _produce_worker,
            dict(
                topic=ref.name, partitions=parts, n=c, size=size, run=run, max_seconds=max_seconds
            ),
        )
        for parts, c in zip(plan, _split(n, producers), strict=True)
    ]
    measured = measure(t, specs, max_seconds, server_pid, metrics_port)
    res = measured.row(
        f"produce P={producers} {_size_label(size)}",
        dict(
            target_messages=n,
            size=size,
            producers=producers,
            mode="processes",
            partitions=ref.partitions,
            how=f"writer.write() per message, flush() at the end; {ref.partitions} partitions, "
            + ("one writer per partition" if producers == 1 else "one writer per process"),
        ),
    )
    res.extra.update(commit_stats(measured.before, measured.after, res.seconds))
    return res


def consume(
    t: Target,
    ref: TopicRef,
    available: int,
    size: int,
    consumers: int,
    max_seconds: float,
    server_pid: int | None = None,
    metrics_port: int | None = None,
) -> Result:
    """Read back everything in ``ref`` with 1 or 2 readers of one fresh consumer (group)."""
    ends = end_offsets(t, ref)
    hw = _SPAWN.Array("q", len(ends))
    group = f"g{uuid.uuid4().hex[:8]}"
    common = dict(
        topic=ref.name,
        consumer=group,
        ends=ends,
        hw=hw,
        buffer_bytes=64 << 20,
        max_idle=5.0,
        max_seconds=max_seconds,
    )
    specs = [(_consume_worker, dict(common)) for _ in range(consumers)]
    measured = measure(t, specs, max_seconds, server_pid, metrics_port)
    parts = measured.parts
    res = measured.merge(
        f"consume C={consumers} {_size_label(size)}",
        dict(
            available=available,
            size=size,
            consumers=consumers,
            mode="processes",
            how=f"reader of consumer group, {consumers} reader(s), receive_batch, len() of every "
            "Batch.values item, commit per batch",
        ),
    )
    delivered = res.messages
    unique = sum(min(hw[i], ends[i]) for i in range(len(ends)))
    res.messages = unique
    res.bytes = unique * size
    res.extra["duplicates"] = max(0, delivered - unique)
    res.extra["unread"] = sum(ends) - unique
    res.extra["reconnects"] = sum(p.get("reconnects", 0) for p in parts)
    res.extra["stalled_readers"] = sum(1 for p in parts if p.get("stalled"))
    res.extra["held_at_end"] = [p.get("held") for p in parts]
    res.extra["first_batch_ms"] = [p.get("first_batch_ms") for p in parts]
    measured.add_cpu(res)  # per message read once
    res.extra.update(commit_stats(measured.before, measured.after, res.seconds))
    return res


def latency(
    t: Target,
    rate: int = 5000,
    duration: float = 10.0,
    size: int = 100,
    grace: float = 15.0,
    metrics_port: int | None = None,
) -> list[Result]:
    """Paced producer at ``rate`` msg/s plus a concurrent reader: ack and end-to-end rows.

    With ``metrics_port`` the rows also carry the group commits of the run
    (their duration is the floor of the ack latency).
    """
    ref = prepare_topic(t, "lat", partitions=1)
    common: dict[str, Any] = dict(
        topic=ref.name, rate=rate, duration=duration, size=max(size, _STAMP.size), grace=grace
    )
    try:
        before = scrape(metrics_port)
        prod, cons = _run_workers(
            t,
            [(_lat_producer, dict(common)), (_lat_consumer, dict(common))],
            timeout=duration + grace + 180,
        )
        after = scrape(metrics_port)
    finally:
        drop_topic(t, ref)
    rows = latency_rows(t, prod, cons, rate, duration, common["size"], "write_future per message")
    stats = commit_stats(before, after, (prod["t_end"] - prod["t_start"]) / 1e9)
    for r in rows:
        r.extra.update(stats)
    return rows


def many_partitions(
    t: Target,
    metrics_port: int,
    partitions: int,
    n: int,
    size: int,
    max_seconds: float,
    producers: int = 2,
    server_pid: int | None = None,
) -> Result:
    """One topic of ``partitions`` partitions written round-robin; fsyncs/s from the server."""
    ref = prepare_topic(t, f"mp{partitions}x", partitions=partitions)
    try:
        if partitions >= producers:
            plan = [list(range(i, partitions, producers)) for i in range(producers)]
        else:
            plan = [[i % partitions] for i in range(producers)]
        specs = [
            (
                _spread_worker,
                dict(
                    topic=ref.name,
                    partitions=parts,
                    n=c,
                    size=size,
                    max_seconds=max_seconds,
                    metrics_port=metrics_port,
                    scraper=i == 0,
                    workers=producers,
                ),
            )
            for i, (parts, c) in enumerate(zip(plan, _split(n, producers), strict=True))
        ]
        measured = measure(t, specs, max_seconds, server_pid, slack=300)
    finally:
        drop_topic(t, ref)
    scraper = measured.parts[0]
    window = max(1e-9, (scraper["t_scrape"] - scraper["t_start"]) / 1e9)
    stats = commit_stats(scraper["before"], scraper["after"], window)
    res = measured.merge(
        f"partitions={partitions} round-robin {_size_label(size)}",
        dict(
            partitions=partitions,
            size=size,
            producers=producers,
            target_messages=n,
            how=f"{producers} processes, one writer per partition, message i -> partition i mod P",
        ),
    )
    res.extra.update(stats)
    if stats.get("commits"):
        res.extra["msgs_per_commit"] = res.messages / stats["commits"]
    measured.add_cpu(res)
    return res
