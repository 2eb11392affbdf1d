"""The streaming pipeline the streaming tests run: topic -> transformation -> topic.

Each output record is ``{source partition}:{source offset}:{source value}``
under the source key, so a test can tell exactly which input it came from.
Run as a program it is the query of the SIGKILL test, in a process (and a
Spark) of its own:

    python -m tests.spark.stream_job WORK ENDPOINT SOURCE SINK CHECKPOINT MAX_PER_TRIGGER BLOCK_BATCH

With BLOCK_BATCH >= 0 the task of Spark partition 0 of that micro-batch hands
BLOCK_AFTER_ROWS rows on, prints BLOCKED_LINE to stderr and stops there, so the
test can kill the query in the middle of a batch whose rows are partly written.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

BLOCKED_LINE = "weir-test: task blocked mid-batch"
BLOCK_TIMEOUT_S = 120.0
BLOCK_AFTER_ROWS = 30  # more than one Arrow batch (maxRecordsPerBatch=20 in the child)


def _block_hook(block_batch: int) -> Any:
    def hook(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        tc = TaskContext.get()
        bid = int(tc.getLocalProperty("streaming.sql.batchId") or -1) if tc else -1
        block = bid == block_batch and tc is not None and tc.partitionId() == 0
        handed_on = 0
        for b in batches:
            yield b
            handed_on += b.num_rows
            if block and handed_on >= BLOCK_AFTER_ROWS:
                block = False
                print(BLOCKED_LINE, file=sys.stderr, flush=True)
                threading.Event().wait(BLOCK_TIMEOUT_S)  # until the test kills us

    return hook


def start_query(
    spark: Any,
    endpoint: str,
    source: str,
    sink: str,
    checkpoint: str,
    max_per_trigger: int | None,
    block_batch: int = -1,
    **source_options: str,
) -> Any:
    """Start the pipeline with trigger(availableNow=True); returns the StreamingQuery."""
    from pyspark import cloudpickle
    from pyspark.sql import functions as F

    if __name__ != "__main__":  # workers cannot import tests.*: ship the hook by value
        cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    r = (
        spark.readStream.format("weir")
        .option("endpoint", endpoint)
        .option("topic", source)
        .option("startingOffsets", "earliest")
    )
    if max_per_trigger:
        r = r.option("maxOffsetsPerTrigger", str(max_per_trigger))
    for k, v in source_options.items():
        r = r.option(k, v)
    out = r.load().select(
        "key",
        F.concat_ws(
            ":",
            F.col("partition").cast("string"),
            F.col("offset").cast("string"),
            F.col("value").cast("string"),
        ).alias("value"),
    )
    out = out.mapInArrow(_block_hook(block_batch), out.schema)  # same plan in every run
    w = (
        out.writeStream.format("weir")
        .option("endpoint", endpoint)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
    )
    if block_batch >= 0:  # the rows handed on before the block go out at once, ungathered
        w = w.option("gatherBytes", "0")
    return w.trigger(availableNow=True).start()


def main(argv: list[str]) -> int:
    work, endpoint, source, sink, checkpoint, max_per_trigger, block_batch = argv
    from tests.spark.session import make_spark

    # small Arrow batches, so rows handed on before the block reach the sink at once
    spark = make_spark(
        Path(work), "weir-stream-job", {"spark.sql.execution.arrow.maxRecordsPerBatch": "20"}
    )
    q = start_query(
        spark, endpoint, source, sink, checkpoint, int(max_per_trigger), int(block_batch)
    )
    done = q.awaitTermination(300)
    spark.stop()
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
