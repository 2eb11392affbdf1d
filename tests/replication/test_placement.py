"""Ensemble placement: spread over racks when bookies name one."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from weir.replication.errors import NotEnoughBookiesError
from weir.replication.ledger.placement import place_ensemble

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
