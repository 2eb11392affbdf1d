"""Key_Shared: every key goes to one consumer at a time, and per-key order holds.

Keys map to consumers by consistent hashing (each consumer owns 100 points of a ring of
32-bit hashes; a key goes to the owner of the first point at or after its hash), so a
consumer joining or leaving moves only the keys of its arcs.

Order: a message of key k is handed to consumer C only when every earlier message of k
in its partition is acknowledged or held by C itself. So when k moves to a consumer
that just joined, k waits until the old holder has acknowledged (or dropped) its
messages of k, and a message of k that could not be sent (its consumer has no permits)
keeps every later message of k back too. Messages waiting that way are *held* (read,
not delivered); the partition reads ahead only while fewer than `MAX_HELD` are held.
"""

from __future__ import annotations

import zlib
from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

from weir.broker.subscriptions.consumer import AttachedConsumer
from weir.broker.subscriptions.settings import SubscriptionType
from weir.storage.batch import decode_payload, iter_batches

POINTS = 100
MAX_HELD = 10_000


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


def message_keys(chunks: Iterable[Any], lo: int, hi: int) -> dict[int, int]:
    """offset -> key hash of the messages of ``[lo, hi)`` in stored chunks."""
    out: dict[int, int] = {}
    for chunk in chunks:
        for pos, h in iter_batches(chunk, verify=False):
            if h.next_offset <= lo:
                continue
            if h.base_offset >= hi:
                return out
            keys = decode_payload(chunk, pos, h).key_list()
            for i, k in enumerate(keys):
                o = h.base_offset + i
                if lo <= o < hi:
                    out[o] = key_hash(k)
    return out
