"""`weir.spark.read`: a batch DataFrame whose offloaded part is Spark's own Parquet scan.

A Python data source cannot hand Spark files: every row of `format("weir")` goes
through a Python worker and Arrow into the JVM, whether a `TierRange` task reads it
from the object store or a `TopicRange` task from the broker. Offloaded segments are
Parquet files with the source's columns, so when the store is a directory the
executors can read (the local back end), Spark can scan them itself: vectorised, in
the JVM, no Python and no broker on the path.

`read` plans the query once on the driver (the same offsets `format("weir")` would
read, cut by `plan_tier`), then builds one DataFrame of two parts:

- the files of the offloaded ranges, ``spark.read.parquet(...)``: the objects read
  whole as they are, the others (a planned interval that starts or ends inside an
  object) filtered to the planned offsets of each partition (the files of one
  partition are disjoint, so a filter on ``partition`` and ``offset`` keeps exactly
  the planned rows);
- the rest (the live tail, transactional segments, and every offloaded range of an
  S3 store, which Spark here has no connector for): when it is all live tail of at
  most ``driverTailBytes`` stored bytes (32 MiB by default), read right here on the
  driver through the broker and handed to Spark as an Arrow table, so that the query
  runs no Python worker at all (a data source read costs two planning workers and a
  worker per task, each importing the SDK when fresh: 0.3-2 CPU s a query, measured);
  otherwise through `format("weir")` with the option ``offsetRanges``: exactly the
  ranges planned, nothing re-resolved;

and unions them. Each offset is in exactly one part. The physical plan shows a
``FileScan parquet`` for the first. Damaged files: segments carry Parquet page
checksums and the scan verifies them (``parquet.page.verify-checksum.enabled``),
so a flipped byte fails the query rather than being served. A file retention
deleted after planning fails the query too (failOnDataLoss; with
failOnDataLoss=false it is skipped, as `ignoreMissingFiles`).
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from weir.client import Client
from weir.client.tier_admin import TierStatus
from weir.errors import BadRequestError
from weir.spark.batch_reader import WeirBatchReader
from weir.spark.options import ReaderOptions
from weir.spark.scan import TopicRange, read_range
from weir.spark.schema import ARROW_SCHEMA, SCHEMA
from weir.spark.tier_scan import Range, TierRange, plan_tier

# a Parquet reader option Spark passes on to parquet-mr through the scan's Hadoop conf
VERIFY_CHECKSUMS = "parquet.page.verify-checksum.enabled"


def _native(r: TierRange) -> bool:
    return dict(r.store).get("backend") == "local"


def _intervals(ranges: Sequence[TierRange]) -> dict[int, list[tuple[int, int]]]:
    """Per partition, the planned offsets as few ``[start, end)`` intervals."""
    out: dict[int, list[tuple[int, int]]] = {}
    for r in sorted(ranges, key=lambda r: (r.partition, r.start)):
        iv = out.setdefault(r.partition, [])
        if iv and iv[-1][1] == r.start:
            iv[-1] = (iv[-1][0], r.end)
        else:
            iv.append((r.start, r.end))
    return out


def plan(
    options: Mapping[str, str],
) -> tuple[ReaderOptions, list[TierRange], list[Range]]:
    """The query's ranges, cut once: offloaded ranges Spark scans natively, and the
    ranges the `weir` source reads (through the broker or, for S3, the store)."""
    ro, native, rest, _ = _plan(options)
    return ro, native, rest


def _plan(
    options: Mapping[str, str],
) -> tuple[ReaderOptions, list[TierRange], list[Range], int | None]:
    """`plan`, and the rest's stored bytes if it is all in the partitions' local part."""
    ro = ReaderOptions.parse({k.lower(): str(v) for k, v in options.items()}, streaming=False)
    reader = WeirBatchReader(ro)
    statuses: dict[str, TierStatus] = {}
    with Client(ro.endpoint) as client:
        ranges = reader.resolve_ranges(client)
        tier, rest = plan_tier(client, ranges, ro.tier, statuses)
    native = [r for r in tier if _native(r)]
    rest = rest + [((r.topic, r.partition), r.start, r.end) for r in tier if not _native(r)]
    rest = [(tp, s, e) for tp, s, e in rest if s < e]
    return ro, native, rest, _local_bytes(rest, statuses)


def _local_bytes(rest: Sequence[Range], statuses: Mapping[str, TierStatus]) -> int | None:
    """About how many bytes ``rest`` holds, if every range of it is in the local part of its
    partition (the live tail; pro rata of the partition's stored bytes), else None (an S3
    store's offloaded range, a transactional segment, a cluster's partition: not sized)."""
    total = 0
    for (topic, p), s, e in rest:
        st = statuses.get(topic)
        part = next((x for x in st.partitions if x.partition == p), None) if st else None
        if part is None or s < part.first_local_offset:
            return None
        local = max(1, part.end_offset - part.first_local_offset)
        total += -(-part.local_bytes * (e - s) // local)
    return total


def tail_frame(spark: Any, ro: ReaderOptions, rest: Sequence[Range]) -> Any:
    """The rows of ``rest`` (small: the live tail) read here, on the driver, through the
    broker, as a DataFrame of them: no Python worker, no data source planning.

    The same rows the Python source would read (its read, `read_range`, with the query's
    settings: failOnDataLoss applies), read now rather than when an action runs; the
    DataFrame keeps them."""
    import pyarrow as pa

    settings = WeirBatchReader(ro).settings
    batches = [b for (t, p), s, e in rest for b in read_range(settings, TopicRange(t, p, s, e))]
    table = pa.Table.from_batches(batches, schema=ARROW_SCHEMA)
    return spark.createDataFrame(table, schema=SCHEMA)


def files_frame(spark: Any, topic: str, ranges: Sequence[TierRange], ro: ReaderOptions) -> Any:
    """The rows of ``ranges`` (offloaded ranges of ``topic``, local store) as Spark's own
    Parquet scan of their objects.

    An object read whole (every offset it holds is planned: all of them but at most the
    two at each end of a planned interval) is scanned without a filter; the others with
    the offset filter of their partitions. A filter costs per file (Spark serialises it
    into each file's reader and checks the row-group statistics) and per row: measured,
    about a sixth of the scan's CPU on 500 B rows."""
    from pyspark.sql import functions as F

    def scan(part: Sequence[TierRange]) -> Any:
        paths = sorted({str(Path(dict(r.store)["path"]) / r.object_key) for r in part})
        return (
            spark.read.schema(SCHEMA)
            .option(VERIFY_CHECKSUMS, "true")
            .option("ignoreMissingFiles", "false" if ro.fail_on_data_loss else "true")
            .parquet(*paths)
        )

    whole = [r for r in ranges if r.whole]
    cut = [r for r in ranges if not r.whole]
    parts = [scan(whole)] if whole else []
    if cut:
        conds = [
            (F.col("partition") == p) & (F.col("offset") >= lo) & (F.col("offset") < hi)
            for p, ivs in sorted(_intervals(cut).items())
            for lo, hi in ivs
        ]
        parts.append(scan(cut).where(functools.reduce(operator.or_, conds)))
    df = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    # the topic as the query names it (one column of the file's, the same value)
    return df.select(*(F.lit(topic).alias("topic") if n == "topic" else n for n in SCHEMA.names))


def read(spark: Any, options: Mapping[str, str] | None = None, **kw: str) -> Any:
    """A batch DataFrame of ``format("weir")`` with the same options, whose offloaded
    offsets (local-directory store) Spark reads with its own Parquet scan.

    ``weir.spark.read(spark, endpoint="127.0.0.1:2136", topic="orders")``
    """
    opts = {**(options or {}), **kw}
    budget = _driver_tail_bytes(opts)
    ro, native, rest, size = _plan({k: v for k, v in opts.items() if k.lower() != _BUDGET})
    parts = [
        files_frame(spark, t, [r for r in native if r.topic == t], ro)
        for t in sorted({r.topic for r in native})
    ]
    if rest and size is not None and 0 < size <= budget:
        parts.append(tail_frame(spark, ro, rest))
    elif rest or not parts:
        broker = {k: v for k, v in opts.items() if k.lower() not in _RESOLVED}
        broker["offsetRanges"] = json.dumps([[t, p, s, e] for (t, p), s, e in rest])
        parts.append(spark.read.format("weir").options(**broker).load())
    df = parts[0]
    for other in parts[1:]:
        df = df.unionByName(other)
    return df


DEFAULT_DRIVER_TAIL_BYTES = 32 << 20
_BUDGET = "drivertailbytes"


def _driver_tail_bytes(opts: Mapping[str, Any]) -> int:
    """The option driverTailBytes: the most stored bytes of live tail `read` reads itself."""
    raw = next((str(v) for k, v in opts.items() if k.lower() == _BUDGET), None)
    if raw is None:
        return DEFAULT_DRIVER_TAIL_BYTES
    try:
        n = int(raw.strip())
    except ValueError:
        raise BadRequestError(f"option driverTailBytes: expected an integer, got {raw!r}") from None
    if n < 0:
        raise BadRequestError(f"option driverTailBytes: must be at least 0, got {n}")
    return n


# options `read` resolves itself (the broker part gets the resolved ranges instead)
_RESOLVED = {
    _BUDGET,
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "offsetranges",
}
