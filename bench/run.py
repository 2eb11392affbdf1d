"""The benchmark harness: weir next to real brokers on this machine, in one run.

    python -m bench.run                          # full: 1M x 100 B, 100k x 10 KB, 3 reps (~45 min)
    python -m bench.run --quick                  # 100k x 100 B, 10k x 10 KB (~10 min)
    python -m bench.run --systems weir-native --quick --reps 1     # iterate on weir (~1 min)
    python -m bench.run --workloads produce,latency --systems weir-native,redis-aof-always
    python -m bench.run --workloads pulsar --systems weir-pulsar,pulsar-null --quick
    python -m bench.run --workloads replication --systems weir-bookies --quick --no-profile
    python -m bench.run --workloads cluster --systems weir-cluster --quick --reps 2 --no-profile
                                                 # ~20 min on a loaded 2-core box (also part of
                                                 # the default run: it adds as much to it)

Every chosen server is started once (127.0.0.1 only, fresh data dirs, stopped
by PID at the end), then each repetition walks the workloads and, inside each
workload, every system in turn, starting with a different system each
repetition, so slow drifts of this shared machine's load hit every system
alike.  Workloads: produce/consume (P=1, P=4, C=1, C=2 for 100 B and 10 KB),
latency (fixed rate, ack and end-to-end), ydb (the ydb SDK against weir's YDB
front and against a null server), pulsar (pulsar-client against weir's Pulsar front
and against a null server), partitions (weir: fsyncs/s as partitions
grow), subscriptions (weir: Shared consume with individual acks by 1 and 4
consumer processes, and the cursor cost of scattered acks), disk (append + fdatasync),
replication (system weir-bookies: replicated ledger adds, E=WQ=3 AQ=2 on 3 bookies
beside one bookie), cluster (system weir-cluster: ZooKeeper, 3 bookies and 3 brokers
beside an embedded server, produce and consume at 1 and 4 partitions for each quorum
set of ``--cluster-quorums``; bench/cluster_bench.py).
After the repetitions an unmeasured pass
records the weir server with py-spy during its produce, consume, latency,
many-partitions and ydb runs and writes the top functions.

Output in ``--out`` (default bench/results/): ``<mode>-<stamp>.jsonl`` (one row
per measurement and repetition), ``.md`` (goals + table), ``-*.png`` charts,
``-profile.txt``.  ``python -m bench.report FILE.jsonl`` rebuilds the .md and
charts from a JSONL.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import cluster_bench, plots, replication_bench, report, server_profile
from bench import kafka_workloads as kafka_wl
from bench import pulsar_workloads as pulsar_wl
from bench import subscription_bench as sub_bench
from bench import weir_workloads as weir_wl
from bench import ydb_workloads as ydb_wl
from bench.peers import disk, servers
from bench.peers import workloads as peer_wl
from bench.peers.run import SYSTEMS as PEER_KINDS
from bench.peers.run import Sink
from bench.peers.workloads import Result, Target

PEERS = list(PEER_KINDS)
ALL = [
    *PEERS,
    "weir-native",
    "weir-native-tcp",
    "weir-native-tls",
    "weir-ydb",
    "ydb-null",
    "weir-pulsar",
    "pulsar-null",
    "weir-kafka",
    "kafka-null",
    "kafka-null-fsync",
    "weir-bookies",
    "weir-cluster",
    "disk",
]
WORKLOADS = [
    "produce",
    "latency",
    "ydb",
    "pulsar",
    "kafka",
    "partitions",
    "subscriptions",
    "disk",
    "txn",
    "replication",
    "cluster",
]
RESULTS = Path(__file__).resolve().parent / "results"
PEER_RESULTS = Path(__file__).resolve().parent / "peers" / "results"


@dataclass(frozen=True)
class Plan:
    """Counts and time caps of one mode."""

    mode: str
    sizes: tuple[tuple[int, int], ...]  # (message size, message count)
    max_seconds: float
    latency_rate: int
    latency_seconds: float
    ydb_single: int  # messages written with write(msg)
    ydb_batched: int  # messages written with write([100])
    partitions: tuple[int, ...]
    partitions_messages: int
    replication_entries: int = 0  # adds per replication case (0: capped by time only)
    producers: tuple[int, ...] = (1, 4)
    consumers: tuple[int, ...] = (1, 2)
    cluster_quorums: tuple[tuple[int, int, int], ...] = cluster_bench.QUORUMS
    cluster_partitions: tuple[int, ...] = (1, 4)


def make_plan(args: argparse.Namespace) -> Plan:
    quick = args.quick
    return Plan(
        mode="quick" if quick else "full",
        sizes=(
            (100, args.small or (100_000 if quick else 1_000_000)),
            (10_240, args.large or (10_000 if quick else 100_000)),
        ),
        max_seconds=args.max_seconds or (15.0 if quick else 30.0),
        latency_rate=args.latency_rate,
        latency_seconds=args.latency_seconds or (5.0 if quick else 10.0),
        ydb_single=3_000 if quick else 20_000,
        ydb_batched=50_000 if quick else 300_000,
        partitions=tuple(int(p) for p in args.partitions.split(",")),
        partitions_messages=100_000 if quick else 300_000,
        replication_entries=args.replication_entries or (20_000 if quick else 100_000),
        cluster_quorums=cluster_bench.parse_quorums(args.cluster_quorums),
    )


# --------------------------------------------------------------------------
# one interface over peers and weir
# --------------------------------------------------------------------------


@dataclass
class Broker:
    """A running system that takes the produce/consume/latency workloads."""

    target: Target
    prepare: Callable[[str], Any]
    drop: Callable[[Any], None]
    produce: Callable[[Any, int, int, int, float], Result]
    consume: Callable[[Any, int, int, int, float], Result]
    latency: Callable[[int, float], list[Result]]

    @property
    def name(self) -> str:
        return self.target.system


def peer_broker(t: Target) -> Broker:
    return Broker(
        t,
        prepare=lambda tag: peer_wl.prepare_stream(t, tag),
        drop=lambda ref: peer_wl.drop_stream(t, ref),
        produce=lambda ref, n, size, p, cap: peer_wl.produce(t, ref, n, size, p, cap),
        consume=lambda ref, n, size, c, cap: peer_wl.consume(t, ref, n, size, c, cap),
        latency=lambda rate, secs: peer_wl.latency(t, rate, secs, 100),
    )


def weir_broker(t: Target, pid: int, mport: int) -> Broker:
    return Broker(
        t,
        prepare=lambda tag: weir_wl.prepare_topic(t, tag),
        drop=lambda ref: weir_wl.drop_topic(t, ref),
        produce=lambda ref, n, size, p, cap: weir_wl.produce(t, ref, n, size, p, cap, pid, mport),
        consume=lambda ref, n, size, c, cap: weir_wl.consume(t, ref, n, size, c, cap, pid, mport),
        latency=lambda rate, secs: weir_wl.latency(t, rate, secs, 100, metrics_port=mport),
    )


@dataclass
class Lab:
    """Every server of the run, started once and stopped by PID at the end."""

    data_root: Path
    brokers: dict[str, Broker] = field(default_factory=dict)
    handles: dict[str, Any] = field(default_factory=dict)
    ydb: dict[str, tuple[Target, int]] = field(default_factory=dict)
    # Pulsar port targets: (target, server pid, weir's native target to drop topics or None)
    pulsar: dict[str, tuple[Target, int, Target | None]] = field(default_factory=dict)
    kafka: dict[str, tuple[Target, int]] = field(default_factory=dict)

    def start(self, chosen: list[str]) -> None:
        for name in chosen:
            if name in PEERS:
                t0 = time.monotonic()
                h = servers.STARTERS[name](self.data_root / name)
                self.handles[name] = h
                t = Target(
                    h.system, PEER_KINDS[name], h.host, h.port, h.fsync_before_ack, h.version
                )
                self.brokers[name] = peer_broker(t)
                _say(f"{name}: {h.version}, pid {h.pid}, ready in {time.monotonic() - t0:.1f}s")
        if {"weir-native", "weir-native-tcp", "weir-ydb", "weir-pulsar", "weir-kafka"} & set(
            chosen
        ):
            kport, tport = servers.free_ports(2)
            h = weir_wl.start_server(
                self.data_root / "weir",
                env={
                    "WEIR_KAFKA_LISTEN": f"{servers.LOOPBACK}:{kport}",
                    "WEIR_NATIVE_TCP_ENABLED": "true",
                    "WEIR_NATIVE_TCP_LISTEN": f"{servers.LOOPBACK}:{tport}",
                },
            )
            h.ports["kafka"] = kport
            h.ports["native_tcp"] = tport
            self.handles["weir"] = h
            _say(f"weir: {h.version}, pid {h.pid}, ports {h.ports}")
            if "weir-native" in chosen:
                self.brokers["weir-native"] = weir_broker(
                    weir_wl.target_of(h), h.pid, h.ports["metrics"]
                )
            if "weir-native-tcp" in chosen:
                # the same server, its writers on the native TCP port instead of gRPC
                self.brokers["weir-native-tcp"] = weir_broker(
                    weir_wl.tcp_target_of(h), h.pid, h.ports["metrics"]
                )
            if "weir-ydb" in chosen:
                self.ydb["weir-ydb"] = (ydb_wl.weir_target(h), h.pid)
            if "weir-pulsar" in chosen:
                self.pulsar["weir-pulsar"] = (
                    pulsar_wl.weir_target(h),
                    h.pid,
                    weir_wl.target_of(h),
                )
            if "weir-kafka" in chosen:
                self.kafka["weir-kafka"] = (kafka_wl.weir_target(h), h.pid)
        if "weir-native-tls" in chosen:
            self._start_secure_weir()
        if "weir-cluster" in chosen:
            t0 = time.monotonic()
            cluster = cluster_bench.BenchCluster(self.data_root / "cluster")
            self.handles["weir-cluster"] = cluster
            cluster.start()
            h = cluster_bench.start_embedded(self.data_root / "weir-embedded")
            self.handles["weir-embedded"] = h
            _say(
                f"weir-cluster: zookeeper {cluster.zookeeper.hosts}, bookies "
                f"{cluster.bookie_pids()}, embedded server pid {h.pid}, "
                f"ready in {time.monotonic() - t0:.1f}s (brokers start per quorum set)"
            )
        if "kafka-null" in chosen:
            h = kafka_wl.start_null_server(self.data_root / "kafka-null")
            self.handles["kafka-null"] = h
            self.kafka["kafka-null"] = (kafka_wl.null_target(h), h.pid)
            _say(f"kafka-null: pid {h.pid}, port {h.port}")
        if "kafka-null-fsync" in chosen:
            h = kafka_wl.start_null_server(self.data_root / "kafka-null-fsync", fsync=True)
            self.handles["kafka-null-fsync"] = h
            self.kafka["kafka-null-fsync"] = (kafka_wl.null_target(h), h.pid)
            _say(f"kafka-null-fsync: pid {h.pid}, port {h.port}")
        if "ydb-null" in chosen:
            h = ydb_wl.start_null_server(self.data_root / "ydb-null")
            self.handles["ydb-null"] = h
            self.ydb["ydb-null"] = (ydb_wl.null_target(h), h.pid)
            _say(f"ydb-null: pid {h.pid}, port {h.port}")
        if "pulsar-null" in chosen:
            h = pulsar_wl.start_null_server(self.data_root / "pulsar-null")
            self.handles["pulsar-null"] = h
            self.pulsar["pulsar-null"] = (pulsar_wl.null_target(h), h.pid, None)
            _say(f"pulsar-null: pid {h.pid}, port {h.port}")

    def _start_secure_weir(self) -> None:
        """weir-native-tls: a second weir server with TLS on, anonymous access off and grants
        checked; its clients trust a throwaway CA and send a JWT whose subject holds
        produce, consume and admin grants (not a superuser: the grant lookup runs)."""
        import secrets

        from tests.security.certs import Authority
        from weir.security.jwt_tokens import create_token

        d = self.data_root / "weir-tls"
        ca = Authority(d / "ca")
        cert = ca.issue("localhost")
        secret = secrets.token_hex(32)
        root_pw = secrets.token_hex(16)
        h = weir_wl.start_server(
            d,
            env={
                "WEIR_TLS_CERT_FILE": str(cert.cert),
                "WEIR_TLS_KEY_FILE": str(cert.key),
                "WEIR_AUTH_ALLOW_ANONYMOUS": "false",
                "WEIR_AUTH_USERS": f"root:{root_pw}",
                "WEIR_AUTH_SUPERUSERS": "root",
                "WEIR_AUTH_JWT_SECRET": secret,
                "WEIR_KAFKA_ENABLED": "false",
            },
        )
        self.handles["weir-tls"] = h
        import weir

        with weir.Client(
            f"{h.host}:{h.port}", tls=weir.Tls(ca=ca.path), credentials=("root", root_pw)
        ) as root:
            for permission in ("produce", "consume", "admin"):
                root.grant("bench", permission, "*")
        token = create_token("bench", dt.timedelta(hours=12), secret=secret)
        t = weir_wl.SecureTarget(
            "weir-native-tls", "weir", h.host, h.port, True, h.version, str(ca.path), token
        )
        # no metrics scrapes (port 0): the metrics endpoint speaks https here
        self.brokers["weir-native-tls"] = weir_broker(t, h.pid, 0)
        _say(f"weir-native-tls: {h.version}, pid {h.pid}, ports {h.ports}, TLS + JWT + grants")

    def stop(self) -> None:
        for name, h in self.handles.items():
            with contextlib.suppress(Exception):
                h.stop()
                _say(f"{name}: stopped (pid {h.pid})")
        servers.stop_all()

    @property
    def weir(self) -> Any:
        return self.handles.get("weir")


def _say(msg: str) -> None:
    print(f"== {msg}", flush=True)


def _rotate(xs: list[Any], k: int) -> list[Any]:
    return xs[k % len(xs) :] + xs[: k % len(xs)] if xs else xs


# --------------------------------------------------------------------------
# workloads, interleaved across systems
# --------------------------------------------------------------------------


def _measure(
    sink: Sink,
    system: str,
    workload: str,
    rep: int,
    version: str,
    fn: Callable[..., Any],
    *args: Any,
) -> Any:
    """Run ``fn(*args)``, record its row(s) or its error; never raise (but ^C)."""
    try:
        out = fn(*args)
    except KeyboardInterrupt:
        raise
    except Exception:
        sink.error(system, workload, rep, traceback.format_exc())
        return None
    for r in out if isinstance(out, list) else [out]:
        sink.add(r, rep, version)
    return out


def run_throughput(lab: Lab, plan: Plan, rep: int, sink: Sink) -> None:
    """Per size: P=1 on every system, P=4 on every system, then C=1 and C=2 reading P=1's data."""
    order = _rotate([b for b in lab.brokers.values()], rep)
    for size, n in plan.sizes:
        kept: dict[str, tuple[Any, int]] = {}
        try:
            for p in plan.producers:
                for b in order:
                    ref = None
                    try:
                        ref = b.prepare(f"p{p}")
                    except Exception:
                        sink.error(b.name, f"produce P={p} {size}B", rep, traceback.format_exc())
                        continue
                    r = _measure(
                        sink,
                        b.name,
                        f"produce P={p} {size}B",
                        rep,
                        b.target.version,
                        b.produce,
                        ref,
                        n,
                        size,
                        p,
                        plan.max_seconds,
                    )
                    if p == plan.producers[0] and r is not None:
                        kept[b.name] = (ref, r.messages)
                    else:
                        with contextlib.suppress(Exception):
                            b.drop(ref)
            for c in plan.consumers:
                for b in order:
                    if b.name not in kept:
                        continue
                    ref, available = kept[b.name]
                    _measure(
                        sink,
                        b.name,
                        f"consume C={c} {size}B",
                        rep,
                        b.target.version,
                        b.consume,
                        ref,
                        available,
                        size,
                        c,
                        plan.max_seconds,
                    )
        finally:
            for b in order:
                if b.name in kept:
                    with contextlib.suppress(Exception):
                        b.drop(kept[b.name][0])


def run_latency(lab: Lab, plan: Plan, rep: int, sink: Sink) -> None:
    for b in _rotate(list(lab.brokers.values()), rep):
        _measure(
            sink,
            b.name,
            "latency",
            rep,
            b.target.version,
            b.latency,
            plan.latency_rate,
            plan.latency_seconds,
        )


def run_ydb(lab: Lab, plan: Plan, rep: int, sink: Sink) -> None:
    """Both writer patterns on weir's YDB front and the null server, then the reader (weir)."""
    order = _rotate(sorted(lab.ydb), rep)
    for per_call, n in ((1, plan.ydb_single), (100, plan.ydb_batched)):
        for name in order:
            t, pid = lab.ydb[name]
            wl = f"ydb produce P=1 100B {ydb_wl.pattern_label(per_call)}"
            try:
                ref = ydb_wl.prepare_topic(t, "y")
            except Exception:
                sink.error(name, wl, rep, traceback.format_exc())
                continue
            try:
                r = _measure(
                    sink,
                    name,
                    wl,
                    rep,
                    t.version,
                    ydb_wl.produce,
                    t,
                    ref,
                    n,
                    100,
                    per_call,
                    plan.max_seconds,
                    pid,
                )
                if per_call > 1 and name == "weir-ydb" and r is not None:
                    _measure(
                        sink,
                        name,
                        "ydb consume C=1 100B",
                        rep,
                        t.version,
                        ydb_wl.consume,
                        t,
                        ref,
                        r.messages,
                        100,
                        plan.max_seconds,
                        pid,
                    )
            finally:
                with contextlib.suppress(Exception):
                    ydb_wl.drop_topic(t, ref)


def run_pulsar(lab: Lab, plan: Plan, rep: int, sink: Sink) -> None:
    """Per size: the producer on weir and on the null server, then the consumer reading
    back what was produced (the null server serves as many as asked for)."""
    order = _rotate(sorted(lab.pulsar), rep)
    for size, n in plan.sizes:
        for name in order:
            t, pid, native = lab.pulsar[name]
            ref = pulsar_wl.prepare_topic(t, "p", size)
            try:
                r = _measure(
                    sink,
                    name,
                    f"pulsar produce P=1 {pulsar_wl.size_label(size)} batched",
                    rep,
                    t.version,
                    pulsar_wl.produce,
                    t,
                    ref,
                    n,
                    size,
                    plan.max_seconds,
                    pid,
                )
                if r is not None:
                    _measure(
                        sink,
                        name,
                        f"pulsar consume C=1 {pulsar_wl.size_label(size)}",
                        rep,
                        t.version,
                        pulsar_wl.consume,
                        t,
                        ref,
                        r.messages if native is not None else n,
                        size,
                        plan.max_seconds,
                        pid,
                    )
            finally:
                with contextlib.suppress(Exception):
                    pulsar_wl.drop_topic(native, ref)


def run_kafka(lab: Lab, plan: Plan, rep: int, sink: Sink) -> None:
    """confluent-kafka on weir's Kafka front and the null server: acks=all and idempotent
    producers, then the consumer reading them back (weir)."""
    order = _rotate(sorted(lab.kafka), rep)
    for size, n in plan.sizes:
        for idempotent in (False, True):
            for name in order:
                t, pid = lab.kafka[name]
                wl = f"kafka produce P=1 {size}B {'idempotent' if idempotent else 'acks=all'}"
                try:
                    ref = kafka_wl.prepare_topic(t, "k")
                except Exception:
                    sink.error(name, wl, rep, traceback.format_exc())
                    continue
                try:
                    r = _measure(
                        sink, name, wl, rep, t.version, kafka_wl.produce,
                        t, ref, n, size, idempotent, plan.max_seconds, pid,
                    )  # fmt: skip
                    if not idempotent and name == "weir-kafka" and r is not None:
                        _measure(
                            sink, name, f"kafka consume C=1 {size}B", rep, t.version,
                            kafka_wl.consume, t, ref, r.messages, size, plan.max_seconds, pid,
                        )  # fmt: skip
                finally:
                    with contextlib.suppress(Exception):
                        kafka_wl.drop_topic(t, ref)


def run_partitions(lab: Lab, plan: Plan, rep: int, sink: Sink) -> None:
    h = lab.weir
    b = lab.brokers.get("weir-native")
    if h is None or b is None:
        return
    for parts in plan.partitions:
        _measure(
            sink,
            b.name,
            f"partitions={parts}",
            rep,
            h.version,
            weir_wl.many_partitions,
            b.target,
            h.ports["metrics"],
            parts,
            plan.partitions_messages,
            100,
            plan.max_seconds,
            2,
            h.pid,
        )


def run_subscriptions(lab: Lab, plan: Plan, rep: int, sink: Sink) -> None:
    """Shared consume with individual acks (1 and 4 consumer processes) and the cursor
    cost of scattered acks (bench/subscription_bench.py)."""
    h = lab.weir
    if h is None or "weir-native" not in lab.brokers:
        return
    n = min(plan.sizes[0][1], 200_000)
    _measure(
        sink,
        "weir-native",
        "subscription shared 100B",
        rep,
        h.version,
        sub_bench.shared_rows,
        f"{h.host}:{h.port}",
        n,
        [1, 4],
        h.pid,
    )
    _measure(
        sink,
        "weir-native",
        "subscription sparse acks",
        rep,
        h.version,
        sub_bench.sparse_row,
        20_000,
    )


def run_disk(lab: Lab, plan: Plan, rep: int, sink: Sink) -> None:
    _measure(
        sink,
        "disk",
        "append",
        rep,
        "",
        disk.run_all,
        lab.data_root / "disk",
        disk.DEFAULT_SIZES,
        2.0 if plan.mode == "quick" else 3.0,
    )


def run_transactions(lab: Lab, plan: Plan, rep: int, sink: Sink) -> None:
    """weir: 100 B messages in transactions of 1, 100 and 10,000 messages, each row beside
    a plain produce of the same messages (P=1, same topic shape) measured just before it;
    the transactional row carries the overhead per transaction against that plain one.
    The same through the Kafka front (confluent-kafka's transactional producer) when it
    is in the lab."""
    run_kafka_transactions(lab, plan, rep, sink)
    b = lab.brokers.get("weir-native")
    if b is None:
        return
    pid = lab.weir.pid
    n_all = plan.sizes[0][1]
    # 1-message transactions cost a begin, a writer stream and a commit each: fewer of them
    for txn, n in ((1, min(n_all, 2_000)), (100, min(n_all, 50_000)), (10_000, n_all)):
        ref = b.prepare(f"plain{txn}")
        plain: Result | None = None
        try:
            plain = b.produce(ref, n, 100, 1, plan.max_seconds)
            plain.workload = f"produce plain, beside txn={txn} 100B"
            sink.add(plain, rep, b.target.version)
        except Exception:
            sink.error(b.name, f"produce plain, beside txn={txn} 100B", rep, traceback.format_exc())
        finally:
            with contextlib.suppress(Exception):
                b.drop(ref)
        ref = b.prepare(f"txn{txn}")
        try:
            r = weir_wl.produce_transactions(b.target, ref, n, 100, txn, plan.max_seconds, pid)
        except Exception:
            sink.error(b.name, f"produce txn={txn} 100B", rep, traceback.format_exc())
            continue
        finally:
            with contextlib.suppress(Exception):
                b.drop(ref)
        txns = r.extra.get("transactions") or 1
        if plain is not None and plain.messages:
            per_msg_plain = plain.seconds / plain.messages
            extra_s = r.seconds - per_msg_plain * r.messages
            r.extra["plain_msgs_per_s"] = plain.msgs_per_s
            r.extra["overhead_ms_per_txn"] = round(extra_s / txns * 1000, 3)
        sink.add(r, rep, b.target.version)
        _say(
            f"txn={txn}: {r.msgs_per_s:,.0f} msgs/s in {txns} transactions "
            f"(plain {plain.msgs_per_s if plain else 0:,.0f}); overhead "
            f"{r.extra.get('overhead_ms_per_txn')} ms per transaction"
        )


def run_replication(lab: Lab, plan: Plan, rep: int, sink: Sink) -> None:
    """Replicated adds of 1 KiB (bench/replication_bench.py): a ledger on 3 bookie processes
    (E=WQ=3, AQ=2) beside one bookie (E=WQ=AQ=1, single-node storage), one add at a time
    and 64 in flight. Its own ZooKeeper and bookies, started and stopped here."""
    name = "weir-bookies"
    try:
        rows = replication_bench.run_all(
            lab.data_root / f"replication-{rep}",
            plan.max_seconds,
            1024,
            (1, 64),
            plan.replication_entries,
        )
    except Exception:
        sink.error(name, "replication", rep, traceback.format_exc())
        return
    for row in rows:
        one = row.case == "E=1 WQ=1 AQ=1"
        r = Result(
            system=name,
            workload=f"ledger add {row.case}{' (one bookie)' if one else ''} w={row.window} 1KB",
            messages=row.entries,
            bytes=row.entries * row.size,
            seconds=row.seconds,
            fsync_before_ack=True,
            p50_ms=row.p50_ms,
            p99_ms=row.p99_ms,
            extra={"window": row.window, "quorums": row.case},
        )
        sink.add(r, rep, weir_version())


def run_cluster(lab: Lab, plan: Plan, rep: int, sink: Sink) -> None:
    """Embedded beside the cluster (bench/cluster_bench.py): produce and consume at 1 and 4
    partitions, 100 B and 10 KB, for each quorum set; the brokers restart per set."""
    cluster = lab.handles.get("weir-cluster")
    if cluster is None:
        return
    version = weir_version()
    try:
        cluster_bench.run_rep(
            cluster,
            lab.handles["weir-embedded"],
            rep,
            plan.sizes,
            plan.cluster_partitions,
            plan.cluster_quorums,
            plan.max_seconds,
            lambda r: sink.add(r, rep, version),
            lambda system, wl, tb: sink.error(system, wl, rep, tb),
        )
    except Exception:
        sink.error("weir-cluster", "cluster", rep, traceback.format_exc())


def weir_version() -> str:
    import weir

    return weir.__version__


def run_kafka_transactions(lab: Lab, plan: Plan, rep: int, sink: Sink) -> None:
    """confluent-kafka on weir's Kafka front: transactions of 1, 100 and 10,000 messages of
    100 B, each beside an acks=all produce of the same messages measured just before it."""
    if "weir-kafka" not in lab.kafka:
        return
    t, pid = lab.kafka["weir-kafka"]
    n_all = plan.sizes[0][1]
    for txn, n in ((1, min(n_all, 2_000)), (100, min(n_all, 50_000)), (10_000, n_all)):
        plain: Result | None = None
        wl = f"kafka produce plain, beside txn={txn} 100B"
        try:
            ref = kafka_wl.prepare_topic(t, f"kp{txn}")
            try:
                plain = kafka_wl.produce(t, ref, n, 100, False, plan.max_seconds, pid)
                plain.workload = wl
                sink.add(plain, rep, t.version)
            finally:
                with contextlib.suppress(Exception):
                    kafka_wl.drop_topic(t, ref)
        except Exception:
            sink.error("weir-kafka", wl, rep, traceback.format_exc())
        wl = f"kafka produce txn={txn} 100B"
        try:
            ref = kafka_wl.prepare_topic(t, f"kt{txn}")
            try:
                r = kafka_wl.produce_transactions(t, ref, n, 100, txn, plan.max_seconds, pid)
            finally:
                with contextlib.suppress(Exception):
                    kafka_wl.drop_topic(t, ref)
        except Exception:
            sink.error("weir-kafka", wl, rep, traceback.format_exc())
            continue
        txns = r.extra.get("transactions") or 1
        if plain is not None and plain.messages:
            extra_s = r.seconds - plain.seconds / plain.messages * r.messages
            r.extra["plain_msgs_per_s"] = plain.msgs_per_s
            r.extra["overhead_ms_per_txn"] = round(extra_s / txns * 1000, 3)
        sink.add(r, rep, t.version)
        _say(
            f"kafka txn={txn}: {r.msgs_per_s:,.0f} msgs/s in {txns} transactions "
            f"(plain {plain.msgs_per_s if plain else 0:,.0f}); overhead "
            f"{r.extra.get('overhead_ms_per_txn')} ms per transaction"
        )


RUNNERS: dict[str, Callable[[Lab, Plan, int, Sink], None]] = {
    "replication": run_replication,
    "cluster": run_cluster,
    "txn": run_transactions,
    "produce": run_throughput,
    "latency": run_latency,
    "ydb": run_ydb,
    "pulsar": run_pulsar,
    "kafka": run_kafka,
    "partitions": run_partitions,
    "subscriptions": run_subscriptions,
    "disk": run_disk,
}


# --------------------------------------------------------------------------
# the profile pass
# --------------------------------------------------------------------------


@contextlib.contextmanager
def _phase(lab: Lab, raw_dir: Path, name: str, sections: list[str]) -> Iterator[list[str]]:
    """py-spy on the weir server for one phase; appends its summary to ``sections``."""
    raw = raw_dir / (re.sub(r"[^A-Za-z0-9=@.-]+", "_", name).strip("_") + ".txt")
    note: list[str] = []
    prof = server_profile.Profiler(lab.weir.pid, raw)
    with prof:
        try:
            yield note
        except Exception:
            note.append("FAILED: " + traceback.format_exc().strip().splitlines()[-1])
    head = f"### {name}" + (f": {note[0]}" if note else "")
    body = prof.error or server_profile.top_functions(raw)
    sections.append(f"{head}\n\n{body}")
    _say(f"profiled {name} -> {raw}")


def _repeat(fn: Callable[[], Result], seconds: float, max_runs: int = 20) -> list[Result]:
    """Run ``fn`` until ``seconds`` have passed (at least once): enough samples for py-spy."""
    out: list[Result] = []
    t0 = time.monotonic()
    while len(out) < max_runs and (not out or time.monotonic() - t0 < seconds):
        out.append(fn())
    return out


def _summary(rs: list[Result]) -> str:
    """Median throughput (and server CPU per message) of the profiled runs."""
    mps = report.median([r.msgs_per_s for r in rs])
    mbs = report.median([r.mb_per_s for r in rs])
    cpu = [r.extra["server_cpu_us_per_msg"] for r in rs if r.extra.get("server_cpu_us_per_msg")]
    tail = f", server CPU {report.median(cpu):.2f} µs/msg" if cpu else ""
    return f"{len(rs)} run(s), median {mps:,.0f} msgs/s, {mbs:,.1f} MB/s{tail} (under py-spy)"


def profile_pass(lab: Lab, plan: Plan, out_txt: Path, raw_dir: Path) -> str:
    """Unmeasured runs of each weir workload with py-spy attached to the server.

    Each phase repeats its workload for a few seconds so that the profile has
    enough samples; the throughput printed with it is under py-spy (lower).
    """
    h = lab.weir
    if h is None:
        return ""
    b = None
    if "weir-native" in lab.brokers:  # without metrics scrapes: they would show in the profile
        b = weir_broker(lab.brokers["weir-native"].target, h.pid, 0)
    secs = 5.0 if plan.mode == "quick" else 10.0
    cap = plan.max_seconds
    sections: list[str] = []

    if b is not None:
        for size, n in plan.sizes:

            def produce_once(size: int = size, n: int = n) -> Result:
                ref = b.prepare("prof")
                try:
                    return b.produce(ref, n, size, 1, cap)
                finally:
                    with contextlib.suppress(Exception):
                        b.drop(ref)

            with _phase(lab, raw_dir, f"produce P=1 {size}B", sections) as note:
                note.append(_summary(_repeat(produce_once, secs)))
        size, n = plan.sizes[0]
        ref = b.prepare("prof")
        try:
            got = b.produce(ref, n, size, 1, cap).messages
            with _phase(lab, raw_dir, f"consume C=1 {size}B", sections) as note:
                note.append(_summary(_repeat(lambda: b.consume(ref, got, size, 1, cap), secs)))
        finally:
            with contextlib.suppress(Exception):
                b.drop(ref)
        with _phase(lab, raw_dir, "latency @5000/s", sections) as note:
            ack, e2e = b.latency(plan.latency_rate, min(secs, plan.latency_seconds))
            note.append(
                f"ack p50 {ack.p50_ms or 0:.2f} ms p99 {ack.p99_ms or 0:.2f} ms, "
                f"e2e p50 {e2e.p50_ms or 0:.2f} ms p99 {e2e.p99_ms or 0:.2f} ms (under py-spy)"
            )
        most = max(plan.partitions)
        with _phase(lab, raw_dir, f"partitions={most}", sections) as note:
            r = weir_wl.many_partitions(
                b.target, h.ports["metrics"], most, plan.partitions_messages, 100, cap, 2, h.pid
            )
            note.append(_summary([r]) + f", {r.extra.get('fsyncs_per_s', 0):.0f} fsyncs/s")
    if "weir-ydb" in lab.ydb:
        t, pid = lab.ydb["weir-ydb"]

        def ydb_once() -> Result:
            ref = ydb_wl.prepare_topic(t, "prof")
            try:
                return ydb_wl.produce(t, ref, plan.ydb_batched, 100, 100, cap, pid)
            finally:
                with contextlib.suppress(Exception):
                    ydb_wl.drop_topic(t, ref)

        with _phase(lab, raw_dir, "ydb produce write([100 msgs])", sections) as note:
            note.append(_summary(_repeat(ydb_once, secs)))
    if "weir-pulsar" in lab.pulsar:
        pt, pid, native = lab.pulsar["weir-pulsar"]
        for size, n in plan.sizes:
            ref = pulsar_wl.prepare_topic(pt, "prof", size)
            try:
                with _phase(
                    lab,
                    raw_dir,
                    f"pulsar produce P=1 {pulsar_wl.size_label(size)} batched",
                    sections,
                ) as note:
                    r = pulsar_wl.produce(pt, ref, n, size, cap, pid)
                    note.append(_summary([r]))
                with _phase(
                    lab, raw_dir, f"pulsar consume C=1 {pulsar_wl.size_label(size)}", sections
                ) as note:
                    note.append(_summary([pulsar_wl.consume(pt, ref, r.messages, size, cap, pid)]))
            finally:
                with contextlib.suppress(Exception):
                    pulsar_wl.drop_topic(native, ref)
    if "weir-kafka" in lab.kafka:
        kt, pid = lab.kafka["weir-kafka"]
        for size, n in plan.sizes:
            ref = kafka_wl.prepare_topic(kt, "prof")
            try:
                with _phase(lab, raw_dir, f"kafka produce P=1 {size}B acks=all", sections) as note:
                    r = kafka_wl.produce(kt, ref, n, size, False, cap, pid)
                    note.append(_summary([r]))
                with _phase(lab, raw_dir, f"kafka consume C=1 {size}B", sections) as note:
                    rs = _repeat(
                        functools.partial(kafka_wl.consume, kt, ref, r.messages, size, cap, pid),
                        secs,
                    )
                    note.append(_summary(rs))
            finally:
                with contextlib.suppress(Exception):
                    kafka_wl.drop_topic(kt, ref)
    text = "\n\n".join(sections)
    out_txt.write_text(
        "# weir server profile: py-spy record --nonblocking --threads on the server, "
        f"raw stacks in {raw_dir.name}/\n\n" + text
    )
    return text


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def git_commit() -> str:
    """HEAD of the checkout weir runs from (+ "-dirty" with uncommitted changes under src/)."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    return head + ("-dirty" if dirty else "") if head else "?"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--quick", action="store_true", help="100k x 100 B, 10k x 10 KB (default: full)"
    )
    ap.add_argument("--reps", type=int, default=3, help="repetitions (default 3)")
    ap.add_argument("--systems", default=",".join(ALL), help=f"comma list of {ALL}")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma list of {WORKLOADS}")
    ap.add_argument("--small", type=int, help="count of 100 B messages")
    ap.add_argument("--large", type=int, help="count of 10 KB messages")
    ap.add_argument("--max-seconds", type=float, help="cap per phase (quick 15, full 30)")
    ap.add_argument("--latency-rate", type=int, default=5000)
    ap.add_argument("--latency-seconds", type=float, help="quick 5, full 10")
    ap.add_argument("--partitions", default="1,10,100,1000", help="partition counts")
    ap.add_argument(
        "--replication-entries", type=int, help="adds per replication case (quick 20k, full 100k)"
    )
    ap.add_argument(
        "--cluster-quorums", default="3/2/2,2/2/1", help="E/WQ/AQ sets of the cluster workload"
    )
    ap.add_argument("--no-profile", action="store_true", help="skip the py-spy pass")
    ap.add_argument("--budget-minutes", type=float, help="start no repetition after this long")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--data-dir", type=Path, help="parent of the servers' temp dirs")
    ap.add_argument("--keep-data", action="store_true")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = make_plan(args)
    chosen = [s.strip() for s in args.systems.split(",") if s.strip()]
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    bad = (set(chosen) - set(ALL)) | (set(workloads) - set(WORKLOADS))
    if bad:
        raise SystemExit(f"unknown {sorted(bad)}; systems {ALL}, workloads {WORKLOADS}")
    chosen = [s for s in ALL if s in chosen]
    if "disk" not in chosen and "disk" in workloads:
        workloads.remove("disk")
    if "weir-bookies" not in chosen and "replication" in workloads:
        workloads.remove("replication")
    if "weir-cluster" not in chosen and "cluster" in workloads:
        workloads.remove("cluster")
    # SIGTERM -> KeyboardInterrupt, so `finally` stops every server
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    prefix = args.out / f"{plan.mode}-{stamp}"
    jsonl = prefix.with_suffix(".jsonl")
    data_root = Path(tempfile.mkdtemp(prefix="weir-bench-", dir=args.data_dir))
    meta: dict[str, Any] = dict(
        mode=plan.mode,
        host=platform.node(),
        cpus=os.cpu_count(),
        run=stamp,
        reps=args.reps,
        sizes=[list(s) for s in plan.sizes],
        max_seconds=plan.max_seconds,
        systems=chosen,
        workloads=workloads,
        command="python -m bench.run " + " ".join(argv if argv is not None else sys.argv[1:]),
        weir_commit=git_commit(),
    )
    _say(
        f"{plan}\n   systems {chosen}, workloads {workloads}, data in {data_root}, rows -> {jsonl}"
    )
    t0 = time.monotonic()
    lab = Lab(data_root)
    sink_meta = {k: meta[k] for k in ("mode", "host", "cpus", "run")}
    prof_text = ""
    with open(jsonl, "w") as fh:
        fh.write(json.dumps({"meta": meta}) + "\n")
        sink = Sink(fh, sink_meta)
        try:
            lab.start(chosen)
            done = 0
            for rep in range(args.reps):
                if args.budget_minutes and time.monotonic() - t0 > args.budget_minutes * 60:
                    _say(f"budget of {args.budget_minutes} min spent: stopping after {done} reps")
                    break
                for w in workloads:
                    _say(f"rep {rep}: {w}")
                    RUNNERS[w](lab, plan, rep, sink)
                done += 1
            meta["reps"] = done
            if not args.no_profile and lab.weir is not None:
                _say("profile pass (py-spy on the weir server)")
                try:
                    prof_text = profile_pass(
                        lab,
                        plan,
                        prefix.with_name(prefix.name + "-profile.txt"),
                        args.out / "raw" / prefix.name,
                    )
                except Exception:
                    traceback.print_exc()
        finally:
            lab.stop()
            if not args.keep_data:
                shutil.rmtree(data_root, ignore_errors=True)
        meta["seconds"] = time.monotonic() - t0
        fh.write(json.dumps({"meta": {"seconds": meta["seconds"], "reps": meta["reps"]}}) + "\n")
    rows, _ = report.load(jsonl)
    charts = plots.make_all(rows, prefix)
    base_rows: report.Rows = []
    base_name = ""
    if not any(r.get("system") in PEERS for r in rows):
        base_rows, base_name = report.find_baseline([args.out, PEER_RESULTS], jsonl)
    md = prefix.with_suffix(".md")
    md.write_text(report.document(rows, meta, base_rows, base_name, charts, prof_text))
    print()
    print(report.goals_table(report.goals(rows)))
    print()
    print(report.table(rows, base_rows))
    ctable = cluster_bench.table(rows)
    if ctable:
        print("\ncluster beside embedded (capacity model inputs; processes share 2 cores)\n")
        print(ctable)
    print(f"\nrows: {jsonl}\nreport: {md}\ncharts: {', '.join(str(c) for c in charts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
