"""Which partition a writer's message goes to (``client.writer(..., routing=...)``).

Pulsar's message routing modes, with Pulsar's key hash:

* ``"single-partition"`` (the default): a message with a key goes to
  ``murmur3_32(key) % partitions``; one without a key goes to the producer's home
  partition, so a producer's keyless messages stay in order in one partition: the
  one partition that holds the producer's state (it stays there when the topic
  grows), else ``crc32c(producer_id) % partitions`` (where the broker puts a new
  producer).
* ``"round-robin"``: keys as above; keyless messages go to the partitions in turn,
  switching every `ROUND_ROBIN_RUN` messages so that batches stay large (Pulsar's
  batching-aware round robin switches per batch window likewise).
* a function ``router(key, partitions) -> partition`` (Pulsar's CustomPartition);
  ``key`` is the message's key as bytes, or None.
* ``"pinned"``: weir's and YDB's producer pin: every message goes to the one
  partition the broker pins the producer_id to, whatever its key (also what
  ``partition=N`` does). The producer's seq_nos and dedup then span the topic.

The key hash is Pulsar's by default (its Java client's ``Murmur3_32Hash``):
MurmurHash3 x86_32 of the key bytes with seed 0, the sign bit cleared, modulo the
partition count. So a key lands in the partition a Pulsar client would choose for
the same key (UTF-8 string keys; Pulsar hashes a bytes key's base64 text instead).
``key_hash="murmur2"`` takes Kafka's default partitioner instead (`weir.hashing`).

A routing writer holds one write session per partition it writes to; the
producer's seq_nos and dedup state are per (producer, partition), so a resend
after a reconnect is deduplicated in the partition it was first sent to. The
writer looks at the partition count again every ``partitions_refresh_interval``
seconds (60 by default, as Pulsar's client) and when the broker answers that a
partition is unknown: partitions added while it runs then get their keys (a
key's partition changes with the count, as in Pulsar and Kafka).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from weir.errors import BadRequestError
from weir.hashing import KeyHash, pulsar_partition

ROUND_ROBIN_RUN = 100  # keyless messages per partition before round robin moves on
ROUTING_NAMES = ("single-partition", "key", "round-robin", "pinned")

CustomRouter = Callable[[bytes | None, int], int]


def murmur3_partition(key: bytes, partitions: int) -> int:
    """The partition Pulsar's client picks for ``key``: murmur3_32 (seed 0) & 0x7fffffff."""
    return pulsar_partition(key, partitions)


class Router(Protocol):
    def partition(self, key: bytes | None, partitions: int, home: int) -> int: ...


class SinglePartition:
    """Keys by hash; keyless messages to the producer's home partition."""

    keyless_home = True

    def __init__(self, key_hash: KeyHash = KeyHash.MURMUR3) -> None:
        self.key_hash = key_hash

    def partition(self, key: bytes | None, partitions: int, home: int) -> int:
        return self.key_hash.partition(key, partitions) if key else home


class RoundRobin:
    """Keys by hash; keyless messages round robin, `ROUND_ROBIN_RUN` at a time."""

    keyless_home = False

    def __init__(self, run: int = ROUND_ROBIN_RUN, key_hash: KeyHash = KeyHash.MURMUR3) -> None:
        self.run = run
        self.key_hash = key_hash
        self._count = 0

    def partition(self, key: bytes | None, partitions: int, home: int) -> int:
        if key:
            return self.key_hash.partition(key, partitions)
        i = self._count
        self._count += 1
        return (home + i // self.run) % partitions


class Custom:
    """The caller's function; its answer is checked against the partition count."""

    keyless_home = False

    def __init__(self, fn: CustomRouter) -> None:
        self.fn = fn

    def partition(self, key: bytes | None, partitions: int, home: int) -> int:
        p = self.fn(key, partitions)
        if not isinstance(p, int) or isinstance(p, bool) or not 0 <= p < partitions:
            raise BadRequestError(
                f"the routing function returned {p!r} for a topic of {partitions} partitions"
            )
        return p


def parse_routing(
    routing: str | CustomRouter | None,
    partition: int | None,
    key_hash: str | KeyHash = KeyHash.MURMUR3,
) -> SinglePartition | RoundRobin | Custom | None:
    """The router for ``routing``; None for the pinned mode (one session, the broker's pin).

    ``key_hash`` (``"murmur3"``, Pulsar's, or ``"murmur2"``, Kafka's) places keyed messages
    in the hash-based modes; ``routing="key"`` is ``"single-partition"`` by another name."""
    hash_ = KeyHash.parse(key_hash)
    if partition is not None:
        if routing not in (None, "pinned"):
            raise BadRequestError(
                f"partition={partition} writes every message to that partition: "
                f"routing={routing!r} cannot apply"
            )
        return None
    if routing is None or routing in ("single-partition", "key"):
        return SinglePartition(hash_)
    if routing == "round-robin":
        return RoundRobin(key_hash=hash_)
    if routing == "pinned":
        return None
    if callable(routing):
        return Custom(routing)
    raise BadRequestError(
        f"unknown routing {routing!r}: use one of {', '.join(ROUTING_NAMES)} or a function "
        "(key, partitions) -> partition"
    )
