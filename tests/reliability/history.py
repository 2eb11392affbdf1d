"""A history of operations and a checker that judges it after the fact (Jepsen style).

Producers record every message they attempted and every ack they got; consumers
record every message delivered (with the reader session that delivered it) and
every commit the server acknowledged; at the end the whole topic is read back.
`check` then verifies the promises:

- every acknowledged message is readable exactly once, at one offset;
- no message is stored twice (acknowledged or not: dedup must hold);
- offsets are dense per partition;
- within one reader session a partition's offsets never go backwards;
- a consumer's committed offsets never move backwards.

Messages carry a unique id in their data (``id:<producer>:<n>``), so every
observation can be tied back to the attempt.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field


def message_id(data: bytes) -> str:
    head = data.split(b"|", 1)[0]
    return head.decode()


def make_data(producer: str, n: int, size: int) -> bytes:
    head = f"id:{producer}:{n}|".encode()
    return head + b"." * max(0, size - len(head))


@dataclass
class Report:
    attempted: int = 0
    acknowledged: int = 0
    delivered: int = 0
    stored: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)  # one message at two offsets
    gaps: list[str] = field(default_factory=list)
    backwards_reads: list[str] = field(default_factory=list)
    backwards_commits: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.duplicated
            or self.moved
            or self.gaps
            or self.backwards_reads
            or self.backwards_commits
        )

    def summary(self) -> str:
        def few(xs: list[str]) -> str:
            return f"{len(xs)}" + (f" e.g. {xs[:5]}" if xs else "")

        return (
            f"attempted={self.attempted} acknowledged={self.acknowledged} delivered={self.delivered} "
            f"stored={self.stored} lost={few(self.lost)} duplicated={few(self.duplicated)} "
            f"moved={few(self.moved)} gaps={few(self.gaps)} backwards_reads={few(self.backwards_reads)} "
            f"backwards_commits={few(self.backwards_commits)}"
        )


class History:
    """Thread-safe log of what clients attempted and observed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.attempts: set[str] = set()
        self.acks: dict[
            str, tuple[int, int | None]
        ] = {}  # id -> (partition, offset or None if skipped)
        self.deliveries: list[tuple[str, int, int, str]] = []  # (session, partition, offset, id)
        self.commits: list[
            tuple[str, int, int]
        ] = []  # (consumer, partition, committed offset) as acked, in order
        self.faults: list[str] = []

    def attempted(self, mid: str) -> None:
        with self._lock:
            self.attempts.add(mid)

    def acked(self, mid: str, partition: int, offset: int | None) -> None:
        with self._lock:
            self.acks[mid] = (partition, offset)

    def delivered(self, session: str, partition: int, offset: int, mid: str) -> None:
        with self._lock:
            self.deliveries.append((session, partition, offset, mid))

    def committed(self, consumer: str, partition: int, offset: int) -> None:
        with self._lock:
            self.commits.append((consumer, partition, offset))

    def fault(self, what: str) -> None:
        with self._lock:
            self.faults.append(what)


def check(
    history: History, stored: dict[int, list[tuple[int, str]]], start_offsets: dict[int, int]
) -> Report:
    """Judge a history against the final contents: partition -> [(offset, id)] from start to end."""
    r = Report(
        attempted=len(history.attempts),
        acknowledged=len(history.acks),
        delivered=len(history.deliveries),
    )
    where: dict[str, set[tuple[int, int]]] = defaultdict(set)
    seen_stored: dict[str, int] = defaultdict(int)
    for p, rows in stored.items():
        expect = start_offsets.get(p, rows[0][0] if rows else 0)
        for offset, mid in rows:
            if offset != expect:
                r.gaps.append(f"p{p}: offset {offset}, expected {expect}")
            expect = offset + 1
            seen_stored[mid] += 1
            where[mid].add((p, offset))
        r.stored += len(rows)
    r.duplicated = sorted(m for m, n in seen_stored.items() if n > 1)
    for _session, p, offset, mid in history.deliveries:
        where[mid].add((p, offset))
    r.moved = sorted(m for m, locs in where.items() if len(locs) > 1)
    for mid, (p, offset) in history.acks.items():
        if mid not in where:
            r.lost.append(mid)
        elif offset is not None and (p, offset) not in where[mid]:
            r.moved.append(f"{mid} acked at p{p}/{offset}, found at {sorted(where[mid])}")
    last: dict[tuple[str, int], int] = {}
    for session, p, offset, _mid in history.deliveries:
        key = (session, p)
        if key in last and offset <= last[key]:
            r.backwards_reads.append(f"session {session} p{p}: {offset} after {last[key]}")
        last[key] = offset
    high: dict[tuple[str, int], int] = {}
    for consumer, p, offset in history.commits:
        key = (consumer, p)
        if key in high and offset < high[key]:
            r.backwards_commits.append(f"{consumer} p{p}: {offset} after {high[key]}")
        high[key] = max(offset, high.get(key, offset))
    return r
