"""Where the microseconds of one 100 B ack go, hop by hop (issue 26).

    .venv/bin/python -m bench.latency_breakdown                 # 5,000 msgs/s for 5 s, 1 rep
    .venv/bin/python -m bench.latency_breakdown --reps 3 --seconds 5 --rate 5000

One partition, one producer (the sync SDK, ``write_future`` per message, paced like
the ``latency`` workload of `bench.run`, no reader), against a ``weir serve`` child
process whose write path is stamped with ``time.perf_counter_ns`` (CLOCK_MONOTONIC,
the same clock in both processes). The stamps are put in by wrapping functions of the
server at start (see `_instrument`); the server code itself carries no timing code.

A message's hops:

    client write() -> handler     SDK queue + SDK loop thread + gRPC client, loopback,
                                  gRPC server, the session's stream reader
    handler -> queued             validation, broker.submit
    queued -> actor takes         waiting for the previous commit of the partition
    actor takes -> handed         prepare_write (dedup, offsets, blob layout)
    handed -> commit starts       hand-off to the committer thread (none when inline)
    LMDB puts                     txn begin .. commit start
    LMDB commit (2 durable writes) pwritev + fdatasync + meta page (O_DSYNC)
                                  (--env WEIR_STORAGE_JOURNAL=true: encoding the ops,
                                  then one journal append + fdatasync)
    commit -> loop resumes        thread -> event loop wake-up (none when inline)
    loop -> ack built             apply, EndOffset, the session's ack task
    ack built -> client acked     gRPC server write, loopback, gRPC client, SDK

Batches: the SDK may put several queued messages in one batch; the server stamps
are per batch, and each message takes the stamps of the batch that holds it.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_now = time.perf_counter_ns

# (key, label) of each stamp in the order a message passes them
STAMPS = [
    ("call", "client write()"),
    ("recv", "handler has the batch"),
    ("queued", "queued on the actor"),
    ("taken", "actor takes it"),
    ("handed", "handed to the commit"),
    ("kv_begin", "LMDB txn begins"),
    ("kv_commit", "LMDB commit starts"),
    ("kv_end", "LMDB commit durable"),
    ("resumed", "loop applies the change"),
    ("ack", "ack built"),
    ("acked", "client future resolved"),
]
HOPS = [
    ("call", "recv", "client write() -> server handler (SDK, gRPC both ends)"),
    ("recv", "queued", "handler -> queued on the partition actor"),
    ("queued", "taken", "queued -> actor takes it (previous commit)"),
    ("taken", "handed", "actor: prepare_write"),
    ("handed", "kv_begin", "hand-off to the commit (committer thread)"),
    ("kv_begin", "kv_commit", "LMDB puts (journal: encode the ops)"),
    ("kv_commit", "kv_end", "commit: LMDB's 2 durable writes (journal: append + fdatasync)"),
    ("kv_end", "resumed", "commit done -> event loop resumes the actor"),
    ("resumed", "ack", "apply + session ack task"),
    ("ack", "acked", "ack -> client future (gRPC both ends, SDK)"),
]


# --------------------------------------------------------------------------- server side


def _instrument(stamps_path: str) -> None:
    """Wrap the write path's functions with timestamps; dump them at exit."""
    from weir.broker import partition_actor as pa
    from weir.broker import writes
    from weir.protocols.native import write_session as ws
    from weir.storage import committer as cm
    from weir.storage import kv as kvmod
    from weir.storage import partition as part

    by_batch: dict[int, dict[str, Any]] = {}  # id(IncomingBatch) -> record (batch kept alive)
    done: list[dict[str, Any]] = []
    acked: dict[int, int] = {}  # first offset -> ack built
    current: list[Any] = [None]
    tl = threading.local()

    orig_validate = ws.validate_incoming

    def validate_incoming(bufs: Any) -> Any:
        t = _now()
        res = orig_validate(bufs)
        for inc in res:
            by_batch[id(inc)] = {"recv": t, "_b": inc}
        return res

    ws.validate_incoming = validate_incoming

    orig_submit = writes.Writes.submit

    def submit(self: Any, topic: str, partition: int, batches: Any, *a: Any, **k: Any) -> Any:
        fut = orig_submit(self, topic, partition, batches, *a, **k)
        t = _now()
        for b in batches:
            rec = by_batch.get(id(b))
            if rec is not None:
                rec["queued"] = t
        return fut

    writes.Writes.submit = submit  # type: ignore[method-assign]

    orig_write = pa.PartitionActor._write

    async def actor_write(self: Any, items: Any) -> None:
        t = _now()
        recs = [by_batch.pop(id(b), None) for it in items for b in it.batches]
        recs = [r for r in recs if r is not None]
        for r in recs:
            r["taken"] = t
        current[0] = recs
        self._bench_recs = recs
        await orig_write(self, items)

    pa.PartitionActor._write = actor_write  # type: ignore[method-assign]

    orig_prepare = part.PartitionLog.prepare_write

    def prepare_write(self: Any, batches: Any, *a: Any, **k: Any) -> Any:
        change = orig_prepare(self, batches, *a, **k)
        recs = current[0] or []
        for r, res in zip(recs, change.results, strict=False):
            r["offset"] = res.offset
            r["count"] = res.written
        return change

    part.PartitionLog.prepare_write = prepare_write  # type: ignore[method-assign]

    by_ops: dict[int, list[dict[str, Any]]] = {}  # id(ops of a change) -> its batches

    def handed(recs: list[dict[str, Any]] | None, ops: Any) -> None:
        current[0] = None
        if not recs:
            return
        t = _now()
        for r in recs:
            r.setdefault("handed", t)
        by_ops[id(ops)] = recs

    # the commit hand-off: to the committer thread (GroupCommitter.submit) or, where it
    # exists, to `LoopCommits.commit` (inline in the loop when short); the commit itself
    # (`_commit`, in whichever thread) and the KV write stamp themselves either way
    orig_cm_submit = cm.GroupCommitter.submit

    def cm_submit(self: Any, ops: Any, nbytes: int = 0) -> Any:
        handed(current[0], ops)
        return orig_cm_submit(self, ops, nbytes)

    cm.GroupCommitter.submit = cm_submit  # type: ignore[method-assign]

    orig_commit = cm.GroupCommitter._commit

    def cm_commit(self: Any, jobs: Any) -> None:
        tl.recs = [r for j in jobs for r in by_ops.pop(id(j.ops), ())]
        orig_commit(self, jobs)

    cm.GroupCommitter._commit = cm_commit  # type: ignore[method-assign]

    try:
        from weir.broker import loop_commits
    except ImportError:  # before issue 26's inline commits
        loop_commits = None  # type: ignore[assignment]
    if loop_commits is not None:
        orig_lc = loop_commits.LoopCommits.commit

        def lc_commit(self: Any, ops: Any, nbytes: int) -> Any:
            handed(current[0], ops)
            return orig_lc(self, ops, nbytes)

        loop_commits.LoopCommits.commit = lc_commit  # type: ignore[method-assign]

    class _Txn:
        def __init__(self, txn: Any) -> None:
            self._txn = txn

        def __getattr__(self, name: str) -> Any:
            return getattr(self._txn, name)

        def __enter__(self) -> Any:
            self._txn.__enter__()
            return self

        def __exit__(self, *exc: Any) -> Any:
            tl.kv_commit = _now()
            return self._txn.__exit__(*exc)

    class _Env:
        def __init__(self, env: Any) -> None:
            self._env = env

        def __getattr__(self, name: str) -> Any:
            return getattr(self._env, name)

        def begin(self, *a: Any, **k: Any) -> Any:
            tl.kv_begin = _now()
            return _Txn(self._env.begin(*a, **k))

    orig_kv_write = kvmod.LmdbKV.write

    def kv_write(self: Any, ops: Iterable[Any]) -> None:
        env = self._env
        self._env = _Env(env)
        try:
            orig_kv_write(self, ops)
        finally:
            self._env = env
            t = _now()
            for r in getattr(tl, "recs", None) or ():
                r["kv_begin"] = tl.kv_begin
                r["kv_commit"] = tl.kv_commit
                r["kv_end"] = t
            tl.recs = None

    kvmod.LmdbKV.write = kv_write  # type: ignore[method-assign]

    # storage.journal = true: the commit is JournaledKV.write (encode the ops, then one
    # journal append + fdatasync); its LMDB writes happen later in the applier thread,
    # which holds no batch (tl.recs unset), so they stamp nothing
    from weir.storage import journal as jmod
    from weir.storage import journaled_kv as jkv

    orig_jwrite = jkv.JournaledKV.write
    orig_append = jmod.Journal.append

    def journal_append(self: Any, payload: Any) -> int:
        tl.kv_commit = _now()
        return orig_append(self, payload)

    def jkv_write(self: Any, ops: Iterable[Any]) -> None:
        tl.kv_begin = _now()
        try:
            orig_jwrite(self, ops)
        finally:
            t = _now()
            for r in getattr(tl, "recs", None) or ():
                r["kv_begin"] = tl.kv_begin
                r["kv_commit"] = tl.kv_commit
                r["kv_end"] = t
            tl.recs = None

    jmod.Journal.append = journal_append  # type: ignore[method-assign]
    jkv.JournaledKV.write = jkv_write  # type: ignore[method-assign]

    orig_notify = pa.PartitionActor._notify

    def notify(self: Any) -> None:
        recs = getattr(self, "_bench_recs", None)
        if recs:
            t = _now()
            for r in recs:
                r["resumed"] = t
                r.pop("_b", None)
                done.append(r)
            self._bench_recs = None
        orig_notify(self)

    pa.PartitionActor._notify = notify  # type: ignore[method-assign]

    real_pb = ws.pb

    class _Pb:
        def __getattr__(self, name: str) -> Any:
            return getattr(real_pb, name)

        @staticmethod
        def WriteAck(acks: Any) -> Any:  # the protobuf class it stands for
            t = _now()
            for a in acks:
                acked[a.offset] = t
            return real_pb.WriteAck(acks=acks)

    ws.pb = _Pb()  # type: ignore[assignment]

    gc_spans = _gc_recorder()

    def dump() -> None:
        for r in done:
            off = r.get("offset")
            if off is not None and off in acked:
                r["ack"] = acked[off]
        Path(stamps_path).write_text(json.dumps(done))
        Path(stamps_path + ".gc").write_text(json.dumps(gc_spans))

    atexit.register(dump)


def _gc_recorder() -> list[tuple[int, int, int, int]]:
    """This process's garbage collections from now on: (start ns, end ns, generation, CPU ns)."""
    import gc

    spans: list[tuple[int, int, int, int]] = []
    start = [0, 0]
    cpu = time.thread_time_ns  # the collecting thread's CPU: what the load does not inflate

    def cb(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            start[0], start[1] = _now(), cpu()
        else:
            spans.append((start[0], _now(), int(info["generation"]), cpu() - start[1]))

    gc.callbacks.append(cb)
    return spans


def gc_note(msgs: list[tuple[int, int, int]], spans: dict[str, list[Any]]) -> str:
    """Per process, the garbage collections made while the messages flowed (by generation,
    with their pauses), and how many acks slower than the p99 overlapped one."""
    if not msgs:
        return ""
    totals = sorted(z - a for a, _, z in msgs)
    cut = totals[min(len(totals) - 1, int(0.99 * len(totals)))]
    tail = [(a, z) for a, _, z in msgs if z - a > cut]
    first = min(a for a, _, _ in msgs)
    last = max(z for _, _, z in msgs)
    parts = []
    for who, every in spans.items():
        ss = [s for s in every if s[1] >= first and s[0] <= last]  # while messages flowed
        long = [s for s in ss if s[1] - s[0] > 1_000_000]
        hit = sum(1 for a, z in tail if any(s[0] < z and s[1] > a for s in ss))
        worst = max((s[1] - s[0] for s in ss), default=0) / 1e6
        paused = sum(s[1] - s[0] for s in ss) / 1e6
        cpu = sum(s[3] for s in ss if len(s) > 3) / 1e6
        gens = [sum(1 for s in ss if s[2] == g) for g in (0, 1, 2)]
        worst2 = max((s[1] - s[0] for s in ss if s[2] == 2), default=0) / 1e6
        parts.append(
            f"{who}: {len(ss)} GCs (gen0/1/2 {gens[0]}/{gens[1]}/{gens[2]}, "
            f"{len(long)} over 1 ms, longest {worst:.2f} ms, longest gen2 {worst2:.2f} ms, "
            f"{paused:.1f} ms paused in all, {cpu:.1f} ms CPU; {len(every)} since recording "
            f"began, longest {max((s[1] - s[0] for s in every), default=0) / 1e6:.2f} ms), "
            f"{hit} of {len(tail)} acks above p99 overlapped one"
        )
    return "; ".join(parts)


def _gc_variant(how: str) -> None:
    """A/B of the server's collector settings (`weir.gc_tuning.settle`, called by ``weir
    serve`` once it is up), from ``--gc``: "" as shipped, "default" CPython's (nothing
    frozen, gen0 at 700), "freeze" frozen with CPython's thresholds, a number: frozen with
    that gen0 threshold."""
    if not how:
        return
    import weir.gc_tuning as gt

    if how == "default":
        gt.settle = lambda gen0_threshold=0: None  # type: ignore[assignment]
    elif how == "freeze":
        gt.settle.__defaults__ = (gc.get_threshold()[0],)
    elif how:
        gt.settle.__defaults__ = (int(how),)


def serve_child(stamps: str, argv: list[str]) -> int:
    _instrument(stamps)
    _gc_variant(os.environ.get("LB_GC", ""))
    if os.environ.get("LB_UVLOOP") == "1":  # the server's loop on uvloop (an experiment)
        import asyncio

        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    from weir.cli import main

    return main(argv)


# --------------------------------------------------------------------------- client side


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(data: Path, stamps: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """The stamped server; with ``WEIR_NATIVE_TCP_LISTEN`` in ``env`` its TCP port too."""
    port = _free_port()
    cmd = [sys.executable, "-m", "bench.latency_breakdown", "--serve-child", str(stamps), "--"]
    cmd += ["serve", "--data-dir", str(data), "--listen", f"127.0.0.1:{port}"]
    cmd += ["--log-level", "warning"]
    full_env = dict(
        os.environ,
        WEIR_KAFKA_ENABLED="false",
        WEIR_PULSAR_ENABLED="false",
        WEIR_HTTP_ENABLED="false",
        WEIR_METRICS_ENABLED="false",
        **env,
    )
    log = open(data.parent / "server.log", "wb")  # noqa: SIM115 (kept open for the child)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT)
    addr = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {(data.parent / 'server.log').read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return proc, addr
        time.sleep(0.05)
    _stop(proc)
    raise SystemExit("server did not start in 60 s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _produce(
    addr: str,
    rate: int,
    seconds: float,
    size: int,
    serial: bool = False,
    tcp: str | None = None,
) -> list[tuple[int, int, int]]:
    """Paced write_future per message (``serial``: ``write_future().result()`` each, one message in
    flight, the next one at its tick or at once when late); (call ns, offset, acked ns)."""
    import weir

    out: list[tuple[int, int, int]] = []
    lock = threading.Lock()
    kw: dict[str, Any] = {"transport": "tcp", "tcp_endpoint": tcp} if tcp else {}
    CLIENT_GC[:] = []
    with weir.Client(addr, **kw) as client:
        topic = f"lb{os.getpid()}x{_now() % 100000}"
        client.create_topic(topic, partitions=1, timeout=60)
        w = client.writer(topic, producer_id="lb", partition=0)
        w.wait_init()
        for _ in range(200):  # warm up: connections, code paths
            w.write(os.urandom(size))
        payload = os.urandom(size)
        total = int(rate * seconds)
        spans = _gc_recorder()
        interval = 1e9 / rate

        def on_ack(t_call: int) -> Callable[[Any], None]:
            def done(f: Any) -> None:
                t = _now()
                if not f.cancelled() and f.exception() is None:
                    with lock:
                        out.append((t_call, f.result().offset, t))

            return done

        start = _now()
        seq = 0
        stop = start + int(seconds * 1e9)
        while serial and seq < total and _now() < stop:
            wait = (start + seq * interval - _now()) / 1e9
            if wait > 0:
                time.sleep(wait)
            t = _now()
            r = w.write_future(payload).result(30)
            out.append((t, r.offset, _now()))
            seq += 1
        while not serial and seq < total:
            due = min(total, int((_now() - start) / interval) + 1)
            if seq >= due:
                time.sleep(min(0.0005, max(0.0, (start + seq * interval - _now()) / 1e9)))
                continue
            for _ in range(seq, due):
                t = _now()
                w.write_future(payload).add_done_callback(on_ack(t))
            seq = due
        deadline = time.monotonic() + 30
        while len(out) < seq and time.monotonic() < deadline:
            time.sleep(0.01)
        w.close(timeout=5)
        CLIENT_GC.extend(spans)
    return out


CLIENT_GC: list[tuple[int, int, int, int]] = []  # the last _produce's collections


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))]


def breakdown(msgs: list[tuple[int, int, int]], batches: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-hop µs over messages whose every stamp is known."""
    starts = sorted((b["offset"], b) for b in batches if "offset" in b and "ack" in b)
    firsts = [o for o, _ in starts]
    import bisect

    hops: dict[str, list[float]] = {h[2]: [] for h in HOPS}
    totals: list[float] = []
    for t_call, off, t_acked in msgs:
        i = bisect.bisect_right(firsts, off) - 1
        if i < 0:
            continue
        first, b = starts[i]
        if off >= first + max(1, b.get("count", 1)):
            continue
        s = dict(b, call=t_call, acked=t_acked)
        if any(k not in s for k, _ in STAMPS):
            continue
        for a, z, label in HOPS:
            hops[label].append((s[z] - s[a]) / 1e3)
        totals.append((t_acked - t_call) / 1e3)
    span = (max(m[2] for m in msgs) - min(m[0] for m in msgs)) / 1e9 if msgs else 0.0
    return {
        "hops": hops,
        "total": totals,
        "messages": len(msgs),
        "batches": len(batches),
        "rate": len(msgs) / span if span else 0.0,
    }


def table(res: dict[str, Any], title: str) -> str:
    lines = [
        f"### {title}",
        "",
        f"{len(res['total'])} of {res['messages']} messages stamped, "
        f"{res['batches']} server batches, {res.get('rate', 0):,.0f} msgs/s acked; µs",
        "",
        "| hop | p50 | p99 | mean |",
        "|---|---:|---:|---:|",
    ]
    mean_sum = 0.0
    for _, _, label in HOPS:
        xs = res["hops"][label]
        mean = sum(xs) / len(xs) if xs else float("nan")
        mean_sum += mean
        lines.append(f"| {label} | {_pct(xs, 50):.0f} | {_pct(xs, 99):.0f} | {mean:.0f} |")
    tot = res["total"]
    tmean = sum(tot) / len(tot) if tot else float("nan")
    lines.append(
        f"| **client write() -> ack (total)** | **{_pct(tot, 50):.0f}** | "
        f"**{_pct(tot, 99):.0f}** | **{tmean:.0f}** |"
    )
    lines.append(f"\n(p99.9 total {_pct(tot, 99.9):.0f} µs; hop means add up to {mean_sum:.0f})")
    return "\n".join(lines)


def run_once(
    rate: int,
    seconds: float,
    size: int,
    env: dict[str, str],
    serial: bool = False,
    transport: str = "grpc",
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="weir-lb-") as d:
        root = Path(d)
        stamps = root / "stamps.json"
        tcp = None
        if transport == "tcp":
            tcp = f"127.0.0.1:{_free_port()}"
            env = {**env, "WEIR_NATIVE_TCP_ENABLED": "true", "WEIR_NATIVE_TCP_LISTEN": tcp}
        proc, addr = _start(root / "data", stamps, env)
        try:
            msgs = _produce(addr, rate, seconds, size, serial, tcp)
        finally:
            _stop(proc)
        batches = json.loads(stamps.read_text()) if stamps.exists() else []
        gc_path = Path(str(stamps) + ".gc")
        server_gc = json.loads(gc_path.read_text()) if gc_path.exists() else []
    res = breakdown(msgs, batches)
    res["gc"] = gc_note(msgs, {"server": server_gc, "client": list(CLIENT_GC)})
    return res


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--serve-child":
        return serve_child(argv[1], argv[3:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument(
        "--serial",
        action="store_true",
        help="one message in flight: write_future(..).result() each",
    )
    ap.add_argument(
        "--transport",
        choices=("grpc", "tcp"),
        default="grpc",
        help="the SDK's transport: gRPC, or the native TCP port (its caller-driven sync writer)",
    )
    ap.add_argument(
        "--loop-writer",
        action="store_true",
        help="with --transport tcp: the sync writer of the client's loop thread instead",
    )
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE for the server")
    ap.add_argument(
        "--gc",
        default="",
        help="the server's collector: default (CPython's), freeze, or a gen0 threshold",
    )
    ap.add_argument(
        "--uvloop", action="store_true", help="run the server's event loop on uvloop (bench extra)"
    )
    ap.add_argument("--json", type=Path, help="write the raw per-hop figures here")
    args = ap.parse_args(argv)
    env = dict(e.split("=", 1) for e in args.env)
    if args.uvloop:
        env["LB_UVLOOP"] = "1"
    if args.gc:
        env["LB_GC"] = args.gc
    merged: dict[str, Any] = {"hops": {h[2]: [] for h in HOPS}, "total": [], "messages": 0}
    merged["batches"] = 0
    if args.loop_writer:
        import weir.client.sync

        weir.client.sync.DIRECT_TCP_WRITERS = False
    mode = f"{args.transport}{' loop writer' if args.loop_writer else ''}, "
    mode += f"{'serial, ' if args.serial else ''}{args.rate}/s"
    mode += f", server gc {args.gc or 'as shipped'}"
    for rep in range(args.reps):
        load = Path("/proc/loadavg").read_text().split()[:3]
        res = run_once(args.rate, args.seconds, args.size, env, args.serial, args.transport)
        print(table(res, f"rep {rep + 1}, {mode}, load {' '.join(load)}"), flush=True)
        print(f"\n{res['gc']}\n")
        for k, v in res["hops"].items():
            merged["hops"][k].extend(v)
        merged["total"].extend(res["total"])
        merged["messages"] += res["messages"]
        merged["batches"] += res["batches"]
        merged["rate"] = res["rate"]  # (the last rep's)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    if args.reps > 1:
        print(table(merged, f"all {args.reps} reps, {mode}, load after {load}"))
    if args.json:
        args.json.write_text(json.dumps(merged))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
