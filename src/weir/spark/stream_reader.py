"""`spark.readStream.format("weir")`: micro-batches of offset ranges, Spark's checkpoint as truth.

Spark keeps one instance of this reader alive on the driver for a query run
(initialOffset, latestOffset, partitions, commit) and pickles another to the
executors for `read`, so `read` depends only on its range. A micro-batch is
fully described by its (start, end) offsets, which Spark writes to its offset
log before running it: a replayed batch reads exactly the same records.

Admission control: `latestOffset(start, limit)` caps the next end at
maxOffsetsPerTrigger offsets, shared between partitions in proportion to
their backlog. For ``trigger(availableNow=True)`` the end offsets at the start
of the run are the target, reached in as many capped batches as it takes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from weir.client import Client
from weir.errors import DataLossError
from weir.spark.offsets import (
    Bounds,
    TopicPartition,
    cap,
    fetch_bounds,
    from_json,
    offsets_for_time,
    resolve,
    split,
    to_json,
)
from weir.spark.options import ReaderOptions
from weir.spark.scan import ScanSettings, TopicRange, data_loss_message, read_range
from weir.spark.tier_scan import TierRange, plan_tier, read_tier_range

log = logging.getLogger("weir.spark")

JsonOffsets = dict[str, dict[str, int]]


class WeirStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{topic: {partition: next offset}}``; see the module docstring."""

    def __init__(self, options: ReaderOptions) -> None:
        self.options = options
        self.settings = ScanSettings(
            options.endpoint,
            options.fail_on_data_loss,
            options.max_bytes_per_fetch,
            options.read_committed,
            options.compacted,
            options.assemble_chunks,
        )
        self._target: dict[TopicPartition, int] | None = None
        self._latest: dict[TopicPartition, int] | None = None
        self._committed: dict[TopicPartition, int] = {}
        self._client: Client | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None  # a live connection does not travel to executors
        return state

    def _bounds(self) -> dict[TopicPartition, Bounds]:
        if self._client is None:
            self._client = Client(self.options.endpoint)
        return fetch_bounds(self._client, self.options.topics, self.options.read_committed)

    # ------------------------------------------------------------------ offsets (driver)

    def initialOffset(self) -> JsonOffsets:
        """Where a new query starts: startingOffsets or startingTimestamp (default latest)."""
        o = self.options
        bounds = self._bounds()
        if o.starting_timestamp is not None:
            assert self._client is not None
            return to_json(offsets_for_time(self._client, o.topics, o.starting_timestamp))
        return to_json(resolve(o.starting, bounds, "startingOffsets", True))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """availableNow: read up to today's end offsets, in capped batches, then stop."""
        self._target = {tp: b.end for tp, b in self._bounds().items()}

    def latestOffset(self, start: JsonOffsets, limit: ReadLimit) -> JsonOffsets:
        """The end of the next micro-batch: what is there now, capped by ``limit``."""
        begin = from_json(start)
        # Spark asks for the next end only once every batch up to ``start`` is done (a batch
        # cut short by a crash is re-run from the offset log first), so ``start`` is processed
        self._commit_consumer(begin)
        bounds = self._bounds()
        self._latest = {tp: b.end for tp, b in bounds.items()}
        effective: dict[TopicPartition, int] = {}
        end: dict[TopicPartition, int] = {}
        for tp, b in bounds.items():
            if tp not in begin:
                # a partition added since: the first batch that sees it only notes where it
                # starts, so that a replay of any batch reads the same (empty) range
                effective[tp] = end[tp] = b.start
                continue
            s = begin[tp]
            if s > b.end:
                self._lost(
                    f"weir: topic {tp[0]!r} partition {tp[1]} now ends at offset {b.end}, before "
                    f"offset {s} this query had reached: was the topic dropped and created again? "
                    "Records written to it since may be missed. Set the option "
                    f"failOnDataLoss=false to go on from offset {b.end} (a warning is logged), "
                    "or start the query with a new checkpoint."
                )
                effective[tp] = end[tp] = b.end
                continue
            if s < b.start:
                why = f"retention moved the partition's start to {b.start}"
                self._lost(data_loss_message(tp[0], tp[1], s, b.start, why))
                s = b.start
            effective[tp] = s
            target = b.end if self._target is None else self._target.get(tp, s)
            end[tp] = max(s, min(target, b.end))
        if isinstance(limit, ReadMaxRows):
            end = cap(effective, end, limit.max_rows)
        for tp, s in begin.items():
            end.setdefault(tp, s)  # partitions the broker no longer lists: stay put
        out = to_json(end)
        return start if out == start else out

    def _lost(self, msg: str) -> None:
        if self.options.fail_on_data_loss:
            raise DataLossError(msg)
        log.warning("%s (failOnDataLoss=false: going on)", msg.split(" Set the option")[0])

    def reportLatestOffset(self) -> JsonOffsets | None:
        return None if self._latest is None else to_json(self._latest)

    def partitions(self, start: JsonOffsets, end: JsonOffsets) -> Sequence[InputPartition]:
        """The ranges of one micro-batch: a function of (start, end) only, so replays match."""
        s, e = from_json(start), from_json(end)
        ranges = [(tp, s.get(tp, e[tp]), e[tp]) for tp in sorted(e)]
        tier: list[TierRange] = []
        if self.options.tier.enabled and any(b > a for _, a, b in ranges):
            # far behind: what is offloaded is read from the object store (same records)
            if self._client is None:
                self._client = Client(self.options.endpoint)
            tier, ranges = plan_tier(self._client, ranges, self.options.tier)
        return [
            *tier,
            *(
                TopicRange(t, p, a, b)
                for (t, p), a, b in split(ranges, self.options.min_partitions)
            ),
        ]

    def commit(self, end: JsonOffsets) -> None:
        """Spark finished the batch ending at ``end``."""
        self._commit_consumer(from_json(end))

    def _commit_consumer(self, offsets: dict[TopicPartition, int]) -> None:
        """Show processed offsets as the consumer's position (option consumer): for weir tools
        and lag only; Spark's checkpoint stays the truth, so a failure here is only logged."""
        consumer = self.options.consumer
        if consumer is None or offsets == self._committed:
            return
        if self._client is None:
            self._client = Client(self.options.endpoint)
        ok = True
        for (topic, partition), offset in sorted(offsets.items()):
            if self._committed.get((topic, partition)) == offset:
                continue
            try:
                self._client.commit_offset(topic, partition, consumer, offset)
            except Exception as exc:
                ok = False
                log.warning(
                    "weir: committing %s/%d for consumer %s failed: %s",
                    topic,
                    partition,
                    consumer,
                    exc,
                )
        if ok:
            self._committed = dict(offsets)

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # ------------------------------------------------------------------ executors

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, TierRange):
            yield from read_tier_range(self.settings, self.options.tier, partition)
        elif isinstance(partition, TopicRange):
            yield from read_range(self.settings, partition)
