"""Live producers and consumers per topic, held to the max_*_per_topic policies.

A write session takes a `Lease` when it opens and gives it back when it ends; the
lease of a producer id that reconnects replaces its old one (the broker closes the
old session), so a reconnect never counts twice.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field

from weir.errors import TooManyConsumersError, TooManyProducersError

_ids = itertools.count(1)


@dataclass(eq=False)
class Lease:
    """One live session on one topic; `release` is idempotent."""

    counter: SessionCounter
    topic: str
    key: str
    id: int = field(default_factory=lambda: next(_ids))

    def release(self) -> None:
        self.counter._release(self)


class SessionCounter:
    """Counts live sessions of one kind (producers or consumers) per topic."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._live: dict[str, dict[str, Lease]] = defaultdict(dict)

    def count(self, topic: str) -> int:
        return len(self._live.get(topic, ()))

    def acquire(self, topic: str, limit: int | None, key: str = "", shown: str = "") -> Lease:
        """A lease, or TooMany...Error when ``limit`` sessions are live (``key`` names a
        session that replaces an earlier one with the same key; empty: always a new one)."""
        live = self._live[topic]
        lease = Lease(self, topic, key)
        k = key or f"#{lease.id}"
        if limit is not None and k not in live and len(live) >= limit:
            error = TooManyProducersError if self.kind == "producers" else TooManyConsumersError
            raise error(
                f"topic {shown or topic!r} has {len(live)} live {self.kind}, the most its "
                f"max_{self.kind}_per_topic policy allows ({limit}); try again when one leaves"
            )
        live[k] = lease
        return lease

    def _release(self, lease: Lease) -> None:
        live = self._live.get(lease.topic)
        if not live:
            return
        k = lease.key or f"#{lease.id}"
        if live.get(k) is lease:
            del live[k]
        if not live:
            del self._live[lease.topic]
