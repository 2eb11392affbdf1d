"""Key_Shared: every key goes to one consumer at a time, and per-key order holds.

Keys map to consumers by consistent hashing (each consumer owns 100 points of a ring of
32-bit hashes; a key goes to the owner of the first point at or after its hash), so a
consumer joining or leaving moves only the keys of its arcs.

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
import zlib
from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

from weir.broker.subscriptions.consumer import AttachedConsumer
from weir.broker.subscriptions.settings import SubscriptionType
from weir.storage.batch import FLAG_HEADERS, Payload, decode_payload, iter_batches

POINTS = 100
MAX_HELD = 10_000
ORDERING_KEY = "pulsar.ordering_key"  # header: a Pulsar ordering key (base64), routed by first
HASH_MASK = 0xFFFFFFFF  # `batch_keys` values: key hash | batch base offset << 32


def key_hash(key: bytes) -> int:
    return zlib.crc32(key) & 0xFFFFFFFF


class KeySharedDispatcher:
    type = SubscriptionType.KEY_SHARED
    allows_cumulative = False
    max_batch = 500

    def __init__(self, subscription: str) -> None:
        self.subscription = subscription
        self._ring: list[int] = []
        self._owners: list[AttachedConsumer] = []
        self._members: tuple[int, ...] = ()

    def check_join(self, consumers: list[AttachedConsumer], new: AttachedConsumer) -> None:
        return None

    def owner(self, partition: int, consumers: list[AttachedConsumer]) -> AttachedConsumer | None:
        return None

    def pick(self, partition: int, consumers: list[AttachedConsumer]) -> AttachedConsumer | None:
        return next((c for c in consumers if c.permits > 0), None)

    def _build(self, consumers: list[AttachedConsumer]) -> None:
        members = tuple(c.consumer_id for c in consumers)
        if members == self._members:
            return
        points = sorted(
            (key_hash(f"{c.name}:{c.consumer_id}:{i}".encode()), c.consumer_id, c)
            for c in consumers
            for i in range(POINTS)
        )
        self._ring = [p[0] for p in points]
        self._owners = [p[2] for p in points]
        self._members = members

    def select(self, consumers: list[AttachedConsumer], h: int) -> AttachedConsumer:
        self._build(consumers)
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
