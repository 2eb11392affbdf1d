"""Key_Shared: every key goes to one consumer at a time, and per-key order holds.

Keys are hashed with murmur3_32 (seed 0, as Pulsar hashes them). Two ways to map a key
to a consumer, chosen by the first consumer of the subscription (the others must use
the same; a consumer of the other kind is refused with `ConsumerBusyError`):

- **auto split** (the default): consistent hashing. Each consumer owns 100 points of a
  ring of 32-bit hashes; a key goes to the owner of the first point at or after its
  hash, so a consumer joining or leaving moves only the keys of its arcs;
- **sticky**: each consumer claims ranges of *slots* (inclusive, within 0..65535; a
  key's slot is ``(murmur3_32(key) & 0x7FFFFFFF) % 65536``, Pulsar's sticky hash), and
  a key goes to the consumer whose range holds its slot. Claims may not overlap (the
  second claim is refused with `ConsumerBusyError`, naming the holder); keys whose slot
  nobody claims wait, held, until someone does.

A message's key here is its ordering key when it has one (the ``pulsar.ordering_key``
header a Pulsar producer's ordering key is stored as), else its key, as in Pulsar.

Batches: a consumer that takes only whole stored batches (``whole_batches``: a Pulsar
client without batch-index acks) cannot be given part of one, so while one is attached a
batch goes whole to the consumer of its *sticky key*, its first message's key (Pulsar's
rule: with key-based batching every message of a batch has that key). Otherwise every
message goes by its own key, and a batch of several keys is shared between consumers.

Order: a message of key k is handed to consumer C only when every earlier message of k
in its partition is acknowledged or held by C itself. So when k moves to a consumer
that just joined, k waits until the old holder has acknowledged (or dropped) its
messages of k, and a message of k that could not be sent (its consumer has no permits)
keeps every later message of k back too. Messages waiting that way are *held* (read,
not delivered); the partition reads ahead only while fewer than `MAX_HELD` are held.
"""

from __future__ import annotations

import base64
import binascii
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import Any

import mmh3

from weir.broker.subscriptions.consumer import AttachedConsumer
from weir.broker.subscriptions.settings import SubscriptionType
from weir.errors import BadRequestError, ConsumerBusyError
from weir.storage.batch import FLAG_HEADERS, Payload, decode_payload, iter_batches

POINTS = 100
MAX_HELD = 10_000
SLOTS = 1 << 16  # sticky ranges are of 0..SLOTS-1, as Pulsar's
ORDERING_KEY = "pulsar.ordering_key"  # header: a Pulsar ordering key (base64), routed by first
HASH_MASK = 0xFFFFFFFF  # `batch_keys` values: key hash | batch base offset << 32


def key_hash(key: bytes) -> int:
    return mmh3.hash(key, 0, signed=False)


def slot_of(h: int) -> int:
    """The sticky slot of a key hash (Pulsar: murmur3_32(key) & MAX_INT % 65536)."""
    return (h & 0x7FFFFFFF) % SLOTS


def check_hash_ranges(ranges: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sticky ranges as given by a consumer: sorted, each inside 0..65535, disjoint."""
    if not ranges:
        raise BadRequestError("a sticky Key_Shared consumer claims at least one hash range")
    out = sorted((int(a), int(b)) for a, b in ranges)
    for a, b in out:
        if not 0 <= a <= b < SLOTS:
            raise BadRequestError(
                f"a sticky hash range is START..END (inclusive) within 0..{SLOTS - 1}, got {a}..{b}"
            )
    for (a1, b1), (a2, b2) in pairwise(out):
        if a2 <= b1:
            raise BadRequestError(f"hash ranges {a1}..{b1} and {a2}..{b2} overlap")
    return tuple(out)


class KeySharedDispatcher:
    type = SubscriptionType.KEY_SHARED
    allows_cumulative = False
    max_batch = 500

    def __init__(self, subscription: str) -> None:
        self.subscription = subscription
        self._ring: list[int] = []
        self._owners: list[AttachedConsumer] = []
        self._members: tuple[int, ...] | None = None
        # sticky: range starts, ends and owners, sorted by start
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._holders: list[AttachedConsumer] = []

    def check_join(self, consumers: list[AttachedConsumer], new: AttachedConsumer) -> None:
        if not consumers:
            return
        sticky = new.hash_ranges is not None
        other = next((c for c in consumers if (c.hash_ranges is not None) != sticky), None)
        if other is not None:
            raise ConsumerBusyError(
                f"Key_Shared subscription {self.subscription!r} "
                + (
                    f"splits keys automatically (consumer {other.name!r}); a consumer with "
                    "sticky hash ranges cannot join it"
                    if sticky
                    else f"has sticky hash ranges (consumer {other.name!r}); a consumer "
                    "without ranges cannot join it"
                )
            )
        if new.hash_ranges is None:
            return
        for c in consumers:
            for a, b in c.hash_ranges or ():
                for x, y in new.hash_ranges:
                    if x <= b and a <= y:
                        raise ConsumerBusyError(
                            f"hash range {x}..{y} overlaps {a}..{b} of consumer {c.name!r} "
                            f"of Key_Shared subscription {self.subscription!r}"
                        )

    def owner(self, partition: int, consumers: list[AttachedConsumer]) -> AttachedConsumer | None:
        return None

    def pick(self, partition: int, consumers: list[AttachedConsumer]) -> AttachedConsumer | None:
        return next((c for c in consumers if c.permits > 0), None)

    def _build(self, consumers: list[AttachedConsumer]) -> None:
        members = tuple(c.consumer_id for c in consumers)
        if members == self._members:
            return
        self._members = members
        sticky = sorted((a, b, c.consumer_id, c) for c in consumers for a, b in c.hash_ranges or ())
        self._starts = [r[0] for r in sticky]
        self._ends = [r[1] for r in sticky]
        self._holders = [r[3] for r in sticky]
        points = sorted(
            (key_hash(f"{c.name}:{c.consumer_id}:{i}".encode()), c.consumer_id, c)
            for c in consumers
            if c.hash_ranges is None
            for i in range(POINTS)
        )
        self._ring = [p[0] for p in points]
        self._owners = [p[2] for p in points]

    def select(self, consumers: list[AttachedConsumer], h: int) -> AttachedConsumer | None:
        """The consumer key hash ``h`` belongs to (None: a sticky slot nobody claims)."""
        self._build(consumers)
        if self._starts:
            slot = slot_of(h)
            i = bisect_right(self._starts, slot) - 1
            return self._holders[i] if i >= 0 and slot <= self._ends[i] else None
        if not self._ring:
            return None
        i = bisect_left(self._ring, h)
        return self._owners[i if i < len(self._ring) else 0]


def routing_keys(p: Payload) -> list[bytes]:
    """The key each message of a batch is routed by: its ordering key, else its key."""
    keys = p.key_list()
    if p.header.flags & FLAG_HEADERS:
        for i, h in enumerate(p.header_list()):
            ok = h.get(ORDERING_KEY)
            if ok is not None:
                try:
                    keys[i] = base64.b64decode(ok, validate=True)
                except (binascii.Error, ValueError):
                    keys[i] = ok.encode()
    return keys


def message_keys(chunks: Iterable[Any], lo: int, hi: int) -> dict[int, int]:
    """offset -> key hash of the messages of ``[lo, hi)`` in stored chunks."""
    out: dict[int, int] = {}
    for chunk in chunks:
        for pos, h in iter_batches(chunk, verify=False):
            if h.next_offset <= lo:
                continue
            if h.base_offset >= hi:
                return out
            keys = routing_keys(decode_payload(chunk, pos, h))
            for i, k in enumerate(keys):
                o = h.base_offset + i
                if lo <= o < hi:
                    out[o] = key_hash(k)
    return out


def batch_keys(chunks: Iterable[Any], lo: int, hi: int) -> dict[int, int]:
    """offset -> the hash of its batch's sticky key (the first message's) | the batch's
    base offset << 32, for the messages of ``[lo, hi)`` (see `HASH_MASK`)."""
    out: dict[int, int] = {}
    for chunk in chunks:
        for pos, h in iter_batches(chunk, verify=False):
            if h.next_offset <= lo:
                continue
            if h.base_offset >= hi:
                return out
            v = key_hash(routing_keys(decode_payload(chunk, pos, h))[0]) | h.base_offset << 32
            for o in range(max(lo, h.base_offset), min(hi, h.next_offset)):
                out[o] = v
    return out
