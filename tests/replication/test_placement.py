"""Ensemble placement and replacement: spread over racks when bookies name one."""

from __future__ import annotations

import logging
import random
from collections import Counter

import pytest

from weir.replication.errors import NotEnoughBookiesError
from weir.replication.ledger.placement import BookieView, choose_replacement, place_ensemble

RACKED = {
    "a1:1": {"rack": "a"},
    "a2:1": {"rack": "a"},
    "a3:1": {"rack": "a"},
    "b1:1": {"rack": "b"},
    "b2:1": {"rack": "b"},
    "c1:1": {"rack": "c"},
}


@pytest.mark.parametrize("seed", range(30))
def test_an_ensemble_spans_as_many_racks_as_it_can(seed: int) -> None:
    rng = random.Random(seed)
    three = place_ensemble(RACKED, 3, rng)
    assert sorted(RACKED[b]["rack"] for b in three) == ["a", "b", "c"]
    five = place_ensemble(RACKED, 5, rng)
    assert len(set(five)) == 5
    assert max(Counter(RACKED[b]["rack"] for b in five).values()) == 2


def test_without_racks_any_distinct_bookies_and_too_few_is_an_error() -> None:
    plain: dict[str, dict[str, str]] = {f"h{i}:1": {} for i in range(4)}
    chosen = place_ensemble(plain, 3, random.Random(1))
    assert len(set(chosen)) == 3 and set(chosen) <= set(plain)
    seen = {b for s in range(20) for b in place_ensemble(plain, 3, random.Random(s))}
    assert seen == set(plain)  # every bookie gets chosen: load spreads
    with pytest.raises(NotEnoughBookiesError, match="needs as many available bookies"):
        place_ensemble(plain, 5)


VIEW = BookieView(
    writable={
        "a1:1": {"rack": "a"},
        "a2:1": {"rack": "a"},
        "b1:1": {"rack": "b"},
        "c1:1": {"rack": "c"},
        "d1:1": {"rack": "d"},
    },
    read_only={"b2:1": {"rack": "b"}},
)


@pytest.mark.parametrize("seed", range(30))
def test_a_replacement_goes_to_a_rack_the_ensemble_does_not_use(seed: int) -> None:
    rng = random.Random(seed)
    # a1 failed in (a1, b1, c1): a2 (rack a, free) or d1 (rack d): both leave 3 racks
    assert choose_replacement(VIEW, ("a1:1", "b1:1", "c1:1"), "a1:1", rng=rng) in {"a2:1", "d1:1"}
    # b1 failed in (a1, b1, c1): only d1 is on a rack no other member uses
    assert choose_replacement(VIEW, ("a1:1", "b1:1", "c1:1"), "b1:1", rng=rng) == "d1:1"
    # a read-only member's rack counts: (b2, c1, d1) minus d1 -> a1 or a2, never b1
    got = choose_replacement(VIEW, ("b2:1", "c1:1", "d1:1"), "d1:1", rng=rng)
    assert got in {"a1:1", "a2:1"}
    # excluded bookies (replaced earlier by the writer) are never chosen again
    assert choose_replacement(VIEW, ("b1:1", "c1:1", "d1:1"), "d1:1", {"a1:1"}, rng) == "a2:1"


def test_a_replacement_falls_back_to_a_shared_rack_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    view = BookieView(writable={**VIEW.writable, "x:1": {"rack": "gone"}})
    with caplog.at_level(logging.WARNING, "weir.replication.placement"):
        # (a1, b1, c1, d1) minus d1, free: a2 (rack a, shared) only
        got = choose_replacement(view, ("a1:1", "b1:1", "c1:1", "d1:1", "x:1"), "d1:1")
    assert got == "a2:1"
    assert "no free bookie on a rack outside the ensemble's (a, b, c, gone)" in caplog.text
    assert "a2:1 on rack 'a' joins 1 of them" in caplog.text


def test_a_replacement_without_racks_or_free_bookies(caplog: pytest.LogCaptureFixture) -> None:
    plain = BookieView(writable={f"h{i}:1": {} for i in range(4)})
    with caplog.at_level(logging.WARNING, "weir.replication.placement"):
        seen = {
            choose_replacement(plain, ("h0:1", "h1:1", "gone:1"), "gone:1", rng=random.Random(s))
            for s in range(20)
        }
    assert seen == {"h2:1", "h3:1"}
    assert caplog.text == ""  # no racks named: nothing to warn about
    assert choose_replacement(plain, ("h0:1", "h1:1", "h2:1", "h3:1"), "h0:1") is None


def test_an_ensemble_over_too_few_racks_is_placed_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    two_racks = {b: labels for b, labels in RACKED.items() if labels["rack"] != "c"}
    with caplog.at_level(logging.WARNING, "weir.replication.placement"):
        ensemble = place_ensemble(two_racks, 3, random.Random(3))
    assert len(set(ensemble)) == 3
    assert "ensemble of 3 over 2 racks only (a: " in caplog.text
    assert "a rack lost takes 2 of its bookies" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, "weir.replication.placement"):
        place_ensemble(RACKED, 3, random.Random(3))
        place_ensemble({f"h{i}:1": {} for i in range(4)}, 3)
    assert caplog.text == ""
