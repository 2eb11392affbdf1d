"""The options of `format("weir")`, parsed and checked once, on the driver.

Spark hands a data source its options as strings under lower-cased keys;
every mistake is reported here, naming the option, before any task runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from weir.client.aio import DEFAULT_ENDPOINT
from weir.errors import BadRequestError
from weir.hashing import KeyHash
from weir.spark.offsets import OffsetSpec, parse_spec

DEFAULT_MAX_BYTES_PER_FETCH = 4 << 20
# a micro-batch's transaction, begun by its first task, must outlive the batch (and a
# driver restart, so that the replay joins it); the server caps it (max_timeout_ms)
DEFAULT_TRANSACTION_TIMEOUT_MS = 10 * 60_000


def _get(options: Mapping[str, str], name: str) -> str | None:
    v = options.get(name.lower())
    return None if v is None else str(v)


DEFAULT_GATHER_BYTES = 1 << 20


def _int(options: Mapping[str, str], name: str, minimum: int) -> int | None:
    v = _get(options, name)
    if v is None:
        return None
    try:
        n = int(v.strip())
    except ValueError:
        raise BadRequestError(f"option {name}: expected an integer, got {v!r}") from None
    if n < minimum:
        raise BadRequestError(f"option {name}: must be at least {minimum}, got {n}")
    return n


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    v = _get(options, name)
    if v is None:
        return default
    s = v.strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise BadRequestError(f"option {name}: expected true or false, got {v!r}")


def _endpoint(options: Mapping[str, str]) -> str:
    return (_get(options, "endpoint") or DEFAULT_ENDPOINT).strip()


def _topics(options: Mapping[str, str]) -> list[str]:
    raw = _get(options, "topic")
    topics = [t.strip() for t in (raw or "").split(",") if t.strip()]
    if not topics:
        raise BadRequestError('option topic is required, e.g. .option("topic", "orders")')
    if len(set(topics)) != len(topics):
        raise BadRequestError(f"option topic names a topic twice: {raw!r}")
    return topics


def _offset_ranges(
    options: Mapping[str, str], topics: list[str], streaming: bool
) -> tuple[tuple[str, int, int, int], ...] | None:
    raw = _get(options, "offsetRanges")
    if raw is None:
        return None
    if streaming:
        raise BadRequestError("option offsetRanges is for batch reads")
    for other in ("startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp"):
        if _get(options, other) is not None:
            raise BadRequestError(f"give either offsetRanges or {other}, not both")
    example = '[["orders", 0, 100, 200]]'
    try:
        obj: Any = json.loads(raw)
    except ValueError:
        raise BadRequestError(f"option offsetRanges: expected JSON like {example}") from None
    out = []
    item: Any
    for item in obj if isinstance(obj, list) else [None]:
        ok = (
            isinstance(item, list)
            and len(item) == 4
            and item[0] in topics
            and all(isinstance(v, int) and not isinstance(v, bool) for v in item[1:])
            and item[1] >= 0
            and 0 <= item[2] <= item[3]
        )
        if not ok:
            raise BadRequestError(
                f"option offsetRanges: expected [topic, partition, start, end] with a topic "
                f"read ({topics}) and 0 <= start <= end, like {example}; got {item!r}"
            )
        out.append((str(item[0]), int(item[1]), int(item[2]), int(item[3])))
    return tuple(out)


@dataclass(frozen=True)
class TierSettings:
    """What an executor needs to reach the store (from the query's options)."""

    enabled: bool = True  # option readFromTier
    access_key: str = ""  # option tier.accessKey ('' : the executor's own AWS chain)
    secret_key: str = ""  # option tier.secretKey
    endpoint: str = ""  # option tier.endpoint: another address of the same store

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> TierSettings:
        def get(name: str) -> str:
            return (options.get(name.lower()) or "").strip()

        flag = get("readFromTier").lower()
        if flag not in ("", "true", "false"):
            raise BadRequestError(f"option readFromTier: expected true or false, got {flag!r}")
        return cls(
            flag != "false", get("tier.accessKey"), get("tier.secretKey"), get("tier.endpoint")
        )


@dataclass(frozen=True)
class ReaderOptions:
    """What `spark.read` / `spark.readStream` asked for."""

    endpoint: str
    topics: list[str]
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp: int | None
    ending_timestamp: int | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    min_partitions: int | None
    consumer: str | None
    max_bytes_per_fetch: int
    push_filters: bool
    read_committed: bool = False
    compacted: bool = False
    assemble_chunks: bool = False
    tier: TierSettings = field(default_factory=TierSettings)
    # option offsetRanges: exactly these [topic, partition, start, end) (weir.spark.read's
    # broker part: the ranges it planned once, so the two parts neither gap nor overlap)
    offset_ranges: tuple[tuple[str, int, int, int], ...] | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> ReaderOptions:
        topics = _topics(options)
        default_start = "latest" if streaming else "earliest"
        starting = parse_spec(
            _get(options, "startingOffsets") or default_start, "startingOffsets", topics, True
        )
        ending_raw = _get(options, "endingOffsets")
        ending_ts = _int(options, "endingTimestamp", 0)
        if streaming and (ending_raw is not None or ending_ts is not None):
            raise BadRequestError(
                "options endingOffsets and endingTimestamp are for batch reads; "
                "a stream runs on (use trigger(availableNow=True) to stop at the current end)"
            )
        ending = parse_spec(ending_raw or "latest", "endingOffsets", topics, False)
        starting_ts = _int(options, "startingTimestamp", 0)
        if starting_ts is not None and _get(options, "startingOffsets") is not None:
            raise BadRequestError("give either startingOffsets or startingTimestamp, not both")
        max_per_trigger = _int(options, "maxOffsetsPerTrigger", 1)
        if max_per_trigger is not None and not streaming:
            raise BadRequestError("option maxOffsetsPerTrigger is for streaming reads")
        consumer = (_get(options, "consumer") or "").strip() or None
        if consumer is not None and not streaming:
            raise BadRequestError(
                "option consumer is for streaming reads (it commits what each micro-batch read)"
            )
        return cls(
            endpoint=_endpoint(options),
            topics=topics,
            starting=starting,
            ending=ending,
            starting_timestamp=starting_ts,
            ending_timestamp=ending_ts,
            max_offsets_per_trigger=max_per_trigger,
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            min_partitions=_int(options, "minPartitions", 1),
            consumer=consumer,
            max_bytes_per_fetch=_int(options, "maxBytesPerFetch", 1024)
            or DEFAULT_MAX_BYTES_PER_FETCH,
            push_filters=_bool(options, "pushFilters", False),
            read_committed=_bool(options, "readCommitted", False),
            compacted=_bool(options, "readCompacted", False),
            assemble_chunks=_bool(options, "assembleChunks", False),
            tier=TierSettings.parse(options),
            offset_ranges=_offset_ranges(options, topics, streaming),
        )


@dataclass(frozen=True)
class WriterOptions:
    """What `df.write` / `df.writeStream` asked for."""

    endpoint: str
    topic: str
    write_id: str | None
    transactional: bool = True  # streaming: each micro-batch is one transaction
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    key_hash: KeyHash = KeyHash.MURMUR3  # where a keyed row goes: the SDK writer's hash
    # a task gathers each target partition's rows up to this many value bytes per
    # write_many (0: each Arrow batch's rows go out at once)
    gather_bytes: int = DEFAULT_GATHER_BYTES

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriterOptions:
        topics = _topics(options)
        if len(topics) != 1:
            raise BadRequestError(f"a weir sink writes to one topic, got {topics}")
        write_id = (_get(options, "writeId") or "").strip() or None
        key_hash = KeyHash.parse(_get(options, "keyHash") or "murmur3")
        return cls(
            endpoint=_endpoint(options),
            topic=topics[0],
            write_id=write_id,
            transactional=_bool(options, "transactional", True),
            transaction_timeout_ms=_int(options, "transactionTimeoutMs", 1)
            or DEFAULT_TRANSACTION_TIMEOUT_MS,
            key_hash=key_hash,
            gather_bytes=DEFAULT_GATHER_BYTES
            if (g := _int(options, "gatherBytes", 0)) is None
            else g,
        )
