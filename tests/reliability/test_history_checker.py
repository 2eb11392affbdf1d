"""The checker must catch what it claims to catch: each violation, planted, is reported."""

from __future__ import annotations

from tests.reliability.history import History, check


def clean() -> tuple[History, dict[int, list[tuple[int, str]]]]:
    h = History()
    for i in range(5):
        h.attempted(f"a{i}")
        h.acked(f"a{i}", 0, i)
        h.delivered("s1", 0, i, f"a{i}")
    h.committed("c", 0, 3)
    h.committed("c", 0, 5)
    return h, {0: [(i, f"a{i}") for i in range(5)]}


def test_clean_history_passes() -> None:
    h, stored = clean()
    r = check(h, stored, {0: 0})
    assert r.ok, r.summary()


def test_each_violation_is_caught() -> None:
    h, stored = clean()
    del stored[0][4]
    r = check(h, stored, {0: 0})
    # a4 is acked and was delivered: not lost; but an unacked missing one would be
    h2, stored2 = clean()
    h2.acked("x", 0, 9)
    assert check(h2, stored2, {0: 0}).lost == ["x"]
    h3, stored3 = clean()
    stored3[0].append((5, "a1"))
    assert check(h3, stored3, {0: 0}).duplicated == ["a1"]
    h4, stored4 = clean()
    stored4[0][2] = (7, "a2")
    r4 = check(h4, stored4, {0: 0})
    assert r4.gaps and r4.moved
    h5, stored5 = clean()
    h5.delivered("s1", 0, 1, "a1")
    assert check(h5, stored5, {0: 0}).backwards_reads
    h6, stored6 = clean()
    h6.committed("c", 0, 2)
    assert check(h6, stored6, {0: 0}).backwards_commits
    assert r.ok is not None
