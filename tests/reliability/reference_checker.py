"""The straightforward checker, kept as the oracle of the compact one (`checker.py`).

This is the checker as it was before the history became compact: every observation a
Python object, every rule a few dictionaries. It needs about 1.4 KB per acknowledged
message, too much for a soak, but it is short enough to read rule by rule.
`test_checker_reference.py` records random small histories into both and asserts that
they report exactly the same violations; the rules are described in `checker.py`.
The records (`Stored`, `Ack`, the commit observations, message ids) are the history's own;
the rules here are independent of it.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field

from tests.reliability.history import (
    TOPIC_STRIDE,
    Ack,
    CommitAck,
    CommitSeen,
    Stored,
    parse_id,
)

VIOLATIONS = (
    "lost",
    "retained_unread",
    "reused_offsets",
    "duplicated",
    "reordered",
    "phantoms",
    "gaps",
    "backwards_reads",
    "lost_commits",
    "pin_moves",
)


@dataclass
class Report:
    attempted: int = 0
    acknowledged: int = 0
    delivered: int = 0
    stored: int = 0
    retained: int = 0  # acknowledged, below the final start offset (removed by retention)
    commits_acked: int = 0
    commit_checks: int = 0
    lost: list[str] = field(default_factory=list)
    retained_unread: list[str] = field(default_factory=list)
    reused_offsets: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    reordered: list[str] = field(default_factory=list)
    phantoms: list[str] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    backwards_reads: list[str] = field(default_factory=list)
    lost_commits: list[str] = field(default_factory=list)
    pin_moves: list[str] = field(default_factory=list)

    def violations(self) -> dict[str, list[str]]:
        """Every violation kind that occurred, with its instances."""
        return {k: getattr(self, k) for k in VIOLATIONS if getattr(self, k)}

    @property
    def ok(self) -> bool:
        return not self.violations()

    def summary(self) -> str:
        head = (
            f"attempted={self.attempted} acknowledged={self.acknowledged} "
            f"delivered={self.delivered} stored={self.stored} retained={self.retained} "
            f"commits_acked={self.commits_acked} commit_checks={self.commit_checks}"
        )
        bad = " ".join(f"{k}={len(v)} e.g. {v[:5]}" for k, v in self.violations().items())
        return head + (" VIOLATIONS: " + bad if bad else " no violations")


class History:
    """Thread-safe log of what clients attempted and observed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clock = 0
        self.attempts: set[str] = set()
        self.acks: dict[str, list[Ack]] = defaultdict(list)
        self.deliveries: list[tuple[str, int, int, str]] = []  # (session, key, offset, id)
        self.commit_acks: list[CommitAck] = []
        self.commit_seen: list[CommitSeen] = []
        self.faults: list[str] = []
        self.errors: list[str] = []  # client errors the load did not expect

    def clock(self) -> int:
        """A point in the history: events recorded later get a higher clock."""
        with self._lock:
            self._clock += 1
            return self._clock

    def attempted(self, mid: str) -> None:
        with self._lock:
            self.attempts.add(mid)

    def acked(self, mid: str, key: int, offset: int | None) -> None:
        with self._lock:
            self.acks[mid].append(Ack(key, offset))

    def delivered(self, session: str, key: int, offset: int, mid: str) -> None:
        with self._lock:
            self.deliveries.append((session, key, offset, mid))

    def commit_acked(self, consumer: str, key: int, offset: int) -> None:
        """The server acknowledged a commit of ``offset`` (commit_with_ack returned)."""
        with self._lock:
            self._clock += 1
            self.commit_acks.append(CommitAck(self._clock, consumer, key, offset))

    def commit_observed(self, since: int, consumer: str, key: int, offset: int, when: str) -> None:
        """The server reported ``offset`` as committed, asked after clock ``since``."""
        with self._lock:
            self.commit_seen.append(CommitSeen(since, consumer, key, offset, when))

    def fault(self, what: str) -> None:
        with self._lock:
            self.faults.append(what)

    def error(self, what: str) -> None:
        with self._lock:
            self.errors.append(what)


def check(
    history: History,
    stored: dict[int, list[Stored]] | dict[int, list[tuple[int, str]]],
    start_offsets: dict[int, int],
    protected: dict[int, int] | None = None,
    routed: Collection[str] = (),
) -> Report:
    """Judge a history against the final contents.

    ``stored``: partition key -> its messages from the start offset to the end;
    ``start_offsets``: the final start offset of each partition (absent: 0);
    ``protected``: for partitions with an important consumer, its final committed offset.
    ``routed``: producers (the id's producer part) that write to several partitions by
    key (routing writers): exempt from ``pin_moves``; their order is judged per partition.
    """
    rows_of = {
        k: [r if isinstance(r, Stored) else Stored(*r) for r in v] for k, v in stored.items()
    }
    r = Report(
        attempted=len(history.attempts),
        acknowledged=len(history.acks),
        delivered=len(history.deliveries),
        commits_acked=len(history.commit_acks),
        commit_checks=len(history.commit_seen),
    )
    at: dict[str, list[tuple[int, int]]] = defaultdict(list)  # id -> stored (key, offset)s
    held: dict[tuple[int, int], set[str]] = defaultdict(set)  # (key, offset) -> ids claimed
    for key, rows in sorted(rows_of.items()):
        expect = start_offsets.get(key, rows[0].offset if rows else 0)
        for row in rows:
            if row.offset != expect:
                r.gaps.append(f"k{key}: offset {row.offset}, expected {expect}")
            expect = row.offset + 1
            at[row.mid].append((key, row.offset))
            held[(key, row.offset)].add(row.mid)
        r.stored += len(rows)
    for mid, acks in history.acks.items():
        for a in acks:
            if a.offset is not None:
                held[(a.key, a.offset)].add(mid)
    for _session, key, offset, mid in history.deliveries:
        held[(key, offset)].add(mid)
    r.reused_offsets = sorted(
        f"k{k}/{o}: {sorted(ids)}" for (k, o), ids in held.items() if len(ids) > 1
    )

    # phantoms: stored or delivered, never attempted
    seen_ids = set(at) | {mid for *_, mid in history.deliveries}
    r.phantoms = sorted(m for m in seen_ids if m not in history.attempts)

    # duplicated: one message at two offsets (stored, acknowledged or delivered there)
    places: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for mid, locs in at.items():
        places[mid].update(locs)
    for mid, acks in history.acks.items():
        places[mid].update((a.key, a.offset) for a in acks if a.offset is not None)
    for _session, key, offset, mid in history.deliveries:
        places[mid].add((key, offset))
    r.duplicated = sorted(f"{m} at {sorted(locs)}" for m, locs in places.items() if len(locs) > 1)

    # lost: acked, not stored, and retention does not account for it
    first_stored: dict[tuple[str, int], int] = {}  # (producer, key) -> lowest n stored
    for mid, locs in at.items():
        pn = parse_id(mid)
        if pn is not None:
            for k, _o in locs:
                cur = first_stored.get((pn[0], k))
                first_stored[(pn[0], k)] = pn[1] if cur is None else min(cur, pn[1])
    for mid, acks in sorted(history.acks.items()):
        if mid in at:
            continue
        key = acks[0].key
        start = start_offsets.get(key, 0)
        known = [a.offset for a in acks if a.offset is not None]
        if known:
            if min(known) >= start:
                r.lost.append(f"{mid} (acked at k{key}/{min(known)}, start offset {start})")
            else:
                r.retained += 1
            continue
        # skipped as a duplicate: offset unknown. Retention removes a prefix, so it can
        # account for the message only if no earlier message of its producer is still there.
        pn = parse_id(mid)
        earlier = pn is not None and first_stored.get((pn[0], key), pn[1]) < pn[1]
        if start == 0 or earlier:
            r.lost.append(f"{mid} (acked as already stored in k{key}, start offset {start})")
        else:
            r.retained += 1

    # retention must not pass an important consumer's committed offset
    for key, committed in sorted((protected or {}).items()):
        start = start_offsets.get(key, 0)
        if start > committed:
            r.retained_unread.append(f"k{key}: start offset {start} > committed {committed}")

    # order: per producer and partition, stored order follows write order / seq_no
    last_n: dict[tuple[str, int], tuple[int, int]] = {}
    last_seq: dict[tuple[str, int], tuple[int, int]] = {}
    for key, rows in sorted(rows_of.items()):
        for row in rows:
            if len(places[row.mid]) > 1:
                continue  # a duplicate is reported as such, not again as a reorder
            pn = parse_id(row.mid)
            if pn is not None:
                prev = last_n.get((pn[0], key))
                if prev is not None and pn[1] <= prev[0]:
                    r.reordered.append(
                        f"k{key}/{row.offset}: {row.mid} after n={prev[0]} at {prev[1]}"
                    )
                last_n[(pn[0], key)] = (pn[1], row.offset)
            if row.producer_id:
                prev = last_seq.get((row.producer_id, key))
                if prev is not None and row.seq_no <= prev[0]:
                    r.reordered.append(
                        f"k{key}/{row.offset}: producer {row.producer_id} seq_no {row.seq_no} "
                        f"after {prev[0]} at {prev[1]}"
                    )
                last_seq[(row.producer_id, key)] = (row.seq_no, row.offset)

    # a producer's pin never moves: all its messages in one partition of a topic
    parts: dict[tuple[str, int], set[int]] = defaultdict(set)
    for mid, acks in history.acks.items():
        pn = parse_id(mid)
        if pn is not None:
            for a in acks:
                parts[(pn[0], a.key // TOPIC_STRIDE)].add(a.key)
    for mid, locs in at.items():
        pn = parse_id(mid)
        if pn is not None:
            for k, _o in locs:
                parts[(pn[0], k // TOPIC_STRIDE)].add(k)
    r.pin_moves = sorted(
        f"producer {p} in partitions {sorted(ks)}"
        for (p, _t), ks in parts.items()
        if len(ks) > 1 and p not in routed
    )

    # reads: one session never goes back in a partition
    last: dict[tuple[str, int], int] = {}
    for session, key, offset, _mid in history.deliveries:
        if (session, key) in last and offset <= last[(session, key)]:
            r.backwards_reads.append(
                f"session {session} k{key}: {offset} after {last[(session, key)]}"
            )
        last[(session, key)] = offset

    # commits: a reported position is never below a commit acknowledged before the report
    clocks: dict[tuple[str, int], list[int]] = defaultdict(list)
    highs: dict[tuple[str, int], list[int]] = defaultdict(list)  # running max of acked offsets
    for a in sorted(history.commit_acks):
        k2 = (a.consumer, a.key)
        clocks[k2].append(a.clock)
        highs[k2].append(max(a.offset, highs[k2][-1]) if highs[k2] else a.offset)
    for seen in history.commit_seen:
        k2 = (seen.consumer, seen.key)
        i = bisect_left(clocks.get(k2, []), seen.clock)
        if i and seen.offset < highs[k2][i - 1]:
            r.lost_commits.append(
                f"{seen.consumer} k{seen.key} ({seen.when}): committed {seen.offset}, "
                f"acknowledged {highs[k2][i - 1]} before"
            )
    return r
