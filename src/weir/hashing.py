"""Key hashes that choose a partition, one per ecosystem, in one place every front and the
SDK import (it depends on nothing of weir's).

* ``murmur3``: Pulsar's client (``Murmur3_32Hash``): MurmurHash3 x86_32 of the key
  bytes, seed 0, sign bit cleared, modulo the partition count.
* ``murmur2``: Kafka's Java client's default partitioner (``Utils.murmur2``, seed
  0x9747b28c), ``& 0x7fffffff``, modulo the partition count; librdkafka's
  ``murmur2_random`` partitioner computes the same for keyed messages.

So a key lands in the partition that ecosystem's clients would choose for it.
"""

from __future__ import annotations

import enum

import mmh3

from weir.errors import BadRequestError

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data`` as an unsigned 32-bit value."""
    n = len(data)
    h = (_SEED ^ n) & _MASK
    end = n - n % 4
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = n % 4
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def murmur3_32(data: bytes) -> int:
    """MurmurHash3 x86_32 of ``data`` with seed 0, unsigned (Pulsar's ``Murmur3_32Hash``)."""
    return int(mmh3.hash(data, 0, signed=False))


def kafka_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def pulsar_partition(key: bytes, partitions: int) -> int:
    """The partition Pulsar's client picks for a keyed message."""
    return (murmur3_32(key) & 0x7FFFFFFF) % partitions


class KeyHash(enum.Enum):
    """A key hash by name: ``KeyHash.parse("murmur2").partition(key, n)``."""

    MURMUR3 = "murmur3"
    MURMUR2 = "murmur2"

    @classmethod
    def parse(cls, value: str | KeyHash) -> KeyHash:
        if isinstance(value, KeyHash):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            raise BadRequestError(
                f"unknown key hash {value!r}: use murmur3 (Pulsar's) or murmur2 (Kafka's)"
            ) from None

    def partition(self, key: bytes, partitions: int) -> int:
        if self is KeyHash.MURMUR2:
            return kafka_partition(key, partitions)
        return pulsar_partition(key, partitions)
