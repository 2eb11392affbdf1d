"""Tiered storage benchmark: the S3 clients, reads from the tier beside local reads,
Spark over offloaded Parquet against the broker, and offload while producing.

    python bench/tier_bench.py [--only clients,reads,spark,offload] [--mb 64] [--json out.json]

- clients: boto3 and obstore putting and getting 4 MiB objects to the same S3
  endpoint (moto's server on loopback: it bounds both, so the client's own CPU per MB
  is the figure that tells them apart).
- reads: one partition of ``--mb`` MB read whole through `PartitionLog.read`: local
  (read cache warm), offloaded with an empty tier cache (cold: one GET per blob,
  checked), and offloaded again with the blobs cached; for the local-directory and
  the S3 back end.
- spark: rows/s over a topic offloaded whole (``--spark-messages`` of ``--spark-size``
  bytes, default 2,000,000 x 500 B = 1 GB): `weir.spark.read` (Spark's own Parquet
  scan of the offloaded files), `format("weir")` reading the objects in Python tasks,
  and `format("weir")` through the broker; best of runs 2.. of each, alternated.
  ``--spark-blob-mb 8,64`` does it for servers with other `storage.max_blob_size`
  (one segment object per blob: Spark's scan pays a fixed cost per file), and
  ``--spark-setups 8:0,8:128`` for blobs packed into larger objects (`tier.object_bytes`);
  a third field ``zstd`` (``8:128:zstd``) rewrites that server's objects after offload
  with zstd on every column, as objects were written before the codec choice (same rows,
  row groups and metadata): the before of `segment_format.write_options`, A/B in one run.
- offload: an SDK producer's MB/s for a few seconds with no offload, then with an
  offload policy that copies every sealed blob as it is made.

Figures on the shared 2-core machine are noisy; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import ServerProcess  # noqa: E402
from tests.tiered.conftest import CREDS, S3Server, make_bucket, s3_settings  # noqa: E402
from weir.storage.batch_encoding import encode_batch  # noqa: E402
from weir.storage.incoming import validate_incoming  # noqa: E402
from weir.storage.partition import PartitionConfig  # noqa: E402
from weir.storage.store import Store  # noqa: E402
from weir.storage.tiered.manager import OffloadPolicy  # noqa: E402
from weir.storage.tiered.remote_storage import LocalDirStorage, RemoteStorage, S3Storage  # noqa: E402


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


# ------------------------------------------------------------------ clients


def bench_clients(s3: S3Server, n: int = 16, size: int = 4 << 20) -> list[dict[str, Any]]:
    import boto3
    import obstore
    from obstore.store import S3Store

    bucket = f"clients-{uuid.uuid4().hex[:8]}"
    make_bucket(s3.endpoint, bucket)
    data = os.urandom(size)
    b3 = boto3.client(
        "s3",
        endpoint_url=s3.endpoint,
        region_name="us-east-1",
        aws_access_key_id=CREDS["access_key"],
        aws_secret_access_key=CREDS["secret_key"],
    )
    ob = S3Store(
        bucket,
        endpoint=s3.endpoint,
        region="us-east-1",
        access_key_id=CREDS["access_key"],
        secret_access_key=CREDS["secret_key"],
        client_options={"allow_http": True},
        virtual_hosted_style_request=False,
    )
    rows = []
    for name, put, get in (
        (
            "boto3",
            lambda k: b3.put_object(Bucket=bucket, Key=k, Body=data),
            lambda k: b3.get_object(Bucket=bucket, Key=k)["Body"].read(),
        ),
        (
            "obstore",
            lambda k: obstore.put(ob, k, data),
            lambda k: bytes(obstore.get(ob, k).bytes()),
        ),
    ):
        for op, fn in (("put", put), ("get", get)):
            t0, c0 = time.perf_counter(), cpu()
            for i in range(n):
                out = fn(f"{name}/{i}")
                if op == "get":
                    assert len(out) == size
            dt, dc = time.perf_counter() - t0, cpu() - c0
            mb = n * size / 1e6
            rows.append(
                {"client": name, "op": op, "MB/s": mb / dt, "client CPU ms/MB": 1000 * dc / mb}
            )
    return rows


# ------------------------------------------------------------------ reads


def fill(store: Store, mb: int) -> Any:
    log = store.open_partition(1, PartitionConfig(), label="bench/0")
    payload = [os.urandom(1000) for _ in range(1000)]  # one 1 MiB SDK-sized batch
    seq = 1
    for _ in range(mb):
        [b] = validate_incoming([encode_batch(payload, producer_id="p", first_seq_no=seq)])
        log.write([b])
        seq += len(payload)
    return log


def read_all(log: Any) -> tuple[float, float, int]:
    t0, c0 = time.perf_counter(), cpu()
    pos, n = log.start_offset, 0
    while pos < log.end_offset:
        res = log.read(pos, 1 << 20)
        n += sum(len(bytes(c)) for c in res.chunks)  # one copy, as a send to the wire makes
        pos = res.next_offset
    return time.perf_counter() - t0, cpu() - c0, n


def bench_reads(s3: S3Server, mb: int) -> list[dict[str, Any]]:
    rows = []
    for backend in ("local", "s3"):
        with tempfile.TemporaryDirectory(prefix="weir-tier-bench-") as d:
            storage: RemoteStorage
            if backend == "local":
                storage = LocalDirStorage(Path(d) / "tier")
            else:
                bucket = f"reads-{uuid.uuid4().hex[:8]}"
                make_bucket(s3.endpoint, bucket)
                storage = S3Storage(s3_settings(s3, bucket))
            store = Store(Path(d) / "data", sync=False, tier_storage=storage)
            try:
                log = fill(store, mb)
                read_all(log)  # warm the local read cache
                cases = [("local (read cache warm)", read_all(log))]
                t0 = time.perf_counter()
                assert store.tier is not None
                store.tier.offload_sync(log, OffloadPolicy(threshold_bytes=0))
                offload_s = time.perf_counter() - t0
                store.tier.cache.__init__(store.tier.cache.capacity)  # type: ignore[misc]
                cases.append(("tier, cold (one GET per blob)", read_all(log)))
                cases.append(("tier, cached", read_all(log)))
                for name, (dt, dc, n) in cases:
                    rows.append(
                        {
                            "backend": backend,
                            "read": name,
                            "MB/s": n / 1e6 / dt,
                            "CPU ms/MB": 1000 * dc / (n / 1e6),
                        }
                    )
                rows.append(
                    {
                        "backend": backend,
                        "read": "offload (copy + verify + free)",
                        "MB/s": mb * 1.048 / offload_s,
                        "CPU ms/MB": float("nan"),
                    }
                )
            finally:
                store.close()
    return rows


# ------------------------------------------------------------------ spark


def tree_cpu() -> float:
    """CPU seconds of this process and every process under it (the server, Spark's JVM and
    its Python workers), reaped children included: on a shared machine the CPU a query
    costs is steadier than its wall time."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    used: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        f = stat[stat.rindex(")") + 2 :].split()
        parent[int(entry)] = int(f[1])
        used[int(entry)] = sum(int(x) for x in f[11:15])  # utime stime cutime cstime
    me, total = os.getpid(), 0
    for pid, ticks in used.items():
        p = pid
        while p > 1 and p != me:
            p = parent.get(p, 0)
        if p == me:
            total += ticks
    return total / tick


def plan_excerpt(df: Any) -> str:
    """The physical plan's scan lines (FileScan parquet, the Python source's BatchScan)."""
    text = df._jdf.queryExecution().executedPlan().toString()
    keep = [ln.strip() for ln in text.splitlines() if "Scan" in ln or "Union" in ln]
    return "\n".join(ln[:700] for ln in keep)


QUERIES = ("all columns into noop", "count + sum(length(value))")


def run_query(df: Any, query: str) -> None:
    if query == QUERIES[0]:
        df.write.format("noop").mode("overwrite").save()
    else:
        df.selectExpr("count(*) as n", "sum(length(value)) as b").collect()


# the writer options of segment objects before the codec choice (zstd on every column)
ZSTD_EVERYWHERE: dict[str, Any] = {
    "compression": "zstd",
    "use_dictionary": ["topic", "producer_id"],
    "write_statistics": ["offset", "written_at", "created_at"],
    "write_page_checksum": True,
}


def _rewrite_zstd_everywhere(paths: list[Path]) -> float:
    """Rewrite objects in place as they were written before the codec choice; their MB."""
    import pyarrow.parquet as pq

    for path in paths:
        f = pq.ParquetFile(path)
        tmp = path.with_suffix(".zstd")
        with pq.ParquetWriter(tmp, f.schema_arrow, **ZSTD_EVERYWHERE) as w:
            for i in range(f.num_row_groups):
                t = f.read_row_group(i)
                w.write_table(t, row_group_size=t.num_rows)
        del f
        tmp.replace(path)
    return sum(p.stat().st_size for p in paths) / 1e6


def _offloaded_topic(
    d: Path, messages: int, size: int, blob_mb: int, object_mb: int = 0, codec: str = ""
) -> tuple[ServerProcess, str, dict[str, Any]]:
    """A server whose blobs are at most ``blob_mb`` MiB, packed into segment objects of up
    to ``object_mb`` MiB (0: one object per blob), with ``messages`` x ``size`` B (the
    same random bytes every time, 2 partitions) written by the SDK and offloaded whole
    but the head."""
    import random

    import weir

    # compaction cuts a blob when the head reaches the low watermark (6 of 8 MiB by
    # default): raise both, in the same proportion, for larger blobs
    env = {
        "WEIR_STORAGE_MAX_BLOB_SIZE": f"{blob_mb}MiB",
        "WEIR_STORAGE_LOW_WATERMARK": f"{blob_mb * 3 // 4}MiB",
        "WEIR_TIER_OBJECT_BYTES": f"{object_mb}MiB" if object_mb else "0",
    }
    srv = ServerProcess(d / f"data-{blob_mb}-{object_mb}{codec}", env=env).start()
    topic = "bench-tier"
    t0 = time.perf_counter()
    with weir.Client(srv.endpoint) as client:
        client.create_topic(topic, partitions=2)
        rnd = random.Random(1)
        with client.writer(topic, producer_id="bench", routing="round-robin") as w:
            for i in range(messages):
                w.write(b"%012d" % i + rnd.randbytes(size - 12))
        t1 = time.perf_counter()
        client.offload_topic(topic, force=True)
        t2 = time.perf_counter()
        st = client.tier_status(topic)
    info = {
        "offloaded": sum(p.first_local_offset - p.start_offset for p in st.partitions),
        "total": sum(p.end_offset - p.start_offset for p in st.partitions),
        "objects": sum(len({s.object_key for s in p.segments}) for p in st.partitions),
        "segments": sum(len(p.segments) for p in st.partitions),
    }
    remote = sum(p.remote_bytes for p in st.partitions)
    print(
        f"max_blob_size {blob_mb} MiB, object_bytes {object_mb} MiB: wrote {info['total']} rows "
        f"({info['total'] * size / 1e6:.0f} MB) in {t1 - t0:.0f} s; offloaded {info['offloaded']} "
        f"rows ({info['segments']} blobs) into {info['objects']} objects ({remote / 1e6:.0f} MB) in {t2 - t1:.0f} s",
        flush=True,
    )
    if codec == "zstd":
        paths = sorted(
            {Path(st.store["path"]) / s.object_key for p in st.partitions for s in p.segments}
        )
        mb = _rewrite_zstd_everywhere(paths)
        print(f"  rewritten with zstd on every column (as before): {mb:.0f} MB", flush=True)
    return srv, topic, info


def bench_spark(
    messages: int,
    size: int,
    repeat: int,
    python_tier: bool = False,
    setups: tuple[tuple[int, int, str], ...] = ((8, 0, ""),),
) -> list[dict[str, Any]]:
    """A topic of ``messages`` x ``size`` B (random bytes, 2 partitions) offloaded whole
    (but the head), once per (blob MiB, object MiB, codec) in ``setups`` (a server each; object
    0: one segment object per blob, else blobs packed into objects that big), read by Spark, every frame in turn, A B C A B C...:
    `weir.spark.read` (the offloaded files as Spark's own Parquet scan; its two parts
    alone too), `format("weir")` reading the objects in Python tasks (optional), and
    `format("weir")` through the broker. Two queries each: a full scan of every column
    into `noop`, and count + sum(length(value))."""
    import weir.spark
    from tests.spark.session import make_spark
    from weir.spark import tier_files

    rows = []
    with tempfile.TemporaryDirectory(prefix="weir-tier-spark-", dir=os.environ.get("TMPDIR")) as d:
        servers: list[tuple[tuple[int, int, str], ServerProcess, str, dict[str, Any]]] = []
        spark = None
        try:
            # Spark's JVM first: launching it after this process used gRPC (the writes)
            # sometimes fails (JAVA_GATEWAY_EXITED, gRPC's poller and the fork)
            spark = make_spark(Path(d) / "spark", "tier-bench")
            for setup in setups:
                servers.append((setup, *_offloaded_topic(Path(d), messages, size, *setup)))

            def frames() -> dict[str, tuple[Callable[[], Any], int]]:
                """Each frame as a function that makes it (planned, the tail of
                weir.spark.read read): timed with the query, as a user pays it."""
                out: dict[str, tuple[Callable[[], Any], int]] = {}
                for setup, srv, topic, info in servers:
                    packed = f", packed {setup[1]} MiB" if setup[1] else ""
                    codec = ", zstd everywhere (before)" if setup[2] else ""
                    tag = f" [{setup[0]} MiB blobs{packed}, {info['objects']} objects{codec}]"
                    ep = srv.endpoint

                    def base(ep: str = ep, topic: str = topic) -> Any:
                        return (
                            spark.read.format("weir").option("endpoint", ep).option("topic", topic)
                        )

                    out["weir.spark.read (Spark's Parquet scan)" + tag] = (
                        lambda ep=ep, topic=topic: weir.spark.read(spark, endpoint=ep, topic=topic),
                        info["total"],
                    )
                    if setup == setups[0]:
                        # before: the live tail read by the Python source (its workers)
                        out["  the same, live tail by the Python source (driverTailBytes=0)"] = (
                            lambda ep=ep, topic=topic: weir.spark.read(
                                spark, endpoint=ep, topic=topic, driverTailBytes="0"
                            ),
                            info["total"],
                        )
                        # the broker's path does not depend on objects
                        out['format("weir") through the broker'] = (
                            lambda base=base: base().option("readFromTier", "false").load(),
                            info["total"],
                        )
                    # the two parts of weir.spark.read alone: what is per row, what is fixed
                    ro, native, rest = tier_files.plan({"endpoint": ep, "topic": topic})
                    out["  its Parquet scan alone (offloaded rows)" + tag] = (
                        lambda topic=topic, native=native, ro=ro: tier_files.files_frame(
                            spark, topic, native, ro
                        ),
                        info["offloaded"],
                    )
                    if setup == setups[0]:
                        out["  its live tail alone, read on the driver"] = (
                            lambda ro=ro, rest=rest: tier_files.tail_frame(spark, ro, rest),
                            info["total"] - info["offloaded"],
                        )
                        ranges = json.dumps([[t, p, s, e] for (t, p), s, e in rest])
                        out["  its live tail alone, by the Python source"] = (
                            lambda base=base, ranges=ranges: (
                                base().option("offsetRanges", ranges).load()
                            ),
                            info["total"] - info["offloaded"],
                        )
                    if python_tier and setup == setups[0]:
                        out['format("weir"), objects read in Python' + tag] = (
                            lambda base=base: base().option("readFromTier", "true").load(),
                            info["total"],
                        )
                return out

            first = next(iter(frames().values()))[0]()
            print("plan of weir.spark.read:\n" + plan_excerpt(first), flush=True)
            times: dict[tuple[str, str], list[tuple[float, float, str]]] = {}
            counts: dict[str, int] = {}
            for _ in range(repeat):
                for name, (make, n) in frames().items():
                    counts[name] = n
                    for query in QUERIES:
                        t, c = time.perf_counter(), tree_cpu()
                        run_query(make(), query)
                        took = (time.perf_counter() - t, tree_cpu() - c, loadavg1())
                        times.setdefault((name, query), []).append(took)
                        print(
                            name,
                            query,
                            f"{took[0]:.2f} s, {took[1]:.2f} CPU s, load {took[2]}",
                            flush=True,
                        )
            for (name, query), ts in times.items():
                later = ts[1:] or ts  # not the first: it pays the Python workers' imports
                n = counts[name]
                best = min(t for t, _, _ in later)
                # a process of the tree that ended between the two readings without being
                # reaped by one in it (a Python worker, seen once or twice a run) takes its
                # CPU out of the sum: such a round's CPU is < 0 or too low; a round < 0 is
                # left out of the least (all rounds are printed above and in "CPU s (runs 2..)")
                valid = [c for _, c, _ in later if c > 0] or [c for _, c, _ in later]
                cpu_s = min(valid)
                rows.append(
                    {
                        "read": name,
                        "query": query,
                        "rows": n,
                        "wall s (runs 2..)": " ".join(f"{t:.2f}" for t, _, _ in later),
                        "load": " ".join(ld for _, _, ld in later),
                        "rows/s": n / best,
                        "CPU s (runs 2..)": " ".join(f"{c:.2f}" for _, c, _ in later),
                        "CPU s": cpu_s,
                        "CPU us/row": 1e6 * cpu_s / max(1, n),
                    }
                )
        finally:
            if spark is not None:
                spark.stop()
            for _, srv, _, _ in servers:
                srv.stop()
    return rows


def loadavg1() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 1)[0]


# ------------------------------------------------------------------ offload while producing


def bench_offload(seconds: float) -> list[dict[str, Any]]:
    import weir

    rows = []
    with tempfile.TemporaryDirectory(prefix="weir-tier-produce-") as d:
        srv = ServerProcess(Path(d) / "data", env={"WEIR_TIER_INTERVAL_S": "0.2"}).start()
        try:
            with weir.Client(srv.endpoint) as client:
                for label, policy in (("no offload", None), ("offloading", 1)):
                    topic = f"produce-{uuid.uuid4().hex[:6]}"
                    client.create_topic(topic, partitions=1)
                    if policy is not None:
                        client.alter_topic(topic, policies={"offload_threshold_bytes": policy})
                    body = os.urandom(1000)
                    n = 0
                    t0 = time.perf_counter()
                    with client.writer(topic, producer_id="p") as w:
                        while time.perf_counter() - t0 < seconds:
                            for _ in range(1000):
                                w.write(body)
                            n += 1000
                    dt = time.perf_counter() - t0
                    st = client.tier_status(topic).partitions[0]
                    rows.append(
                        {
                            "case": label,
                            "MB/s produced": n * 1000 / 1e6 / dt,
                            "MB offloaded": st.remote_bytes / 1e6,
                        }
                    )
        finally:
            srv.stop()
    base = rows[0]["MB/s produced"]
    for r in rows:
        r["drop %"] = 100 * (1 - r["MB/s produced"] / base)
    return rows


def table(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}  (loadavg {loadavg()})")
    if not rows:
        return
    cols = list(rows[0])
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(f"{r[c]:.1f}" if isinstance(r[c], float) else str(r[c]) for c in cols))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="clients,reads,spark,offload")
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--spark-messages", type=int, default=2_000_000)
    ap.add_argument("--spark-size", type=int, default=500)
    ap.add_argument("--spark-repeat", type=int, default=3)
    ap.add_argument("--spark-python-tier", action="store_true")
    ap.add_argument(
        "--spark-blob-mb",
        default="8",
        help="storage.max_blob_size (MiB; low_watermark 3/4 of it) of the servers to compare, "
        "comma-separated: one segment object per blob, so this sets the size of the files "
        "Spark scans",
    )
    ap.add_argument(
        "--spark-setups",
        help="servers to compare as blobMiB:objectMiB, comma-separated (e.g. 8:0,8:128: "
        "default blobs one object each, then packed into objects of up to 128 MiB); "
        "overrides --spark-blob-mb",
    )
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    only = set(a.only.split(","))
    out: dict[str, Any] = {}
    s3 = S3Server().start() if only & {"clients", "reads"} else None
    try:
        if "clients" in only and s3 is not None:
            out["clients"] = bench_clients(s3)
            table("S3 clients, 4 MiB objects (moto server on loopback)", out["clients"])
        if "reads" in only and s3 is not None:
            out["reads"] = bench_reads(s3, a.mb)
            table(f"reads of a {a.mb} MB partition (1 MiB blobs)", out["reads"])
    finally:
        if s3 is not None:
            s3.stop()
    if "spark" in only:
        spec = a.spark_setups or a.spark_blob_mb
        setups = tuple(
            (int(f[0]), int(f[1]) if len(f) > 1 and f[1] else 0, f[2] if len(f) > 2 else "")
            for f in (x.split(":") for x in spec.split(","))
        )
        out["spark"] = bench_spark(
            a.spark_messages,
            a.spark_size,
            a.spark_repeat,
            a.spark_python_tier,
            setups,
        )
        table("Spark over an offloaded topic", out["spark"])
    if "offload" in only:
        out["offload"] = bench_offload(a.seconds)
        table("producing while offloading", out["offload"])
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
