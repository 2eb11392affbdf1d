"""The compact checker judges exactly as the straightforward one: random small histories,
full of every kind of violation (lost, reused and far offsets, duplicates, reorders,
phantoms and malformed ids, gaps, backwards reads, pins moving, retention, lost commits),
are recorded into both and must get the same report, violation by violation."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.reliability import reference_checker as ref
from tests.reliability.checker import check
from tests.reliability.history import History, Stored

KEYS = (0, 1, 1000)
Event = tuple[object, ...]


def random_history(
    rng: random.Random,
) -> tuple[list[Event], dict[int, list[Stored]], dict[int, int], dict[int, int]]:
    """Events (to replay into both histories), final contents, start offsets, protected."""
    events: list[Event] = []
    stored: dict[int, list[Stored]] = {k: [] for k in KEYS}
    ends = dict.fromkeys(KEYS, 0)
    for p in ("p", "q", "r", "s")[: rng.randint(1, 4)]:
        home = rng.choice(KEYS)
        for n in range(rng.randint(0, 8)):
            mid = f"id:{p}:{n}"
            if rng.random() < 0.9:
                events.append(("attempted", mid))
            key = home if rng.random() < 0.9 else rng.choice(KEYS)  # a pin that moves
            roll = rng.random()
            if roll < 0.7:  # stored
                off = ends[key]
                ends[key] += 1
                seq = n + 1 if rng.random() < 0.9 else rng.randint(0, 9)
                stored[key].append(Stored(off, mid, p.upper() if rng.random() < 0.8 else "", seq))
                if rng.random() < 0.8:
                    at = off if rng.random() < 0.85 else rng.choice([None, rng.randint(0, 10)])
                    events.append(("acked", mid, key, at))
                if rng.random() < 0.3:  # a resend, skipped or not
                    events.append(("acked", mid, key, None if rng.random() < 0.5 else off))
                if rng.random() < 0.5:
                    at = off if rng.random() < 0.9 else rng.randint(0, 10)
                    events.append(("delivered", rng.choice(["s1", "s2"]), key, at, mid))
            elif roll < 0.85:  # acked, never stored
                events.append(("acked", mid, key, rng.choice([None, rng.randint(0, 10)])))
    if rng.random() < 0.2:
        key = rng.choice(KEYS)
        stored[key].append(Stored(ends[key] + rng.randint(0, 2), "id:z:0"))  # a phantom
    if rng.random() < 0.1:
        events.append(("delivered", "s1", rng.choice(KEYS), rng.randint(0, 10), "garbage"))
    if rng.random() < 0.05:
        events.append(("acked", "id:p:1", 0, 10**12))  # an offset far past any other
    for c in range(rng.randint(0, 3)):
        events.append(("commit_acked", "c", rng.choice(KEYS), rng.randint(0, 6)))
        if rng.random() < 0.5:
            events.append(("commit_observed", "c", rng.choice(KEYS), rng.randint(0, 6), f"r{c}"))
    starts: dict[int, int] = {}
    protected: dict[int, int] = {}
    for key in KEYS:
        rows = stored[key]
        if rows and rng.random() < 0.4:  # retention removed a prefix
            cut = rng.randint(0, len(rows))
            starts[key] = rows[cut - 1].offset + 1 if cut else 0
            stored[key] = rows[cut:]
        if rng.random() < 0.2:
            protected[key] = rng.randint(0, 4)
        if rng.random() < 0.1:
            rng.shuffle(stored[key])
    if rng.random() < 0.3:
        rng.shuffle(events)
    return events, stored, starts, protected


def replay(events: list[Event], h: History | ref.History) -> None:
    for kind, *args in events:
        if kind == "commit_observed":
            h.commit_observed(h.clock(), *args)  # type: ignore[arg-type]
        else:
            getattr(h, kind)(*args)


@settings(max_examples=100, deadline=None)
@given(st.randoms(use_true_random=False))
def test_compact_checker_reports_what_the_reference_reports(rng: random.Random) -> None:
    events, stored, starts, protected = random_history(rng)
    old, new = ref.History(), History()
    replay(events, old)
    replay(events, new)
    routed = ("r",) if rng.random() < 0.2 else ()
    want = ref.check(
        old, {k: [ref.Stored(*r) for r in v] for k, v in stored.items()}, starts, protected, routed
    )
    got = check(new, stored, starts, protected, routed)
    for kind in ref.VIOLATIONS:
        assert sorted(getattr(got, kind)) == sorted(getattr(want, kind)), kind
    for count in ("attempted", "acknowledged", "delivered", "stored", "retained", "commits_acked"):
        assert getattr(got, count) == getattr(want, count), count
