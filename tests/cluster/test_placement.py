"""The placement policy (pure): spread by load, stable, balanced, deterministic."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from weir.broker.cluster.placement import place

brokers_st = st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=5, unique=True)
partitions_st = st.lists(st.integers(0, 60), max_size=40, unique=True).map(
    lambda xs: [f"t/{x}" for x in xs]
)


def loads(assignment: dict[str, str], brokers: list[str]) -> Counter[str]:
    c: Counter[str] = Counter(dict.fromkeys(brokers, 0))
    c.update(assignment.values())
    return c


@given(partitions=partitions_st, brokers=brokers_st)
def test_every_partition_is_placed_and_the_spread_is_within_one(
    partitions: list[str], brokers: list[str]
) -> None:
    out = place(partitions, brokers, {})
    assert set(out) == set(partitions) and set(out.values()) <= set(brokers)
    c = loads(out, brokers)
    assert max(c.values()) - min(c.values()) <= 1
    assert place(reversed(partitions), reversed(brokers), {}) == out  # deterministic


@given(partitions=partitions_st, brokers=brokers_st, data=st.data())
def test_a_broker_leaving_moves_only_its_own_partitions(
    partitions: list[str], brokers: list[str], data: st.DataObject
) -> None:
    before = place(partitions, brokers, {})
    gone = data.draw(st.sampled_from(brokers))
    rest = [b for b in brokers if b != gone]
    after = place(partitions, rest, before)
    if not rest:
        assert after == {}
        return
    moved = {p for p in partitions if after[p] != before[p]}
    assert all(before[p] == gone for p in moved)
    c = loads(after, rest)
    assert max(c.values()) - min(c.values()) <= 1


@given(partitions=partitions_st, brokers=brokers_st)
def test_a_broker_joining_takes_only_what_balance_needs(
    partitions: list[str], brokers: list[str]
) -> None:
    before = place(partitions, brokers, {})
    after = place(partitions, [*brokers, "new"], before)
    moved = [p for p in partitions if after[p] != before[p]]
    assert all(after[p] == "new" for p in moved)
    # it takes the floor of the average, and nothing moves among the others
    assert len(moved) == len(partitions) // (len(brokers) + 1)
    c = loads(after, [*brokers, "new"])
    assert max(c.values()) - min(c.values()) <= 1


def test_an_unloaded_partition_leaves_its_broker_when_another_exists() -> None:
    current = {"t/1": "a", "t/2": "b"}
    assert place(["t/1", "t/2"], ["a", "b"], current, avoid={"t/1": "a"})["t/1"] == "b"
    assert place(["t/1"], ["a"], {"t/1": "a"}, avoid={"t/1": "a"}) == {"t/1": "a"}


def test_weights_spread_load_not_counts() -> None:
    weights = {"t/big": 10.0, "t/1": 1.0, "t/2": 1.0, "t/3": 1.0}
    out = place(list(weights), ["a", "b"], {}, weights=weights)
    assert out["t/big"] != out["t/1"] == out["t/2"] == out["t/3"]


def test_a_pinned_partition_is_not_moved_for_balance() -> None:
    current = {"t/1": "a", "t/2": "a", "t/3": "a", "t/4": "b"}
    out = place(list(current), ["a", "b"], current, pinned={"t/1", "t/2", "t/3"})
    assert out == current  # a is heavier, but all it holds is pinned
    out = place(list(current), ["a", "b"], current, pinned={"t/1"})
    assert out["t/1"] == "a" and sorted(out.values()).count("a") == 2
