"""`spark.read.format("weir")`: a bounded read of offset ranges, with filter pushdown.

Planning (pushFilters, partitions) runs on the driver and resolves the
ranges once; `read` runs in executors on a pickled copy of this reader.

With the option pushFilters=true, filters on ``partition`` and ``offset`` are
applied exactly by narrowing the ranges, and filters on ``written_at`` narrow
them through the broker's time index (written_at never decreases within a
partition) while Spark checks them again. It is off by default because Spark
4.3.0 keeps the read planned for one query on the DataFrame's relation and
reuses it for the DataFrame's later queries that push no filter: a filtered
query would silently narrow every later query of the same DataFrame (fixed
upstream, where the plan is kept per scan).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
)

from weir.client import Client
from weir.spark.offsets import fetch_bounds, offsets_for_time, resolve, split
from weir.spark.options import ReaderOptions
from weir.spark.scan import ScanSettings, TopicRange, read_range
from weir.spark.tier_scan import TierRange, plan_tier, read_tier_range

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_BIG = 1 << 62


def _micros(value: Any) -> int | None:
    """µs since the epoch of a pushed timestamp literal (None if it has no time zone)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return (value - _EPOCH) // dt.timedelta(microseconds=1)
    return None


class WeirBatchReader(DataSourceReader):
    """Reads ``[startingOffsets, endingOffsets)`` of every partition of the topics."""

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
        self.partition_set: set[int] | None = None
        self.partition_excluded: set[int] = set()
        self.offset_lo = 0
        self.offset_hi = _BIG  # exclusive
        self.written_lo_ms: int | None = None  # first ms wanted
        self.written_hi_ms: int | None = None  # first ms not wanted

    # ------------------------------------------------------------------ planning

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        with Client(o.endpoint) as client:
            ranges = self.resolve_ranges(client)
            # offloaded offsets: read from the object store, the rest through the broker
            tier, rest = plan_tier(client, ranges, o.tier)
        return [
            *tier,
            *(TopicRange(t, p, s, e) for (t, p), s, e in split(rest, o.min_partitions)),
        ]

    def resolve_ranges(self, client: Client) -> list[tuple[tuple[str, int], int, int]]:
        """The offsets ``[start, end)`` of each partition this read covers, as they are now."""
        o = self.options
        if o.offset_ranges is not None:
            given = [((t, p), s, e) for t, p, s, e in o.offset_ranges]
            return [
                (tp, max(s, self.offset_lo), min(e, self.offset_hi))
                for tp, s, e in given
                if (self.partition_set is None or tp[1] in self.partition_set)
                and tp[1] not in self.partition_excluded
            ]
        bounds = fetch_bounds(client, o.topics, o.read_committed)
        if o.starting_timestamp is not None:
            starts = offsets_for_time(client, o.topics, o.starting_timestamp)
        else:
            starts = resolve(o.starting, bounds, "startingOffsets", True)
        if o.ending_timestamp is not None:
            ends = offsets_for_time(client, o.topics, o.ending_timestamp)
        else:
            ends = resolve(o.ending, bounds, "endingOffsets", False)
        if self.written_lo_ms is not None:
            lo = offsets_for_time(client, o.topics, self.written_lo_ms)
            starts = {tp: max(s, lo[tp]) for tp, s in starts.items()}
        if self.written_hi_ms is not None:
            hi = offsets_for_time(client, o.topics, self.written_hi_ms)
            ends = {tp: min(e, hi[tp]) for tp, e in ends.items()}
        return self._ranges(bounds, starts, ends)

    def _ranges(
        self, bounds: Iterable[tuple[str, int]], starts: dict[Any, int], ends: dict[Any, int]
    ) -> list[tuple[tuple[str, int], int, int]]:
        ranges = []
        for tp in bounds:
            p = tp[1]
            if self.partition_set is not None and p not in self.partition_set:
                continue
            if p in self.partition_excluded:
                continue
            s = max(starts[tp], self.offset_lo)
            e = min(ends[tp], self.offset_hi)
            ranges.append((tp, s, e))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, TierRange):
            yield from read_tier_range(self.settings, self.options.tier, partition)
        elif isinstance(partition, TopicRange):  # Spark reads one empty placeholder if none
            yield from read_range(self.settings, partition)


class WeirFilteringBatchReader(WeirBatchReader):
    """The batch reader with filter pushdown (option pushFilters=true; see the module docstring)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Yield the filters Spark must still apply; keep the ones the ranges express exactly."""
        for f in filters:
            if not self._push(f):
                yield f

    def _push(self, f: Filter) -> bool:
        col = getattr(f, "attribute", None)
        if isinstance(f, Not):
            child = f.child
            if isinstance(child, EqualTo) and child.attribute == ("partition",):
                self.partition_excluded.add(int(child.value))
                return True
            return False
        if col == ("partition",):
            return self._push_partition(f)
        if col == ("offset",):
            return self._push_offset(f)
        if col == ("written_at",):
            self._push_written(f)
            return False  # narrowed, and checked again by Spark
        return False

    def _only(self, parts: Iterable[int]) -> None:
        s = set(parts)
        self.partition_set = s if self.partition_set is None else self.partition_set & s

    def _push_partition(self, f: Filter) -> bool:
        if isinstance(f, IsNotNull):
            return True
        if isinstance(f, EqualTo | EqualNullSafe) and isinstance(f.value, int):
            self._only([f.value])
            return True
        if isinstance(f, In) and all(isinstance(v, int) for v in f.value):
            self._only(f.value)
            return True
        return False

    def _push_offset(self, f: Filter) -> bool:
        if isinstance(f, IsNotNull):
            return True
        v = getattr(f, "value", None)
        if not isinstance(v, int) or isinstance(v, bool):
            return False
        if isinstance(f, EqualTo | EqualNullSafe):
            self.offset_lo, self.offset_hi = max(self.offset_lo, v), min(self.offset_hi, v + 1)
        elif isinstance(f, GreaterThan):
            self.offset_lo = max(self.offset_lo, v + 1)
        elif isinstance(f, GreaterThanOrEqual):
            self.offset_lo = max(self.offset_lo, v)
        elif isinstance(f, LessThan):
            self.offset_hi = min(self.offset_hi, v)
        elif isinstance(f, LessThanOrEqual):
            self.offset_hi = min(self.offset_hi, v + 1)
        else:
            return False
        return True

    def _push_written(self, f: Filter) -> None:
        us = _micros(getattr(f, "value", None))
        if us is None:
            return
        floor_ms = us // 1000
        ceil_ms = -(-us // 1000)
        lo = hi = None
        if isinstance(f, GreaterThan):
            lo = floor_ms + 1
        elif isinstance(f, GreaterThanOrEqual):
            lo = ceil_ms
        elif isinstance(f, LessThan):
            hi = ceil_ms
        elif isinstance(f, LessThanOrEqual):
            hi = floor_ms + 1
        elif isinstance(f, EqualTo | EqualNullSafe):
            lo, hi = ceil_ms, floor_ms + 1
        if lo is not None:
            self.written_lo_ms = lo if self.written_lo_ms is None else max(self.written_lo_ms, lo)
        if hi is not None:
            self.written_hi_ms = hi if self.written_hi_ms is None else min(self.written_hi_ms, hi)
