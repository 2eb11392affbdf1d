"""The checker: judges a `History` against the final contents, after the fact.

Each violation kind has its own list in the `Report`:

- ``lost``: an acknowledged message is not stored at the end, and retention does not
  account for it (its offset is not below the partition's final start offset). Having
  been delivered before does not excuse it.
- ``retained_unread``: retention removed offsets an *important* consumer had not
  committed (the start offset is past its committed offset).
- ``reused_offsets``: one offset of a partition held two different messages (two acks,
  an ack and a delivery, or a delivery and the final contents).
- ``duplicated``: one message at two offsets: stored twice, or stored, acknowledged or
  delivered at one offset and stored at another (dedup failed, and retention may have
  removed one copy since; or the message moved).
- ``reordered``: a producer's messages stored out of its write order (the ``n`` in
  their id), or a server producer id's seq_nos not increasing.
- ``phantoms``: a message stored or delivered (by a reader or a subscription) that no
  producer ever sent.
- ``gaps``: offsets not dense from the start offset.
- ``backwards_reads``: one reader session saw a partition's offsets go back.
- ``lost_commits``: a committed position the server reported is below a commit it had
  acknowledged before that report was asked for.
- ``pin_moves``: a producer's messages (acks or stored) in two partitions of a topic:
  its pin moved, and with it its order and dedup state (routing writers, named in
  ``routed``, write to several partitions on purpose).

Subscriptions (durable cursors, individual and cumulative acks, dead letters):

- ``sub_acked_redelivered``: a message delivered to a subscription after the server had
  answered an ack of it (individual, or cumulative up to an offset at or above it): by a
  later server lifetime, or to a client opened after the answer.
- ``sub_repeated``: one server lifetime delivered a message twice to a subscription
  without raising its redelivery count (every redelivery the broker makes raises it: a
  negative ack, an ack timeout, a consumer leaving; a seek clears the counts, so a test
  that seeks is not judged by this rule).
- ``sub_unacked``: a message of a subscription's range (from its first offset to the
  end of the partition) is at the end neither acknowledged (an answered individual ack,
  or a cumulative one covering it) nor in the dead-letter topic.

A subscription's deliveries and dead letters also claim their (partition, offset) like
a reader's deliveries, so a delivery of a message never produced is a ``phantom``, and
a delivery or a dead letter naming another message than the one stored there is a
``reused_offset``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from tests.reliability.history import (
    ACKED,
    ATTEMPTED,
    N_BITS,
    N_MASK,
    NONE,
    PLACED,
    TOPIC_STRIDE,
    Ack,
    Contents,
    History,
    Stored,
    SubDeliveries,
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
    "sub_acked_redelivered",
    "sub_repeated",
    "sub_unacked",
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
    sub_delivered: int = 0
    sub_acked: int = 0  # answered individual acks (offsets) + cumulative acks
    dead_lettered: int = 0
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
    sub_acked_redelivered: list[str] = field(default_factory=list)
    sub_repeated: list[str] = field(default_factory=list)
    sub_unacked: list[str] = field(default_factory=list)

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
        if self.sub_delivered or self.sub_acked:
            head += (
                f" sub_delivered={self.sub_delivered} sub_acked={self.sub_acked} "
                f"dead_lettered={self.dead_lettered}"
            )
        bad = " ".join(f"{k}={len(v)} e.g. {v[:5]}" for k, v in self.violations().items())
        return head + (" VIOLATIONS: " + bad if bad else " no violations")


Place = tuple[int, int]


class _Judge:
    """One run of `check`: what the final contents add to the history, kept apart from
    it (a history can be judged more than once)."""

    def __init__(self, h: History, contents: Contents) -> None:
        self.h = h
        self.c = contents
        self.stored: dict[int, bytearray] = {}  # producer index -> stored flag per n
        self.first_stored: dict[tuple[int, int], int] = {}  # (producer, key) -> lowest n
        self.stored_keys: dict[int, set[int]] = defaultdict(set)  # producer -> keys
        self.s_place: dict[int, Place] = {}  # first stored place of a message not PLACED
        self.s_extra: dict[int, set[Place]] = defaultdict(set)  # other places
        self.s_reused: dict[Place, set[int]] = defaultdict(set)
        self.s_seen: set[int] = set()  # stored messages never attempted (phantom candidates)
        self.dead: dict[str, set[Place]] = defaultdict(set)

    def is_stored(self, ref: int) -> bool:
        flags = self.stored.get(ref >> N_BITS)
        n = ref & N_MASK
        return flags is not None and n < len(flags) and bool(flags[n])

    def place_of(self, ref: int) -> Place | None:
        prod = self.h.producer_of(ref)
        n = ref & N_MASK
        if prod.flags[n] & PLACED:
            return (prod.place_key[n], prod.place_off[n])
        return None

    def claim(self, ref: int, key: int, offset: int) -> None:
        """The final contents (or a dead letter) name ``ref`` at (key, offset)."""
        place = (key, offset)
        first = self.place_of(ref)
        if first is None:
            first = self.s_place.setdefault(ref, place)
        if first != place:
            self.s_extra[ref].add(place)
        holder = self.h.held_at(key, offset)
        if holder != NONE and holder != ref:
            self.s_reused[place].update((holder, ref))
        if not self.h.producer_of(ref).flags[ref & N_MASK] & ATTEMPTED:
            self.s_seen.add(ref)

    def places(self, ref: int) -> set[Place]:
        out: set[Place] = set()
        first = self.place_of(ref)
        if first is not None:
            out.add(first)
        out |= self.h.extra_places.get(ref, set())
        if ref in self.s_place:
            out.add(self.s_place[ref])
        out |= self.s_extra.get(ref, set())
        return out


def check(
    history: History,
    stored: Contents | dict[int, list[Stored]] | dict[int, list[tuple[int, str]]],
    start_offsets: dict[int, int],
    protected: dict[int, int] | None = None,
    routed: Collection[str] = (),
    subscriptions: Mapping[str, Mapping[int, int]] | None = None,
    dead_letters: Mapping[str, Iterable[tuple[int, int, str]]] | None = None,
) -> Report:
    """Judge a history against the final contents.

    ``stored``: the partitions read back from the start offset to the end (`Contents`,
    or rows per partition key); ``start_offsets``: the final start offset of each
    partition (absent: 0); ``protected``: for partitions with an important consumer,
    its final committed offset. ``routed``: producers (the id's producer part) that
    write to several partitions by key (routing writers): exempt from ``pin_moves``;
    their order is judged per partition. ``subscriptions``: subscription -> partition
    key -> the first offset it covers (its initial position): every message from there
    to the end must be acknowledged or dead-lettered. ``dead_letters``: subscription ->
    (partition key, offset, id) of each message found in its dead-letter topic (from the
    origin headers).
    """
    h = history
    contents = stored if isinstance(stored, Contents) else Contents.of(h, stored)
    with h._lock:  # the load has stopped; this keeps a straggler from changing the arrays
        return _check(
            h,
            contents,
            start_offsets,
            protected or {},
            routed,
            subscriptions or {},
            dead_letters or {},
        )


def _check(
    h: History,
    contents: Contents,
    start_offsets: dict[int, int],
    protected: dict[int, int],
    routed: Collection[str],
    subscriptions: Mapping[str, Mapping[int, int]],
    dead_letters: Mapping[str, Iterable[tuple[int, int, str]]],
) -> Report:
    r = Report(
        attempted=h.attempted_count,
        acknowledged=h.acked_count,
        delivered=h.delivered_count,
        commits_acked=len(h.commit_acks),
        commit_checks=len(h.commit_seen),
    )
    j = _Judge(h, contents)

    # the final contents: gaps, what is stored where
    ends: dict[int, int] = {}
    for key in sorted(contents.offsets):
        offs, refs = contents.offsets[key], contents.refs[key]
        expect = start_offsets.get(key, offs[0] if offs else 0)
        for off, ref in zip(offs, refs, strict=True):
            if off != expect:
                r.gaps.append(f"k{key}: offset {off}, expected {expect}")
            expect = off + 1
            pid, n = ref >> N_BITS, ref & N_MASK
            flags = j.stored.get(pid)
            if flags is None:
                flags = j.stored[pid] = bytearray(len(h.producers[pid].flags))
            flags[n] = 1
            fs = j.first_stored.get((pid, key))
            if fs is None or n < fs:
                j.first_stored[(pid, key)] = n
            j.stored_keys[pid].add(key)
            j.claim(ref, key, off)
        ends[key] = expect
        r.stored += len(offs)

    # dead letters claim the place they came from
    for sub, letters in dead_letters.items():
        for key, off, mid in letters:
            ref = _ref_unlocked(h, mid)
            j.claim(ref, key, off)
            j.dead[sub].add((key, off))
            r.dead_lettered += 1

    # one offset, one message
    reused: dict[Place, set[int]] = defaultdict(set)
    for place, refs in h.extra_holders.items():
        reused[place].update(refs)
        first = h.held_at(*place)
        if first != NONE:
            reused[place].add(first)
    for place, refs in j.s_reused.items():
        reused[place].update(refs)
    r.reused_offsets = sorted(
        f"k{k}/{o}: {sorted(h.name(x) for x in refs)}" for (k, o), refs in reused.items()
    )

    # phantoms: stored or delivered, never attempted
    ghosts = {
        ref
        for ref in (*h.maybe_phantoms, *j.s_seen)
        if not h.producer_of(ref).flags[ref & N_MASK] & ATTEMPTED
    }
    r.phantoms = sorted(h.name(x) for x in ghosts)

    # duplicated: one message at two places (stored, acknowledged or delivered there)
    dups: set[int] = set()
    for ref in {*h.extra_places, *j.s_extra}:
        where = j.places(ref)
        if len(where) > 1:
            dups.add(ref)
            r.duplicated.append(f"{h.name(ref)} at {sorted(where)}")
    r.duplicated.sort()

    _lost(h, j, r, start_offsets)

    # retention must not pass an important consumer's committed offset
    for key, committed in sorted(protected.items()):
        start = start_offsets.get(key, 0)
        if start > committed:
            r.retained_unread.append(f"k{key}: start offset {start} > committed {committed}")

    _order(h, contents, dups, r)

    # a producer's pin never moves: all its messages in one partition of a topic
    for pid, prod in enumerate(h.producers):
        if prod.raw or prod.label in routed:
            continue
        topics: dict[int, set[int]] = defaultdict(set)
        for k in (*prod.ack_keys, *j.stored_keys.get(pid, ())):
            topics[k // TOPIC_STRIDE].add(k)
        r.pin_moves += [
            f"producer {prod.label} in partitions {sorted(ks)}"
            for ks in topics.values()
            if len(ks) > 1
        ]
    r.pin_moves.sort()

    r.backwards_reads = list(h.backwards_reads)
    _commits(h, r)
    _subscriptions(h, j, r, start_offsets, ends, subscriptions)
    return r


def _ref_unlocked(h: History, mid: str) -> int:
    return h._ref_locked(mid)[2]


def _lost(h: History, j: _Judge, r: Report, start_offsets: dict[int, int]) -> None:
    """Acked, not stored, and retention does not account for it."""
    lost: list[tuple[str, str]] = []
    for pid, prod in enumerate(h.producers):
        flags = prod.flags
        stored = j.stored.get(pid, b"")
        ns = len(stored)
        for n in range(len(flags)):
            if not flags[n] & ACKED or (n < ns and stored[n]):
                continue
            ref = pid << N_BITS | n
            first = Ack(prod.ack_key[n], None if prod.ack_off[n] == NONE else prod.ack_off[n])
            acks = [first, *h.more_acks.get(ref, ())]
            key = first.key
            start = start_offsets.get(key, 0)
            known = [a.offset for a in acks if a.offset is not None]
            mid = prod.name(n)
            if known:
                if min(known) >= start:
                    lost.append(
                        (mid, f"{mid} (acked at k{key}/{min(known)}, start offset {start})")
                    )
                else:
                    r.retained += 1
                continue
            # skipped as a duplicate: offset unknown. Retention removes a prefix, so it can
            # account for the message only if no earlier message of its producer is there.
            earlier = not prod.raw and j.first_stored.get((pid, key), n) < n
            if start == 0 or earlier:
                lost.append(
                    (mid, f"{mid} (acked as already stored in k{key}, start offset {start})")
                )
            else:
                r.retained += 1
    r.lost = [text for _, text in sorted(lost)]


def _order(h: History, contents: Contents, dups: set[int], r: Report) -> None:
    """Per producer and partition, stored order follows write order and seq_no."""
    for key in sorted(contents.offsets):
        last_n: dict[int, tuple[int, int]] = {}
        last_seq: dict[int, tuple[int, int]] = {}
        for off, ref, sp, seq in zip(
            contents.offsets[key],
            contents.refs[key],
            contents.spids[key],
            contents.seqs[key],
            strict=True,
        ):
            if ref in dups:
                continue  # a duplicate is reported as such, not again as a reorder
            pid, n = ref >> N_BITS, ref & N_MASK
            if not h.producers[pid].raw:
                prev = last_n.get(pid)
                if prev is not None and n <= prev[0]:
                    r.reordered.append(
                        f"k{key}/{off}: {h.name(ref)} after n={prev[0]} at {prev[1]}"
                    )
                last_n[pid] = (n, off)
            spid = contents.producer_ids[sp]
            if spid:
                prev = last_seq.get(sp)
                if prev is not None and seq <= prev[0]:
                    r.reordered.append(
                        f"k{key}/{off}: producer {spid} seq_no {seq} after {prev[0]} at {prev[1]}"
                    )
                last_seq[sp] = (seq, off)


def _commits(h: History, r: Report) -> None:
    """A reported position is never below a commit acknowledged before the report."""
    clocks: dict[tuple[str, int], list[int]] = defaultdict(list)
    highs: dict[tuple[str, int], list[int]] = defaultdict(list)  # running max of acked offsets
    for a in sorted(h.commit_acks):
        k2 = (a.consumer, a.key)
        clocks[k2].append(a.clock)
        highs[k2].append(max(a.offset, highs[k2][-1]) if highs[k2] else a.offset)
    for seen in h.commit_seen:
        k2 = (seen.consumer, seen.key)
        i = bisect_left(clocks.get(k2, []), seen.clock)
        if i and seen.offset < highs[k2][i - 1]:
            r.lost_commits.append(
                f"{seen.consumer} k{seen.key} ({seen.when}): committed {seen.offset}, "
                f"acknowledged {highs[k2][i - 1]} before"
            )


def _subscriptions(
    h: History,
    j: _Judge,
    r: Report,
    start_offsets: dict[int, int],
    ends: dict[int, int],
    scopes: Mapping[str, Mapping[int, int]],
) -> None:
    for name in sorted(set(h.subs) | set(scopes)):
        s = h.subs.get(name)
        if s is None:
            s = SubDeliveries()
        r.sub_delivered += len(s.d_key)
        r.sub_acked += len(s.a_key) + len(s.cumulative)
        # the earliest answered ack of each message: (lifetime, clock), each the least
        acked: dict[Place, tuple[int, int]] = {}
        for key, off, gen, clk in zip(s.a_key, s.a_off, s.a_gen, s.a_clock, strict=True):
            prev = acked.get((key, off))
            acked[(key, off)] = (
                (gen, clk) if prev is None else (min(prev[0], gen), min(prev[1], clk))
            )
        # cumulative acks per partition, by offset: a suffix minimum gives, for any offset,
        # the earliest (lifetime, clock) of a cumulative ack covering it
        cum: dict[int, tuple[list[int], list[tuple[int, int]]]] = {}
        by_key: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        for key, off, gen, clk in s.cumulative:
            by_key[key].append((off, gen, clk))
        for key, acks in by_key.items():
            acks.sort()
            offs = [a[0] for a in acks]
            mins: list[tuple[int, int]] = [(0, 0)] * len(acks)
            g = c = 1 << 62
            for i in range(len(acks) - 1, -1, -1):
                g, c = min(g, acks[i][1]), min(c, acks[i][2])
                mins[i] = (g, c)
            cum[key] = (offs, mins)

        def earliest(
            key: int,
            off: int,
            acked: dict[Place, tuple[int, int]] = acked,
            cum: dict[int, tuple[list[int], list[tuple[int, int]]]] = cum,
        ) -> tuple[int, int] | None:
            best = acked.get((key, off))
            got = cum.get(key)
            if got is not None:
                i = bisect_left(got[0], off)
                if i < len(got[0]):
                    g, c = got[1][i]
                    best = (g, c) if best is None else (min(best[0], g), min(best[1], c))
            return best

        # deliveries after an ack's answer; repeated deliveries in one lifetime
        counts: dict[tuple[int, int, int], set[int]] = defaultdict(set)
        for key, off, gen, count, opened in zip(
            s.d_key, s.d_off, s.d_gen, s.d_count, s.d_opened, strict=True
        ):
            first = earliest(key, off)
            if first is not None and (gen > first[0] or opened > first[1]):
                why = (
                    f"in lifetime {gen} after its ack in lifetime {first[0]}"
                    if gen > first[0]
                    else f"to a client opened at clock {opened} after its ack at {first[1]}"
                )
                r.sub_acked_redelivered.append(f"{name} k{key}/{off}: delivered {why}")
            seen = counts[(key, off, gen)]
            if count in seen:
                r.sub_repeated.append(
                    f"{name} k{key}/{off}: delivered twice in lifetime {gen} "
                    f"with redelivery count {count}"
                )
            seen.add(count)

        # every message of its range acknowledged or dead-lettered
        dead = j.dead.get(name, set())
        for key, first_offset in sorted(scopes.get(name, {}).items()):
            end = ends.get(key, start_offsets.get(key, 0))
            missing = [
                o
                for o in range(first_offset, end)
                if earliest(key, o) is None and (key, o) not in dead
            ]
            for o in missing:
                held = h.held_at(key, o)
                what = h.name(held) if held != NONE else "?"
                r.sub_unacked.append(f"{name} k{key}/{o} ({what}): never acknowledged")
