"""One Spark task's read: an offset range of one partition, fetched and turned into Arrow.

Reads use the native protocol's offset-range read, with no consumer: the
range comes from Spark (its checkpoint, for a stream), so a replayed task
reads exactly the same records again. A range the broker no longer has in
full (retention removed its front) is data loss: by default the task fails
with a message that says so; with failOnDataLoss=false it logs and skips.
With assembleChunks each chunked message is one row, at its last chunk's offset, in
the range holding that chunk (`weir.client.chunks.RangeAssembler`); the rows are
then built from decoded messages, not straight from the stored batches.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from weir.client import Client
from weir.errors import DataLossError
from weir.spark.arrow import messages_to_arrow, stored_to_arrow

log = logging.getLogger("weir.spark")


@dataclass(frozen=True)
class TopicRange(InputPartition):
    """Offsets ``[start, end)`` of one partition: what one Spark task reads."""

    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class ScanSettings:
    """What an executor needs besides the range (pickled with the reader)."""

    endpoint: str
    fail_on_data_loss: bool
    max_bytes_per_fetch: int
    read_committed: bool = False
    compacted: bool = False  # readCompacted: offsets a compacted view skipped are no loss
    assemble_chunks: bool = False  # assembleChunks: chunked messages whole (not raw chunks)


def data_loss_message(topic: str, partition: int, lo: int, hi: int, why: str) -> str:
    return (
        f"weir: offsets {lo}..{hi - 1} of topic {topic!r} partition {partition} are gone "
        f"({why}) before this query read them: {hi - lo} records lost. Set the option "
        "failOnDataLoss=false to skip them and go on (a warning is logged), or give the "
        "topic a longer retention (or an important consumer)."
    )


def lost(settings: ScanSettings, topic: str, partition: int, lo: int, hi: int, why: str) -> None:
    """Apply the failOnDataLoss policy to offsets ``[lo, hi)`` that cannot be read."""
    msg = data_loss_message(topic, partition, lo, hi, why)
    if settings.fail_on_data_loss:
        raise DataLossError(msg)
    log.warning("%s Skipping them (failOnDataLoss=false).", msg.split(" Set the option")[0])


def read_range(settings: ScanSettings, r: TopicRange) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records in ``r``, in offset order."""
    if r.end <= r.start:
        return
    pos = r.start
    end_offset = -1
    with Client(settings.endpoint) as client:
        for chunk in client.read_range(
            r.topic,
            r.partition,
            r.start,
            r.end,
            max_bytes=settings.max_bytes_per_fetch,
            read_committed=settings.read_committed,
            compacted=settings.compacted,
            assemble_chunks=settings.assemble_chunks,
        ):
            # below the start: retention removed them (a compacted view skips offsets, and
            # transaction markers or aborted messages may be left out: no loss)
            if chunk.start_offset > pos and not settings.compacted:
                hi = min(chunk.start_offset, r.end)
                why = f"retention moved the partition's start to {chunk.start_offset}"
                lost(settings, r.topic, r.partition, pos, hi, why)
                pos = hi
            # (a first batch above pos otherwise: transaction markers or aborted messages
            # were left out before it, nothing is lost)
            if chunk.chunks and pos < r.end:
                batch = (
                    messages_to_arrow(r.topic, r.partition, chunk.messages(pos))
                    if settings.assemble_chunks
                    else stored_to_arrow(r.topic, r.partition, chunk.chunks, pos, r.end)
                )
                if batch is not None:
                    yield batch
                pos = max(pos, min(chunk.next_offset, r.end))
            elif not chunk.chunks:  # offsets left out (transaction markers, aborted messages)
                pos = max(pos, min(chunk.next_offset, r.end))
            end_offset = chunk.end_offset
            # no early exit: the server ends the stream after the range, and a stream read
            # to its end closes cleanly (an abandoned one leaves gRPC callbacks behind)
    if pos < r.end and not settings.compacted:
        why = f"the partition now ends at offset {end_offset}: was the topic dropped and created again?"
        lost(settings, r.topic, r.partition, pos, r.end, why)
