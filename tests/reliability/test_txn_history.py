"""The transaction checker (txn_history.py) fails on every rule it judges: a history with each
violation planted, beside one that keeps them all."""

from __future__ import annotations

import pytest

from tests.reliability.history import make_data
from tests.reliability.txn_history import TxnHistory, check


def data(txn: str, i: int) -> bytes:
    return make_data(txn, i, 32)


def history() -> TxnHistory:
    """Three transactions: t1 committed (3 messages, offset c@0 -> 5), t2 aborted (2 messages,
    offset c@0 -> 9), t3 unknown (2 messages, offset d@1 -> 4)."""
    h = TxnHistory()
    for name, n, outcome, off in [
        ("t1", 3, "committed", ("c", 0, 5)),
        ("t2", 2, "aborted", ("c", 0, 9)),
        ("t3", 2, "unknown", ("d", 1, 4)),
    ]:
        h.begin(name)
        for i in range(n):
            h.wrote(name, data(name, i))
            h.write_acked(name, data(name, i))
        h.offset(name, *off)
        h.ended(name, outcome)
    return h


def everything() -> dict[int, list[bytes]]:
    return {0: [data("t1", 0), data("t2", 0), data("t1", 1)], 1: [data("t2", 1), data("t1", 2)],
            2: [data("t3", 0), data("t3", 1)]}  # fmt: skip


def good_committed() -> dict[int, list[bytes]]:
    return {0: [data("t1", 0), data("t1", 1)], 1: [data("t1", 2)], 2: []}


def test_a_correct_history_passes_either_way_for_the_unknown_one() -> None:
    h = history()
    report = check(h, good_committed(), everything(), {("c", 0): 5, ("d", 1): None})
    assert report.ok, report.summary()
    committed = good_committed()
    committed[2] = [data("t3", 0), data("t3", 1)]  # t3 did commit after all
    report = check(h, committed, everything(), {("c", 0): 5, ("d", 1): 4})
    assert report.ok, report.summary()


@pytest.mark.parametrize(
    ("plant", "kind"),
    [
        ("half_of_a_committed_transaction", "lost_commits"),
        ("half_of_an_unknown_transaction", "half_visible"),
        ("unknown_offsets_without_messages", "half_visible"),
        ("lost_acknowledged_commit", "lost_commits"),
        ("commit_without_its_offsets", "lost_commits"),
        ("aborted_message_visible", "aborted_visible"),
        ("aborted_offsets_moved", "aborted_visible"),
        ("aborted_message_delivered_live", "aborted_visible"),
        ("message_twice", "duplicated"),
        ("message_nobody_wrote", "phantoms"),
        ("acknowledged_write_not_stored", "lost_writes"),
    ],
)
def test_a_planted_violation_fails_the_checker(plant: str, kind: str) -> None:
    h = history()
    committed = good_committed()
    stored = everything()
    offsets: dict[tuple[str, int], int | None] = {("c", 0): 5, ("d", 1): None}
    if plant == "half_of_a_committed_transaction":
        committed[1] = []
    elif plant == "half_of_an_unknown_transaction":
        committed[2] = [data("t3", 0)]
        offsets[("d", 1)] = 4
    elif plant == "unknown_offsets_without_messages":
        offsets[("d", 1)] = 4
    elif plant == "lost_acknowledged_commit":
        committed = {0: [], 1: [], 2: []}
        offsets[("c", 0)] = None
    elif plant == "commit_without_its_offsets":
        offsets[("c", 0)] = 3
    elif plant == "aborted_message_visible":
        committed[0].append(data("t2", 0))
    elif plant == "aborted_offsets_moved":
        offsets[("c", 0)] = 9
    elif plant == "aborted_message_delivered_live":
        h.delivered_committed(data("t2", 1))
    elif plant == "message_twice":
        committed[1].append(data("t1", 2))
    elif plant == "message_nobody_wrote":
        committed[2].append(data("ghost", 0))
    elif plant == "acknowledged_write_not_stored":
        stored[1] = [data("t1", 2)]  # t2's second message, acknowledged, is gone
    report = check(h, committed, stored, offsets)
    assert not report.ok
    assert kind in report.violations(), report.summary()
