"""Offsets as a query names them, as they are now on the broker, and as Spark stores them.

Options give offsets the way Spark's Kafka source does: ``earliest``,
``latest``, or JSON per topic and partition such as
``{"orders": {"0": 23, "1": -2}}`` where -2 means earliest and -1 latest.
Streaming offsets travel through Spark's checkpoint as JSON and Spark compares
them as strings, so `to_json` always builds them in one order.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from weir.client import Client
from weir.client.admin import PartitionInfo
from weir.client.connection import Backoff
from weir.errors import BadRequestError, UnavailableError, WeirError

log = logging.getLogger("weir.spark")

# how long planning and a task wait for a partition that is moving between brokers
# (cluster mode: the old owner's ZooKeeper session must expire, then the new owner
# recovers the partition's log) before they fail
OWNER_WAIT_S = 120.0

EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]
# "earliest", "latest", or {topic: {partition: offset or EARLIEST / LATEST}}
OffsetSpec = str | dict[str, dict[int, int]]

_EXAMPLE = '{"orders": {"0": 23, "1": -2}}'


def parse_spec(value: str, option: str, topics: list[str], starting: bool) -> OffsetSpec:
    """Check a startingOffsets / endingOffsets value against the topics read."""
    text = value.strip()
    if text.lower() == "latest":
        return "latest"
    if text.lower() == "earliest":
        if not starting:
            raise BadRequestError(f"option {option}: earliest is not a valid end")
        return "earliest"
    try:
        obj: Any = json.loads(text)
    except ValueError:
        raise BadRequestError(
            f"option {option}: expected earliest, latest or JSON like {_EXAMPLE}, got {value!r}"
        ) from None
    if not isinstance(obj, dict):
        raise BadRequestError(f"option {option}: expected a JSON object like {_EXAMPLE}")
    out: dict[str, dict[int, int]] = {}
    lowest = EARLIEST if starting else LATEST
    for topic, parts in obj.items():
        if topic not in topics:
            raise BadRequestError(
                f"option {option}: topic {topic!r} is not one of the topics read {topics}"
            )
        if not isinstance(parts, dict):
            raise BadRequestError(f"option {option}: {topic!r} must map partitions to offsets")
        per: dict[int, int] = {}
        for p, off in parts.items():
            try:
                pi = int(p)
            except ValueError:
                raise BadRequestError(f"option {option}: partition {p!r} is not a number") from None
            if pi < 0 or not isinstance(off, int) or isinstance(off, bool) or off < lowest:
                raise BadRequestError(
                    f"option {option}: {topic}/{p}: expected an offset >= {lowest}, got {off!r}"
                )
            per[pi] = off
        out[topic] = per
    return out


@dataclass(frozen=True, slots=True)
class Bounds:
    """A partition's first available offset and its end offset (the next one written)."""

    start: int
    end: int


def fetch_bounds(
    client: Client, topics: Iterable[str], read_committed: bool = False
) -> dict[TopicPartition, Bounds]:
    """Every partition of ``topics`` and its offsets now, in topic then partition order (its
    end: the last stable offset for a read-committed reader)."""
    out: dict[TopicPartition, Bounds] = {}
    for topic in topics:
        for p in partition_status(client, topic):
            end = p.stable_offset if read_committed else p.end_offset
            out[(topic, p.partition)] = Bounds(p.start_offset, end)
    return out


def partition_status(client: Client, topic: str) -> list[PartitionInfo]:
    """Every partition of ``topic`` as it is now, in partition order.

    A broker of a cluster describes only the partitions it serves: the others are
    described by their owners (found with `Client.owners`); a partition that is
    moving is waited for, up to OWNER_WAIT_S."""
    info = client.describe_topic(topic)
    got = {p.partition: p for p in info.partition_info}
    backoff = Backoff(cap=2.0)
    deadline = time.monotonic() + OWNER_WAIT_S
    while len(got) < info.partitions:
        missing = set(range(info.partitions)) - set(got)
        try:
            _ask_owners(client, topic, missing, got)
        except WeirError as err:
            if not err.retryable:
                raise
            log.info("describing %s at its owners: %s (retrying)", topic, err)
        if len(got) == info.partitions:
            break
        if time.monotonic() >= deadline:
            raise UnavailableError(
                f"partitions {sorted(set(range(info.partitions)) - set(got))} of {topic!r} "
                f"have had no owner to describe them for {OWNER_WAIT_S:g} s"
            )
        time.sleep(backoff.next_delay())
    return [got[p] for p in sorted(got)]


def _ask_owners(
    client: Client, topic: str, missing: set[int], got: dict[int, PartitionInfo]
) -> None:
    """Describe ``topic`` at the owners of the ``missing`` partitions, adding what they say."""
    at: dict[str, set[int]] = {}
    for o in client.owners(topic):
        endpoint = o.endpoints.get("native")
        if o.partition in missing and endpoint:  # no endpoint: moving now
            at.setdefault(endpoint, set()).add(o.partition)
    for endpoint, parts in at.items():
        with Client(endpoint) as owner:
            for p in owner.describe_topic(topic).partition_info:
                if p.partition in parts:
                    got[p.partition] = p


def offsets_for_time(
    client: Client, topics: Iterable[str], timestamp_ms: int
) -> dict[TopicPartition, int]:
    """Per partition, the first offset the broker wrote at or after ``timestamp_ms``."""
    out: dict[TopicPartition, int] = {}
    for topic in topics:
        for p, off in enumerate(client.offsets_for_time(topic, timestamp_ms)):
            out[(topic, p)] = off
    return out


def resolve(
    spec: OffsetSpec, bounds: Mapping[TopicPartition, Bounds], option: str, starting: bool
) -> dict[TopicPartition, int]:
    """Concrete offsets for every partition; partitions a JSON spec leaves out get the default
    (earliest for a start, latest for an end)."""
    if isinstance(spec, dict):
        for topic, parts in spec.items():
            for p in parts:
                if (topic, p) not in bounds:
                    raise BadRequestError(f"option {option}: topic {topic!r} has no partition {p}")
    out: dict[TopicPartition, int] = {}
    for tp, b in bounds.items():
        if spec == "earliest":
            o = EARLIEST
        elif spec == "latest":
            o = LATEST
        else:
            assert isinstance(spec, dict)
            o = spec.get(tp[0], {}).get(tp[1], EARLIEST if starting else LATEST)
        out[tp] = b.start if o == EARLIEST else b.end if o == LATEST else o
    return out


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The offset dict Spark checkpoints: sorted by topic and partition, so equal offsets
    give equal JSON (Spark compares the strings; another key order means "new data")."""
    out: dict[str, dict[str, int]] = {}
    for topic, p in sorted(offsets):
        out.setdefault(topic, {})[str(p)] = offsets[(topic, p)]
    return out


def from_json(obj: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {(t, int(p)): int(o) for t, parts in obj.items() for p, o in parts.items()}


def cap(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], max_rows: int
) -> dict[TopicPartition, int]:
    """Ends that admit at most ``max_rows`` offsets in all, shared in proportion to each
    partition's backlog (largest remainders first, so the whole budget is used)."""
    lag = {tp: max(0, end[tp] - start[tp]) for tp in end}
    total = sum(lag.values())
    if total <= max_rows:
        return dict(end)
    share = {tp: lag[tp] * max_rows // total for tp in lag}
    left = max_rows - sum(share.values())
    order = sorted(lag, key=lambda tp: (-(lag[tp] * max_rows % total), tp))
    for tp in order:
        if left == 0:
            break
        if share[tp] < lag[tp]:
            share[tp] += 1
            left -= 1
    return {tp: start[tp] + share[tp] for tp in end}


def split(
    ranges: list[tuple[TopicPartition, int, int]], min_partitions: int | None
) -> list[tuple[TopicPartition, int, int]]:
    """Cut offset ranges so there are at least ``min_partitions`` (more Spark tasks for big
    partitions); each range gets pieces in proportion to its size. Deterministic."""
    ranges = [r for r in ranges if r[2] > r[1]]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(e - s for _, s, e in ranges)
    out: list[tuple[TopicPartition, int, int]] = []
    for tp, s, e in ranges:
        size = e - s
        pieces = max(1, min(size, -(-size * min_partitions // total)))
        for i in range(pieces):
            a = s + size * i // pieces
            b = s + size * (i + 1) // pieces
            out.append((tp, a, b))
    return out
