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
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from weir.client import Client
from weir.client.connection import Backoff
from weir.errors import DataLossError, WeirError
from weir.spark.arrow import messages_to_arrow, stored_to_arrow
from weir.spark.offsets import OWNER_WAIT_S

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


@dataclass
class _Progress:
    """Where a task's read of its range has got to (it resumes there after a failure)."""

    pos: int
    end_offset: int = -1


def read_range(settings: ScanSettings, r: TopicRange) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records in ``r``, in offset order.

    A retryable failure (a cluster's partition moving to another broker: its owner
    died or gave it up) is waited out, up to OWNER_WAIT_S without progress, and the
    read goes on from the first offset not yet returned, at the partition's owner
    then: every record of the range comes back once."""
    if r.end <= r.start:
        return
    at = _Progress(r.start)
    backoff = Backoff(cap=2.0)
    deadline = 0.0
    last = -1
    with Client(settings.endpoint) as client:
        while True:
            try:
                yield from _read_from(settings, client, r, at)
                break
            except WeirError as err:
                if not err.retryable:
                    raise
                now = time.monotonic()
                if at.pos != last:  # progress since the last failure: a new wait
                    last, deadline = at.pos, now + OWNER_WAIT_S
                    backoff.reset()
                if now >= deadline:
                    raise
                log.info(
                    "reading %s/%d from offset %d: %s (retrying)", r.topic, r.partition, at.pos, err
                )
                time.sleep(backoff.next_delay())
    if at.pos < r.end and not settings.compacted:
        why = f"the partition now ends at offset {at.end_offset}: was the topic dropped and created again?"
        lost(settings, r.topic, r.partition, at.pos, r.end, why)


def _read_from(
    settings: ScanSettings, client: Client, r: TopicRange, at: _Progress
) -> Iterator[pa.RecordBatch]:
    """The records of ``r`` from ``at.pos`` on, moving ``at`` as they are returned."""
    if at.pos >= r.end:
        return
    for chunk in client.read_range(
        r.topic,
        r.partition,
        at.pos,
        r.end,
        max_bytes=settings.max_bytes_per_fetch,
        read_committed=settings.read_committed,
        compacted=settings.compacted,
        assemble_chunks=settings.assemble_chunks,
    ):
        pos = at.pos
        # below the start: retention removed them (a compacted view skips offsets, and
        # transaction markers or aborted messages may be left out: no loss)
        if chunk.start_offset > pos and not settings.compacted:
            hi = min(chunk.start_offset, r.end)
            why = f"retention moved the partition's start to {chunk.start_offset}"
            lost(settings, r.topic, r.partition, pos, hi, why)
            pos = at.pos = hi
        # (a first batch above pos otherwise: transaction markers or aborted messages
        # were left out before it, nothing is lost)
        if chunk.chunks and pos < r.end:
            batch = (
                messages_to_arrow(r.topic, r.partition, chunk.messages(pos))
                if settings.assemble_chunks
                else stored_to_arrow(r.topic, r.partition, chunk.chunks, pos, r.end)
            )
            at.pos = max(pos, min(chunk.next_offset, r.end))
            at.end_offset = chunk.end_offset
            if batch is not None:
                yield batch
        else:
            if not chunk.chunks:  # offsets left out (transaction markers, aborted messages)
                at.pos = max(pos, min(chunk.next_offset, r.end))
            at.end_offset = chunk.end_offset
        # no early exit: the server ends the stream after the range, and a stream read
        # to its end closes cleanly (an abandoned one leaves gRPC callbacks behind)
