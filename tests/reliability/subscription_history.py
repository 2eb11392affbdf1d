"""Subscription positions under faults: acknowledgements a server confirmed, and what it
delivered afterwards (a rule beside `tests.reliability.history`, which judges the messages).

Clients such as pulsar-client send acknowledgements without waiting for an answer, so an
ack the client sent is not yet a promise of the server. A *confirmation* is: the server
answered a later request of the same consumer that it only answers once the consumer's
earlier acks are durable (the Pulsar front's CloseConsumer). The test records, per
subscription:

- each consumer *incarnation* (`opened`: one subscribe of a consumer object), whose
  deliveries were all dispatched after it was opened;
- the acks each incarnation sent (`acked`), and its confirmations (`confirmed`), which
  cover every ack it sent before, and cumulative positions (partition key -> last offset);
- every delivery (`delivered`).

`check` then judges, per subscription:

- ``acked_redelivered``: a message delivered to an incarnation opened after an ack of it
  was confirmed (an acknowledged position was lost: by a restart, or never stored);
- ``never_delivered``: a stored message no incarnation of the subscription ever received;
- ``never_confirmed``: a stored message whose ack was never confirmed (the run did not
  get every message acknowledged: the subscription stalled, or lost one).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tests.reliability.history import History

SUB_VIOLATIONS = ("acked_redelivered", "never_delivered", "never_confirmed")


@dataclass
class SubscriptionReport:
    incarnations: int = 0
    delivered: int = 0
    acked: int = 0
    confirmations: int = 0
    checked_after_confirmation: int = 0  # deliveries to incarnations opened after one
    acked_redelivered: list[str] = field(default_factory=list)
    never_delivered: list[str] = field(default_factory=list)
    never_confirmed: list[str] = field(default_factory=list)

    def violations(self) -> dict[str, list[str]]:
        return {k: getattr(self, k) for k in SUB_VIOLATIONS if getattr(self, k)}

    @property
    def ok(self) -> bool:
        return not self.violations()

    def summary(self) -> str:
        head = (
            f"incarnations={self.incarnations} delivered={self.delivered} acked={self.acked} "
            f"confirmations={self.confirmations} "
            f"checked_after_confirmation={self.checked_after_confirmation}"
        )
        bad = " ".join(f"{k}={len(v)} e.g. {v[:5]}" for k, v in self.violations().items())
        return head + (" VIOLATIONS: " + bad if bad else " no violations")


class SubscriptionHistory:
    """Thread-safe; its clock is the message history's (`History.clock`)."""

    def __init__(self, history: History) -> None:
        self.history = history
        self._lock = threading.Lock()
        self.opened_at: dict[int, str] = {}  # incarnation -> subscription
        self.deliveries: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        self._acks: dict[int, list[tuple[int, int]]] = defaultdict(list)  # inc -> (key, offset)
        # subscription -> (clock, key, offset): the ack of (key, offset) durable at clock
        self.confirmed_acks: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        # subscription -> (clock, key, last offset): a cumulative position durable at clock
        self.confirmed_through: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        self.confirmations = 0

    def opened(self, sub: str) -> int:
        """A consumer of ``sub`` is about to subscribe: its incarnation (a clock value)."""
        inc = self.history.clock()
        with self._lock:
            self.opened_at[inc] = sub
        return inc

    def delivered(self, sub: str, inc: int, key: int, offset: int) -> None:
        with self._lock:
            self.deliveries[sub].append((inc, key, offset))

    def acked(self, inc: int, key: int, offset: int) -> None:
        """Incarnation ``inc`` sent an individual acknowledgement of (key, offset)."""
        with self._lock:
            self._acks[inc].append((key, offset))

    def confirmed(self, inc: int, through: Mapping[int, int] | None = None) -> None:
        """The server confirmed every ack ``inc`` sent so far, and the cumulative positions
        ``through`` (partition key -> last offset acknowledged)."""
        clock = self.history.clock()
        with self._lock:
            sub = self.opened_at[inc]
            self.confirmed_acks[sub].extend((clock, k, o) for k, o in self._acks[inc])
            self.confirmed_through[sub].extend((clock, k, o) for k, o in (through or {}).items())
            self.confirmations += 1


class _Confirmed:
    """When each (key, offset) of one subscription was first known acknowledged."""

    def __init__(self, sh: SubscriptionHistory, sub: str) -> None:
        self.first: dict[tuple[int, int], int] = {}
        for clock, k, o in sh.confirmed_acks.get(sub, []):
            cur = self.first.get((k, o))
            if cur is None or clock < cur:
                self.first[(k, o)] = clock
        # per key: cumulative confirmations in clock order, and the running highest position
        self.clocks: dict[int, list[int]] = defaultdict(list)
        self.highs: dict[int, list[int]] = defaultdict(list)
        for clock, k, o in sorted(sh.confirmed_through.get(sub, [])):
            self.clocks[k].append(clock)
            self.highs[k].append(max(o, self.highs[k][-1]) if self.highs[k] else o)
        self.earliest = min(
            [*self.first.values(), *(c[0] for c in self.clocks.values())], default=None
        )

    def before(self, k: int, o: int, t: int) -> bool:
        """Whether an acknowledgement of (k, o) was confirmed before clock ``t``."""
        c = self.first.get((k, o))
        if c is not None and c < t:
            return True
        i = bisect_left(self.clocks.get(k, []), t)
        return bool(i) and self.highs[k][i - 1] >= o


def check_subscriptions(
    sh: SubscriptionHistory, stored: Mapping[int, Iterable[int]], subscriptions: Iterable[str]
) -> SubscriptionReport:
    """Judge every subscription of ``subscriptions`` against the stored offsets of each
    partition key (all of them are to reach every subscription)."""
    everything = {(k, o) for k, offsets in stored.items() for o in offsets}
    r = SubscriptionReport(
        incarnations=len(sh.opened_at),
        delivered=sum(len(v) for v in sh.deliveries.values()),
        acked=sum(len(v) for v in sh._acks.values()),
        confirmations=sh.confirmations,
    )
    end = 1 << 62
    for sub in subscriptions:
        confirmed = _Confirmed(sh, sub)
        seen: set[tuple[int, int]] = set()
        for inc, k, o in sh.deliveries.get(sub, []):
            seen.add((k, o))
            if confirmed.earliest is not None and inc > confirmed.earliest:
                r.checked_after_confirmation += 1
            if confirmed.before(k, o, inc):
                r.acked_redelivered.append(
                    f"{sub} k{k}/{o}: delivered to an incarnation opened at {inc}, "
                    "after its ack was confirmed"
                )
        r.never_delivered += sorted(f"{sub} k{k}/{o}" for k, o in everything - seen)
        r.never_confirmed += sorted(
            f"{sub} k{k}/{o}" for k, o in everything if not confirmed.before(k, o, end)
        )
    return r
