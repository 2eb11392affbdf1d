"""Stored weir batches to Arrow: the conversion lives in `weir.storage.arrow_rows`, shared
with the tier's Parquet files; Spark's readers use it from here. Rows from decoded
messages (chunked messages put back together) are built here."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from weir.client.messages import Message
from weir.storage.arrow_rows import ARROW_SCHEMA, HEADERS_TYPE, TIMESTAMP_TYPE, stored_to_arrow

__all__ = ["messages_to_arrow", "stored_to_arrow"]


def _timestamps(ms: Sequence[int]) -> pa.Array:
    return pa.array(np.asarray(ms, dtype=np.int64) * 1000, pa.int64()).cast(TIMESTAMP_TYPE)


def messages_to_arrow(topic: str, partition: int, msgs: Sequence[Message]) -> pa.RecordBatch | None:
    """Rows from decoded messages (the assembleChunks path: chunked messages put back
    together are no stored batch). None when there is none."""
    if not msgs:
        return None
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(topic, pa.string()), len(msgs)),
            pa.repeat(pa.scalar(partition, pa.int32()), len(msgs)),
            pa.array([m.offset for m in msgs], pa.int64()),
            pa.array([m.key or None for m in msgs], pa.binary()),
            pa.array([m.data for m in msgs], pa.binary()),
            pa.array([list(m.headers.items()) for m in msgs], HEADERS_TYPE),
            _timestamps([m.created_at_ms for m in msgs]),
            _timestamps([m.written_at_ms for m in msgs]),
            pa.array([m.producer_id for m in msgs], pa.string()),
            pa.array([m.seq_no for m in msgs], pa.int64()),
        ],
        schema=ARROW_SCHEMA,
    )
