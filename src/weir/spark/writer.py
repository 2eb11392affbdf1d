"""`df.write` / `df.writeStream` into a weir topic, exactly once by construction.

Every row gets a producer_id and a seq_no that depend only on where the row
sits in the query, never on the attempt that writes it:

* producer_id = ``spark-{id}-{spark partition}``, plus ``-p{n}`` when the row
  names its target partition n (a ``partition`` column or a key): a producer
  is pinned to one broker partition, so each target gets its own producer.
  ``id`` is the streaming query id (stable across restarts from the same
  checkpoint) or, for a batch write, an id made on the driver for the job
  (or the ``writeId`` option).
* seq_no = ``batch_id << 32 | row position in the task`` (batch_id is the
  micro-batch id; 0 for a batch write).

The broker skips a record whose seq_no is not above the last one its
producer stored, so a retried task, or a micro-batch Spark replays after a
crash, writes nothing twice. This holds when Spark hands the replay the same
rows in the same order: see docs/spark.md for the conditions.

A stream (``transactional``, the default) also writes each micro-batch as **one
transaction** across every partition it writes: every task joins the batch's
transaction (transactional id ``spark-{query id}``, key = the batch id, see
`weir.client.transaction`), and the driver's commit commits it by id, so
read-committed readers see a micro-batch whole or not at all, even when the
driver dies mid-batch or mid-commit; the driver's abort discards it. A replay
after a crash joins the batch's transaction if it is still open (the dedup
inside it drops what the first attempt wrote), else starts a new one (dedup
against what committed drops a batch that did commit).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    ByteType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from weir.client import Client, Transaction, Writer
from weir.errors import BadRequestError, WeirError
from weir.hashing import KeyHash
from weir.spark.options import DEFAULT_GATHER_BYTES, WriterOptions

log = logging.getLogger("weir.spark")

_ROWS_PER_TASK = 1 << 32  # the row position must fit the low half of a seq_no
# Rows of one target partition are gathered (option gatherBytes, 1 MiB by default) before
# one write_many: Spark hands a task Arrow batches of 10,000 rows, which a key splits over
# every partition; one call per few batches, not per batch and target, makes fewer and
# bigger requests. All targets together hold at most this much:
_GATHER_TOTAL_BYTES = 16 << 20
_KEYS_REMEMBERED = 1 << 16  # distinct keys whose partition a task keeps
_FLUSH_TIMEOUT_S = 300.0


@dataclass
class WrittenMessage(WriterCommitMessage):
    """What one task reports to the driver."""

    spark_partition: int
    rows: int
    producers: int
    transaction_id: int = 0  # the micro-batch's transaction the rows went into (0: none)


@dataclass(frozen=True)
class Layout:
    """Which input columns the sink uses (checked on the driver, before any task runs)."""

    key: bool
    headers: bool
    partition: bool
    created_at: bool

    @classmethod
    def of(cls, schema: StructType) -> Layout:
        types = {f.name: f.dataType for f in schema.fields}
        text = (BinaryType, StringType)
        value = types.get("value")
        if value is None:
            raise BadRequestError(
                f"a weir sink needs a 'value' column (binary or string); got columns {list(types)}"
            )
        checks: dict[str, tuple[tuple[type, ...], str]] = {
            "value": (text, "binary or string"),
            "key": (text, "binary or string"),
            "partition": ((IntegerType, LongType, ShortType, ByteType), "an integer"),
            "created_at": ((TimestampType,), "a timestamp"),
        }
        for name, (allowed, what) in checks.items():
            t = types.get(name)
            if t is not None and not isinstance(t, allowed):
                raise BadRequestError(f"column {name!r} must be {what}, not {t.simpleString()}")
        h = types.get("headers")
        if h is not None and not (
            isinstance(h, MapType)
            and isinstance(h.keyType, StringType)
            and isinstance(h.valueType, StringType)
        ):
            raise BadRequestError(
                f"column 'headers' must be map<string,string>, not {h.simpleString()}"
            )
        return cls("key" in types, "headers" in types, "partition" in types, "created_at" in types)


@dataclass
class _Part:
    """Rows of one target partition from one Arrow batch, as write_many takes them."""

    values: pa.Array
    keys: pa.Array | None
    seqs: np.ndarray
    headers: list[dict[str, str] | None] | None
    created: np.ndarray | None

    @staticmethod
    def concat(parts: list[_Part]) -> _Part:
        """Consecutive parts as one (the row order kept)."""
        headers = None
        if any(p.headers is not None for p in parts):
            headers = [h for p in parts for h in (p.headers or [None] * len(p.values))]
        created = None
        if parts[0].created is not None:
            created = np.concatenate([p.created for p in parts if p.created is not None])
        keys = None
        if parts[0].keys is not None:
            keys = pa.concat_arrays([p.keys for p in parts if p.keys is not None])
        return _Part(
            pa.concat_arrays([p.values for p in parts]),
            keys,
            np.concatenate([p.seqs for p in parts]),
            headers,
            created,
        )


class TaskWriter:
    """One Spark task's rows into the topic: one SDK writer per target partition."""

    def __init__(
        self,
        client: Client,
        topic: str,
        partitions: int,
        layout: Layout,
        producer_base: str,
        batch_id: int,
        transaction: Transaction | None = None,
        key_hash: KeyHash = KeyHash.MURMUR3,
        gather_bytes: int = DEFAULT_GATHER_BYTES,
    ) -> None:
        self.key_hash = key_hash
        self.gather_bytes = gather_bytes
        self.client = client
        self.transaction = transaction
        self.topic = topic
        self.partitions = partitions
        self.layout = layout
        self.producer_base = producer_base
        self.seq_base = batch_id << 32
        self.rows = 0
        self.writers: dict[int | None, Writer] = {}
        self._gathered: dict[int | None, list[_Part]] = {}
        self._key_targets: dict[bytes | str, int] = {}
        self._gathered_bytes: dict[int | None, int] = {}

    def _writer(self, target: int | None) -> Writer:
        w = self.writers.get(target)
        if w is None:
            pid = self.producer_base if target is None else f"{self.producer_base}-p{target}"
            # the connector chooses partitions itself: each producer writes to one (pinned)
            make = self.client.writer if self.transaction is None else self.transaction.writer
            w = make(
                self.topic,
                producer_id=pid,
                partition=target,
                routing="pinned" if target is None else None,
            )
            self.writers[target] = w
        return w

    def _key_target(self, k: bytes | str) -> int:
        """The partition of a key (-1: an empty key, the task's pinned producer), hashed
        once per task: keys repeat from batch to batch."""
        t = self.key_hash.partition(k.encode() if isinstance(k, str) else k, self.partitions)
        self._key_targets[k] = t = t if k else -1
        return t

    def _targets(self, batch: pa.RecordBatch) -> np.ndarray | None:
        """Each row's target partition (-1: the task's pinned producer), column-wise; None
        when every row goes to the pinned producer."""
        n = batch.num_rows
        count = self.partitions
        out: np.ndarray | None = None
        if self.layout.key:
            keys = batch.column("key")
            if keys.null_count < n:
                # hash each distinct key once (keys repeat: that is why rows have them)
                enc = pc.dictionary_encode(keys)
                memo = self._key_targets
                if len(memo) > _KEYS_REMEMBERED:
                    memo.clear()
                parts = [
                    memo[k] if k in memo else self._key_target(k)
                    for k in enc.dictionary.to_pylist()
                ]
                parts.append(-1)  # a null key
                ix = pc.fill_null(enc.indices, len(parts) - 1).to_numpy()
                out = np.asarray(parts, dtype=np.int64)[ix]
        if self.layout.partition:
            col = batch.column("partition")
            if col.null_count < n:
                valid = col.is_valid().to_numpy(zero_copy_only=False)
                given = pc.fill_null(col, 0).to_numpy().astype(np.int64)
                bad = np.flatnonzero(valid & ((given < 0) | (given >= count)))
                if bad.size:
                    i = int(bad[0])
                    raise BadRequestError(
                        f"row {self.rows + i}: partition {given[i]} is not one of "
                        f"0..{count - 1} of {self.topic!r}"
                    )
                out = np.where(valid, given, -1 if out is None else out)
        return out

    def add(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        if self.rows + n > _ROWS_PER_TASK:
            raise BadRequestError(
                f"a Spark task may write at most {_ROWS_PER_TASK} rows per batch; repartition"
            )
        if batch.column("value").null_count:
            raise BadRequestError("column 'value' is null in some rows; every message needs one")
        seq0 = self.seq_base + self.rows
        lay = self.layout
        if not (lay.key or lay.partition or lay.headers or lay.created_at):
            # Arrow columns straight into the SDK: no Python object per row
            self._writer(None).write_many(batch.column("value"), seq_nos=range(seq0, seq0 + n))
            self.rows += n
            return
        targets = self._targets(batch)
        if targets is None or bool((targets < 0).all()):
            groups: list[tuple[int | None, np.ndarray | None]] = [(None, None)]
        else:
            # one group per target partition, each in row order (a stable sort)
            order = np.argsort(targets, kind="stable")
            cuts = np.flatnonzero(np.diff(targets[order])) + 1
            groups = [
                (None if targets[g[0]] < 0 else int(targets[g[0]]), g)
                for g in np.split(order, cuts)
            ]
        now = int(time.time() * 1000)
        for target, rows in groups:
            # one bulk call per target: columns of this producer's rows, in order, taken by
            # Arrow and handed to the SDK as Arrow arrays (checked and encoded by column)
            sub = batch if rows is None else batch.take(pa.array(rows))
            seqs = np.arange(seq0, seq0 + n, dtype=np.int64) if rows is None else rows + seq0
            keys = sub.column("key") if lay.key else None
            headers = None
            if lay.headers and sub.column("headers").null_count < sub.num_rows:
                headers = [dict(h) if h else None for h in sub.column("headers").to_pylist()]
            created = None
            if lay.created_at:
                us = pc.cast(sub.column("created_at"), pa.int64())
                created = pc.fill_null(pc.divide(us, 1000), now).to_numpy()  # ms
            self._gather(target, _Part(sub.column("value"), keys, seqs, headers, created))
        self.rows += n

    def _gather(self, target: int | None, part: _Part) -> None:
        """Hold a target's rows until about `_GATHER_BYTES` are there, then write them."""
        parts = self._gathered.setdefault(target, [])
        parts.append(part)
        size = self._gathered_bytes.get(target, 0) + part.values.nbytes
        self._gathered_bytes[target] = size
        if size >= self.gather_bytes:
            self._write_gathered(target)
        elif sum(self._gathered_bytes.values()) >= _GATHER_TOTAL_BYTES:
            for t in list(self._gathered):  # many targets: bound what the task holds
                self._write_gathered(t)

    def _write_gathered(self, target: int | None) -> None:
        parts = self._gathered.pop(target, [])
        self._gathered_bytes.pop(target, None)
        if not parts:
            return
        p = parts[0] if len(parts) == 1 else _Part.concat(parts)
        self._writer(target).write_many(
            p.values, keys=p.keys, headers=p.headers, seq_nos=p.seqs, created_at=p.created
        )

    def finish(self) -> None:
        """Wait until the broker acknowledged every row (written or skipped as a duplicate)."""
        for target in list(self._gathered):
            self._write_gathered(target)
        for w in self.writers.values():
            w.flush(_FLUSH_TIMEOUT_S)
        for w in self.writers.values():
            w.close(_FLUSH_TIMEOUT_S)

    def abandon(self) -> None:
        for w in self.writers.values():
            try:
                w.close(1.0)
            except Exception as exc:  # the task fails anyway; its retry rewrites the same rows
                log.debug("closing a writer of a failed task: %r", exc)


def _topic_partitions(options: WriterOptions) -> int:
    with Client(options.endpoint) as client:
        return client.describe_topic(options.topic).partitions


def write_task(
    options: WriterOptions,
    layout: Layout,
    partitions: int,
    stable_id: str,
    batch_id: int,
    batches: Iterator[pa.RecordBatch],
    transactional: bool = False,
) -> WrittenMessage:
    tc = TaskContext.get()
    spark_partition = tc.partitionId() if tc is not None else 0
    with Client(options.endpoint) as client:
        tx = None
        if transactional:  # join the micro-batch's transaction (the first task begins it)
            tx = client.transaction(
                transactional_id=f"spark-{stable_id}",
                key=str(batch_id),
                timeout=options.transaction_timeout_ms / 1000,
            ).begin()
        tw = TaskWriter(
            client,
            options.topic,
            partitions,
            layout,
            f"spark-{stable_id}-{spark_partition}",
            batch_id,
            tx,
            options.key_hash,
            options.gather_bytes,
        )
        try:
            for b in batches:
                tw.add(b)
            tw.finish()
        except BaseException:
            tw.abandon()
            raise
    txn_id = (tx.id or 0) if tx is not None else 0
    return WrittenMessage(spark_partition, tw.rows, len(tw.writers), txn_id)


class WeirBatchWriter(DataSourceArrowWriter):
    """`df.write`: created once on the driver and pickled to every task, so the job id made
    here is shared by all tasks of the job and by their retries."""

    def __init__(self, options: WriterOptions, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise BadRequestError('a topic can only be appended to: use mode("append")')
        self.options = options
        self.layout = Layout.of(schema)
        self.partitions = _topic_partitions(options)
        self.stable_id = options.write_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenMessage:
        return write_task(self.options, self.layout, self.partitions, self.stable_id, 0, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, WrittenMessage))
        log.info(
            "weir: wrote %d rows to %s (write id %s)", rows, self.options.topic, self.stable_id
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning(
            "weir: write to %s failed; rows already written stay (write id %s)",
            self.options.topic,
            self.stable_id,
        )


class WeirStreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream`: the ids come from the task (query id, micro-batch id)."""

    def __init__(self, options: WriterOptions, schema: StructType, overwrite: bool) -> None:
        self.options = options
        self.layout = Layout.of(schema)
        self.partitions = _topic_partitions(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenMessage:
        tc = TaskContext.get()
        query_id = tc.getLocalProperty("sql.streaming.queryId") if tc is not None else None
        batch_id = tc.getLocalProperty("streaming.sql.batchId") if tc is not None else None
        if not query_id or batch_id is None:
            raise BadRequestError("weir stream writer: Spark gave the task no query or batch id")
        return write_task(
            self.options,
            self.layout,
            self.partitions,
            query_id,
            int(batch_id),
            iterator,
            self.options.transactional,
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Commit the micro-batch's transaction: its rows become visible to read-committed
        readers, all at once (without transactions the rows are durable already)."""
        done = [m for m in messages if isinstance(m, WrittenMessage)]
        txns = sorted({m.transaction_id for m in done if m.transaction_id})
        if txns:
            # normally one; tasks of a batch whose transaction ended meanwhile began another:
            # committing the ended one fails, and Spark runs the batch again
            with Client(self.options.endpoint) as client:
                for txn in txns:
                    client.commit_transaction(txn)
        rows = sum(m.rows for m in done)
        log.debug("weir: batch %d wrote %d rows to %s", batchId, rows, self.options.topic)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Discard the micro-batch's transaction (Spark replays the batch)."""
        txns = sorted({m.transaction_id for m in messages if isinstance(m, WrittenMessage)} - {0})
        if txns:
            with Client(self.options.endpoint) as client:
                for txn in txns:
                    try:
                        client.abort_transaction(txn)
                    except WeirError as err:  # ended already (timed out): nothing to discard
                        log.info("weir: abort of batch %d's transaction: %s", batchId, err)
        log.warning(
            "weir: batch %d to %s aborted; Spark replays it and the broker skips what it has",
            batchId,
            self.options.topic,
        )
