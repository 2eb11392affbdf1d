"""Reading offloaded offsets straight from the object store, with no broker on the path.

On the driver, `plan_tier` asks the broker once per topic where each partition's data
is (`tier_status`): the offsets of a query's range that lie in offloaded segments
become `TierRange` tasks, one per segment object (the consecutive blobs of a packed
object are one task), and only the rest (the live tail,
or anything not offloaded) stays a `TopicRange` read through the broker. Together
they cover each range exactly once: segments are disjoint and the cut is by offset.
A segment that holds transaction markers or messages of aborted transactions
(``transactional``) is read through the broker too, which leaves them out.

In an executor, a `TierRange` fetches its object in one request from the store the
broker named (a local directory, or S3 with credentials from the query's options or
the executor's own AWS chain: the broker never hands out secrets), checks the whole
object's size and CRC32C against what the broker recorded, and reads the rows of its
offsets from the Parquet file: the columns are already the source's schema. An
object retention deleted after planning is read through the broker instead (which
applies failOnDataLoss).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from weir.client import Client
from weir.client.tier_admin import TierSegment
from weir.errors import CorruptDataError, ObjectMissingError
from weir.spark.options import TierSettings
from weir.spark.scan import ScanSettings, TopicRange, read_range
from weir.storage.arrow_rows import ARROW_SCHEMA
from weir.storage.tiered.remote_storage import (
    LocalDirStorage,
    RemoteStorage,
    S3Settings,
    S3Storage,
)
from weir.storage.tiered.segment_format import checksum, read_rows

log = logging.getLogger("weir.spark")

TopicPartition = tuple[str, int]
Range = tuple[TopicPartition, int, int]


@dataclass(frozen=True)
class TierRange(InputPartition):
    """Offsets ``[start, end)`` of one partition, read from one object of the tier."""

    topic: str
    partition: int
    start: int
    end: int
    object_key: str
    object_size: int
    object_crc: int
    store: tuple[tuple[str, str], ...]  # where the objects are, as the broker described it
    # [start, end) is every offset the object holds (a scan of it needs no offset filter)
    whole: bool = False

    def __repr__(self) -> str:
        where = dict(self.store)
        return (
            f"TierRange({self.topic}/{self.partition} [{self.start}, {self.end}) from the "
            f"object store {where.get('backend')}:{where.get('bucket') or where.get('path')}/"
            f"{self.object_key})"
        )


def plan_tier(
    client: Client, ranges: Sequence[Range], settings: TierSettings
) -> tuple[list[TierRange], list[Range]]:
    """Cut ``ranges`` into the parts offloaded segments hold (TierRange, one per object)
    and the rest (to read through the broker)."""
    if not settings.enabled:
        return [], list(ranges)
    tier: list[TierRange] = []
    rest: list[Range] = []
    status: dict[str, tuple[tuple[tuple[str, str], ...], dict[int, list[TierSegment]]]] = {}
    for topic in sorted({tp[0] for tp, _, _ in ranges}):
        if any(o.broker for o in client.owners(topic)):
            # a cluster's (replicated) partitions offload nothing yet: all through brokers
            status[topic] = ((), {})
            continue
        st = client.tier_status(topic)
        store = tuple(sorted(st.store.items()))
        status[topic] = (store, {p.partition: p.segments for p in st.partitions})
    for tp, s, e in ranges:
        store, parts = status[tp[0]]
        if s >= e:
            rest.append((tp, s, e))
            continue
        pos = s
        for seg in parts.get(tp[1], []) if store else []:
            if seg.end_offset <= pos or seg.first_offset >= e or seg.transactional:
                continue  # (transaction markers or aborted messages: the broker filters them)
            if seg.first_offset > pos:
                rest.append((tp, pos, seg.first_offset))
            lo, hi = max(pos, seg.first_offset), min(e, seg.end_offset)
            obj = seg.object_offsets
            last = tier[-1] if tier else None
            if (
                last is not None
                and last.object_key == seg.object_key
                and (last.topic, last.partition, last.end) == (tp[0], tp[1], lo)
            ):
                # the next blob of a packed object: one task, one read of the object
                tier[-1] = dataclasses.replace(last, end=hi, whole=(last.start, hi) == obj)
            else:
                tier.append(
                    TierRange(
                        tp[0],
                        tp[1],
                        lo,
                        hi,
                        seg.object_key,
                        seg.object_size,
                        seg.object_crc,
                        store,
                        whole=(lo, hi) == obj,
                    )
                )
            pos = hi
        if pos < e:
            rest.append((tp, pos, e))
    return tier, rest


def open_store(r: TierRange, settings: TierSettings) -> RemoteStorage:
    where = dict(r.store)
    if where.get("backend") == "local":
        return LocalDirStorage(where["path"])
    return S3Storage(
        S3Settings(
            bucket=where["bucket"],
            endpoint=settings.endpoint or where.get("endpoint", ""),
            prefix=where.get("prefix", ""),
            region=where.get("region", "us-east-1"),
            access_key=settings.access_key,
            secret_key=settings.secret_key,
        )
    )


def read_tier_range(
    scan: ScanSettings, settings: TierSettings, r: TierRange
) -> Iterator[pa.RecordBatch]:
    """The rows of ``r`` from its object (checked whole), in offset order."""
    try:
        data = open_store(r, settings).get(r.object_key)
    except ObjectMissingError:
        log.info("weir: %r is gone from the store; reading it through the broker", r)
        yield from read_range(scan, TopicRange(r.topic, r.partition, r.start, r.end))
        return
    if len(data) != r.object_size or checksum(data) != r.object_crc:
        raise CorruptDataError(
            f"object {r.object_key} is {len(data)} bytes with another checksum than the "
            f"broker recorded ({r.object_size} bytes): not read",
            partition=f"{r.topic}/{r.partition}",
            offset=r.start,
        )
    table = read_rows(data, r.start, r.end)
    topic = pa.repeat(pa.scalar(r.topic, pa.string()), table.num_rows)
    table = table.set_column(0, ARROW_SCHEMA.field("topic"), topic).cast(ARROW_SCHEMA)
    yield from table.to_batches(max_chunksize=65536)
