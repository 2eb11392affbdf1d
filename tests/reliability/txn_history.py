"""Transaction rules, judged after the fact (beside history.py, reusing its message ids).

A transactional workload records each transaction it runs: the messages it wrote
(``history.make_data`` ids, their producer named after the transaction), whether
the server acknowledged each write, the consumer offsets it commits, and how it
ended as the client saw it:

- ``committed``: the commit was acknowledged;
- ``aborted``: the abort was acknowledged, or the server said the transaction had
  ended without committing (timed out, aborted at a restart);
- ``unknown``: the end call got no answer (the server was killed): either outcome
  may have happened, but exactly one.

After the last restart the final contents are read twice, read committed and read
uncommitted, with the consumers' committed offsets. `check` then judges:

- ``half_visible``: some of a transaction's messages are visible to read-committed
  readers and others are not, or its messages and its offsets disagree (offsets
  moved without its messages, or its messages are there and its offsets did not
  move that far): a transaction is all or nothing.
- ``lost_commits``: an acknowledged commit whose messages (or offsets) are not all
  visible to read-committed readers after the restart.
- ``aborted_visible``: a message of a transaction that ended aborted is visible to a
  read-committed reader (at the end, or delivered live during the run).
- ``duplicated``: a message visible twice to read-committed readers.
- ``phantoms``: a read-committed message no transaction wrote.
- ``lost_writes``: an acknowledged write is missing from the read-uncommitted
  contents (transactional messages are stored at once, Kafka-style, aborted or not).

Offsets: each transaction sets its consumer's next offset to a value no other
transaction of that consumer uses, so the final committed offset names the last
transaction that moved it.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

from tests.reliability.history import message_id, parse_id

OUTCOMES = ("committed", "aborted", "unknown")
TXN_VIOLATIONS = (
    "half_visible",
    "lost_commits",
    "aborted_visible",
    "duplicated",
    "phantoms",
    "lost_writes",
)
OffsetKey = tuple[str, int]  # (consumer, partition key)


@dataclass
class TxnRecord:
    name: str
    writes: list[str] = field(default_factory=list)  # message ids, in write order
    acked: set[str] = field(default_factory=set)
    offsets: dict[OffsetKey, int] = field(default_factory=dict)
    outcome: str = "unknown"


@dataclass
class TxnReport:
    transactions: dict[str, int] = field(default_factory=dict)  # outcome -> count
    visible: int = 0
    half_visible: list[str] = field(default_factory=list)
    lost_commits: list[str] = field(default_factory=list)
    aborted_visible: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    phantoms: list[str] = field(default_factory=list)
    lost_writes: list[str] = field(default_factory=list)

    def violations(self) -> dict[str, list[str]]:
        return {k: getattr(self, k) for k in TXN_VIOLATIONS if getattr(self, k)}

    @property
    def ok(self) -> bool:
        return not self.violations()

    def summary(self) -> str:
        head = f"transactions={self.transactions} visible={self.visible}"
        bad = " ".join(f"{k}={len(v)} e.g. {v[:5]}" for k, v in self.violations().items())
        return head + (" VIOLATIONS: " + bad if bad else " no violations")


class TxnHistory:
    """Thread-safe log of the transactions a workload ran and what readers saw live."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.txns: dict[str, TxnRecord] = {}
        self.live: list[str] = []  # message ids a read-committed reader delivered
        self._ended = 0

    def begin(self, name: str) -> None:
        with self._lock:
            if name in self.txns:
                raise ValueError(f"transaction {name} recorded twice")
            self.txns[name] = TxnRecord(name)

    def wrote(self, name: str, data: bytes) -> None:
        with self._lock:
            self.txns[name].writes.append(message_id(data))

    def write_acked(self, name: str, data: bytes) -> None:
        with self._lock:
            self.txns[name].acked.add(message_id(data))

    def offset(self, name: str, consumer: str, key: int, value: int) -> None:
        with self._lock:
            self.txns[name].offsets[(consumer, key)] = value

    def ended(self, name: str, outcome: str) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        with self._lock:
            self.txns[name].outcome = outcome
            self._ended += 1

    def ended_count(self) -> int:
        """How many transactions have an outcome recorded (the load makes progress)."""
        with self._lock:
            return self._ended

    def delivered_committed(self, data: bytes) -> None:
        with self._lock:
            self.live.append(message_id(data))


def check(
    h: TxnHistory,
    committed: dict[int, list[bytes]],
    uncommitted: dict[int, list[bytes]],
    offsets: dict[OffsetKey, int | None],
) -> TxnReport:
    """Judge the history against the final contents: ``committed`` and ``uncommitted`` are
    every partition's messages (partition key -> data) as read-committed and
    read-uncommitted readers see them; ``offsets`` the consumers' committed offsets."""
    r = TxnReport(transactions=dict(Counter(t.outcome for t in h.txns.values())))
    owner: dict[str, TxnRecord] = {}
    for t in h.txns.values():
        for mid in t.writes:
            owner[mid] = t
    seen = Counter(message_id(d) for msgs in committed.values() for d in msgs)
    r.visible = sum(seen.values())
    stored = {message_id(d) for msgs in uncommitted.values() for d in msgs}

    for mid, n in seen.items():
        if n > 1:
            r.duplicated.append(f"{mid} visible {n} times")
        if mid not in owner:
            r.phantoms.append(mid if parse_id(mid) else f"unparsable {mid!r}")
    for mid in h.live:
        writer = owner.get(mid)
        if writer is None:
            r.phantoms.append(f"{mid} (delivered live)")
        elif writer.outcome == "aborted":
            r.aborted_visible.append(f"{mid} of aborted {writer.name} (delivered live)")

    for t in h.txns.values():
        present = [m for m in t.writes if seen[m]]
        for m in t.acked - stored:
            r.lost_writes.append(f"{m} of {t.name}: acknowledged, not stored")
        if present and len(present) != len(t.writes):
            missing = [m for m in t.writes if not seen[m]]
            r.half_visible.append(
                f"{t.name}: {len(present)} of {len(t.writes)} messages visible, missing e.g. "
                f"{missing[:3]}"
            )
        moved = _offsets(t, offsets)
        if t.outcome == "aborted":
            if present:
                r.aborted_visible.append(f"{t.name}: {len(present)} messages, e.g. {present[:3]}")
            if moved == MOVED:
                r.aborted_visible.append(f"{t.name}: its offsets moved")
            continue
        if t.outcome == "committed":
            if len(present) != len(t.writes):
                r.lost_commits.append(
                    f"{t.name}: acknowledged, {len(t.writes) - len(present)} of "
                    f"{len(t.writes)} messages not visible"
                )
            if moved == NOT_MOVED:
                r.lost_commits.append(f"{t.name}: acknowledged, its offsets did not move")
        elif t.writes:  # unknown: either outcome, but its messages and offsets together
            if present and moved == NOT_MOVED:
                r.half_visible.append(f"{t.name}: messages visible, offsets did not move")
            if not present and moved == MOVED:
                r.half_visible.append(f"{t.name}: offsets moved, messages not visible")
    return r


MOVED, NOT_MOVED, UNKNOWABLE = "moved", "not moved", "unknowable"


def _offsets(t: TxnRecord, final: dict[OffsetKey, int | None]) -> str:
    """What the final offsets say of ``t``'s: NOT_MOVED when one is below ``t``'s value (its
    commit did not happen: offsets only move forward), MOVED when they are ``t``'s own
    values (``t`` moved them last), else UNKNOWABLE (a later transaction moved them on, or
    ``t`` has none)."""
    if not t.offsets:
        return UNKNOWABLE
    exact = True
    for k, v in t.offsets.items():
        got = final.get(k)
        if got is None or got < v:
            return NOT_MOVED
        exact = exact and got == v
    return MOVED if exact else UNKNOWABLE
