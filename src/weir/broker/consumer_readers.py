"""Who reads a consumer's committed offsets besides its subscription consumers.

A consumer's committed offsets (one per partition) are also a Failover subscription of
the same name (`weir.broker.subscriptions.consumer_cursor`). They serve one kind of
reader at a time, as a Kafka group serves one protocol and a Pulsar subscription one
set of consumers: while subscription consumers are attached, the other readers of the
consumer (read-session groups, Kafka group members, read sessions that name their
partitions) are refused and their offset commits too; while any of those is live,
subscribing is refused. Each refusal is a `ConsumerBusyError`.

The fronts say who is reading: a *source* counts its live readers of (topic, consumer)
when asked (the Kafka front counts its group members), a *hold* is taken by a reader
for as long as it reads (a YDB read session that names its partitions).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

ReaderCount = Callable[[str, str], int]  # (full topic name, consumer) -> live readers


class ReaderHold:
    """One live reader of a consumer's offsets; `release` it when it stops (idempotent)."""

    def __init__(self, readers: ConsumerReaders, key: tuple[str, str, str]) -> None:
        self._readers = readers
        self._key: tuple[str, str, str] | None = key

    def release(self) -> None:
        if self._key is not None:
            self._readers._drop(self._key)
            self._key = None


class ConsumerReaders:
    """The live readers of consumers' committed offsets, by kind (see the module doc)."""

    def __init__(self) -> None:
        self._sources: dict[str, ReaderCount] = {}
        self._holds: Counter[tuple[str, str, str]] = Counter()  # (kind, topic, consumer)

    def add_source(self, kind: str, count: ReaderCount) -> None:
        """``count(topic, consumer)``: how many readers of ``kind`` read it now."""
        self._sources[kind] = count

    def remove_source(self, kind: str) -> None:
        self._sources.pop(kind, None)

    def hold(self, kind: str, topic: str, consumer: str) -> ReaderHold:
        key = (kind, topic, consumer)
        self._holds[key] += 1
        return ReaderHold(self, key)

    def _drop(self, key: tuple[str, str, str]) -> None:
        self._holds[key] -= 1
        if self._holds[key] <= 0:
            del self._holds[key]

    def busy(self, topic: str, consumer: str) -> str | None:
        """Who reads the consumer's offsets of ``topic`` now, e.g. "2 Kafka group
        member(s)" (None: nobody but its subscription consumers)."""
        found = [(kind, count(topic, consumer)) for kind, count in self._sources.items()]
        found += [(k, n) for (k, t, c), n in self._holds.items() if t == topic and c == consumer]
        found = [(kind, n) for kind, n in found if n > 0]
        if not found:
            return None
        return ", ".join(f"{n} {kind}(s)" for kind, n in sorted(found))
