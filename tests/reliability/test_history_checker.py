"""The checker must catch what it claims to catch: each violation, planted, is reported
as exactly that kind, and a clean history passes."""

from __future__ import annotations

from tests.reliability.checker import Report, check
from tests.reliability.history import History, Stored

P0 = 0  # topic 0, partition 0
P1 = 1  # topic 0, partition 1


def clean(
    ack_at: dict[str, int] | None = None, unacked: frozenset[str] = frozenset()
) -> tuple[History, dict[int, list[Stored]], dict[int, int]]:
    """Producer p: 5 messages at P0/0..4, delivered and committed; producer q: 3 at P1.
    ``ack_at``: acks that name another offset than the message's; ``unacked``: acks lost."""
    ack_at = ack_at or {}
    h = History()
    for n in range(5):
        mid = f"id:p:{n}"
        h.attempted(mid)
        h.acked(mid, P0, n)
        h.delivered("s1", P0, n, mid)
    for n in range(3):
        mid = f"id:q:{n}"
        h.attempted(mid)
        if mid not in unacked:
            h.acked(mid, P1, ack_at.get(mid, n))
    h.commit_acked("c", P0, 3)
    h.commit_acked("c", P0, 5)
    h.commit_observed(h.clock(), "c", P0, 5, "restart 1")
    stored = {
        P0: [Stored(n, f"id:p:{n}", "P", n + 1) for n in range(5)],
        P1: [Stored(n, f"id:q:{n}", "Q", n + 1) for n in range(3)],
    }
    return h, stored, {P0: 0, P1: 0}


def kinds(r: Report) -> set[str]:
    return set(r.violations())


def test_clean_history_passes() -> None:
    h, stored, starts = clean()
    r = check(h, stored, starts)
    assert r.ok, r.summary()
    assert (r.acknowledged, r.stored, r.delivered, r.commits_acked, r.commit_checks) == (
        8,
        8,
        5,
        2,
        1,
    )


def test_lost_tail_after_delivery_is_lost() -> None:
    """Acked and delivered, then gone from the end of the partition: lost, not excused."""
    h, stored, starts = clean()
    del stored[P0][3:]
    r = check(h, stored, starts)
    assert kinds(r) == {"lost"}, r.summary()
    assert [x.split()[0] for x in r.lost] == ["id:p:3", "id:p:4"]


def test_messages_below_the_start_offset_are_accounted_for_by_retention() -> None:
    h, stored, _ = clean()
    del stored[P0][:2]
    r = check(h, stored, {P0: 2, P1: 0})
    assert r.ok, r.summary()
    assert r.retained == 2
    # the same hole above the start offset is a loss
    r = check(h, stored, {P0: 0, P1: 0})
    assert kinds(r) == {"lost", "gaps"}, r.summary()


def test_reused_offset() -> None:
    """Two acknowledged messages at one offset: one of them was overwritten."""
    h, stored, starts = clean()
    h.attempted("id:q:3")
    h.acked("id:q:3", P1, 2)  # the broker acked q:3 at the offset q:2 holds
    r = check(h, stored, starts)
    assert kinds(r) == {"reused_offsets", "lost"}, r.summary()
    assert r.reused_offsets == ["k1/2: ['id:q:2', 'id:q:3']"]


def test_duplicate() -> None:
    h, stored, starts = clean()
    stored[P0].append(Stored(5, "id:p:1", "P", 2))  # a resend stored again
    r = check(h, stored, starts)
    assert kinds(r) == {"duplicated"}, r.summary()
    assert r.duplicated == ["id:p:1 at [(0, 1), (0, 5)]"]


def test_reorder_of_a_producers_messages() -> None:
    h, stored, starts = clean()
    for n in (0, 1):  # attempted, acks lost in a crash: only their order can be judged
        h.attempted(f"id:r:{n}")
    stored[P1] += [Stored(3, "id:r:1", "R", 2), Stored(4, "id:r:0", "R", 1)]
    r = check(h, stored, starts)
    assert kinds(r) == {"reordered"}, r.summary()
    assert len(r.reordered) == 2  # by write order and by seq_no


def test_seq_nos_of_a_server_producer_id_must_grow() -> None:
    h, stored, starts = clean()
    stored[P1][2] = Stored(2, "id:q:2", "Q", 1)  # q's third message stored with seq_no 1
    r = check(h, stored, starts)
    assert kinds(r) == {"reordered"}, r.summary()


def test_phantom_message() -> None:
    h, stored, starts = clean()
    stored[P1].append(Stored(3, "id:z:0"))  # never sent by anyone
    r = check(h, stored, starts)
    assert kinds(r) == {"phantoms"}, r.summary()
    assert r.phantoms == ["id:z:0"]


def test_lost_commit() -> None:
    h, stored, starts = clean()
    h.commit_observed(h.clock(), "c", P0, 3, "restart 2")  # back past the acked 5
    r = check(h, stored, starts)
    assert kinds(r) == {"lost_commits"}, r.summary()
    assert r.lost_commits == ["c k0 (restart 2): committed 3, acknowledged 5 before"]


def test_a_commit_acknowledged_after_the_report_was_asked_is_not_lost() -> None:
    h, stored, starts = clean()
    asked = h.clock()
    h.commit_acked("c", P0, 7)  # acked while the server was being asked
    h.commit_observed(asked, "c", P0, 5, "restart 2")
    assert check(h, stored, starts).ok


def test_pin_moving() -> None:
    """Producer p is pinned to P0; one of its messages acked and stored in P1."""
    h, stored, starts = clean()
    h.attempted("id:p:5")
    h.acked("id:p:5", P1, 3)
    stored[P1].append(Stored(3, "id:p:5", "P", 6))
    r = check(h, stored, starts)
    assert kinds(r) == {"pin_moves"}, r.summary()
    assert r.pin_moves == ["producer p in partitions [0, 1]"]


def test_duplicate_whose_first_copy_retention_removed() -> None:
    """Delivered at offset 1, since removed by retention, and stored again at 5: a duplicate
    the final contents alone cannot show."""
    h, stored, _ = clean()
    stored[P0] = [*stored[P0][2:], Stored(5, "id:p:1", "P", 2)]
    r = check(h, stored, {P0: 2, P1: 0})
    assert kinds(r) == {"duplicated"}, r.summary()
    assert r.duplicated == ["id:p:1 at [(0, 1), (0, 5)]"]


def test_message_stored_at_another_offset_than_acked() -> None:
    h, stored, starts = clean(ack_at={"id:q:2": 7})
    r = check(h, stored, starts)
    assert kinds(r) == {"duplicated"}, r.summary()


def test_gap_in_offsets() -> None:
    h, stored, starts = clean()
    h.attempted("id:q:3")
    stored[P1].append(Stored(9, "id:q:3", "Q", 4))
    r = check(h, stored, starts)
    assert kinds(r) == {"gaps"}, r.summary()


def test_backwards_read_in_one_session() -> None:
    h, stored, starts = clean()
    h.delivered("s1", P0, 1, "id:p:1")
    r = check(h, stored, starts)
    assert kinds(r) == {"backwards_reads"}, r.summary()


def test_retention_past_an_important_consumer() -> None:
    h, stored, _ = clean()
    del stored[P0][:4]
    r = check(h, stored, {P0: 4, P1: 0}, protected={P0: 3})
    assert kinds(r) == {"retained_unread"}, r.summary()
    assert check(h, stored, {P0: 4, P1: 0}, protected={P0: 4}).ok


def test_skipped_acks_with_unknown_offset() -> None:
    """A resend the broker skipped has no offset: missing with nothing retained is lost."""
    h, stored, starts = clean()
    h.acked("id:q:2", P1, None)  # skipped resend of a stored message: fine
    assert check(h, stored, starts).ok
    h.attempted("id:q:3")
    h.acked("id:q:3", P1, None)  # skipped, yet not stored, and retention removed nothing
    r = check(h, stored, starts)
    assert kinds(r) == {"lost"}, r.summary()
    # retention removed offset 0 of P1: a skipped message of producer s can have been there
    # only if no earlier message of s is still stored
    # (q:0 went with offset 0; its ack is not the point here)
    h2, stored2, _ = clean(unacked=frozenset({"id:q:0"}))
    for n in range(2):
        h2.attempted(f"id:s:{n}")
    h2.acked("id:s:0", P1, None)
    h2.acked("id:s:1", P1, 3)
    stored2[P1] = [*stored2[P1][1:], Stored(3, "id:s:1", "S", 2)]
    assert check(h2, stored2, {P0: 0, P1: 1}).ok
    h3, stored3, _ = clean(unacked=frozenset({"id:q:0"}))
    for n in range(2):
        h3.attempted(f"id:s:{n}")
    h3.acked("id:s:0", P1, 3)
    h3.acked("id:s:1", P1, None)  # after s:0, which is still stored: retention cannot explain it
    stored3[P1] = [*stored3[P1][1:], Stored(3, "id:s:0", "S", 1)]
    r = check(h3, stored3, {P0: 0, P1: 1})
    assert kinds(r) == {"lost"}, r.summary()


# ---------------------------------------------------------------- subscriptions

SUB = "s"


def clean_sub(
    acked: tuple[int, ...] = (0, 1, 2), cumulative: int | None = 4
) -> tuple[History, dict[int, list[Stored]], dict[int, int]]:
    """`clean()` plus subscription s on P0 from offset 0: every message delivered once in
    server lifetime 1 to a client opened at the start; ``acked`` acknowledged one by one
    and everything up to ``cumulative`` cumulatively, all answered in lifetime 1."""
    h, stored, starts = clean()
    opened = h.clock()
    for n in range(5):
        h.sub_delivered(SUB, P0, n, f"id:p:{n}", generation=1, redelivery_count=0, opened=opened)
    h.sub_acked(SUB, [(P0, n) for n in acked], generation=1)
    if cumulative is not None:
        h.sub_acked_cumulative(SUB, P0, cumulative, generation=1)
    return h, stored, starts


def check_sub(
    h: History,
    stored: dict[int, list[Stored]],
    starts: dict[int, int],
    dead: list[tuple[int, int, str]] | None = None,
) -> Report:
    return check(h, stored, starts, subscriptions={SUB: {P0: 0}}, dead_letters={SUB: dead or []})


def test_clean_subscription_history_passes() -> None:
    h, stored, starts = clean_sub()
    r = check_sub(h, stored, starts)
    assert r.ok, r.summary()
    assert (r.sub_delivered, r.sub_acked) == (5, 4)
    # individual acks alone, every message
    h, stored, starts = clean_sub(acked=(0, 1, 2, 3, 4), cumulative=None)
    assert check_sub(h, stored, starts).ok
    # unacknowledged messages delivered again by the next lifetime, or with a raised count
    h, stored, starts = clean_sub(acked=(0, 1, 2), cumulative=None)
    h.sub_delivered(SUB, P0, 4, "id:p:4", generation=1, redelivery_count=1, opened=h.clock())
    h.sub_delivered(SUB, P0, 4, "id:p:4", generation=2, redelivery_count=0, opened=h.clock())
    h.sub_acked_cumulative(SUB, P0, 4, generation=2)
    assert check_sub(h, stored, starts).ok


def test_a_message_delivered_in_a_later_lifetime_after_its_ack() -> None:
    h, stored, starts = clean_sub()
    h.sub_delivered(SUB, P0, 1, "id:p:1", generation=2, redelivery_count=0, opened=h.clock())
    r = check_sub(h, stored, starts)
    assert kinds(r) == {"sub_acked_redelivered"}, r.summary()
    assert r.sub_acked_redelivered == [
        "s k0/1: delivered in lifetime 2 after its ack in lifetime 1"
    ]


def test_a_message_delivered_to_a_client_opened_after_its_ack() -> None:
    """The same server lifetime, but the client was made after the ack's answer: the
    server sent it the message after the ack was durable."""
    h, stored, starts = clean_sub()
    opened = h.clock()
    h.sub_delivered(SUB, P0, 2, "id:p:2", generation=1, redelivery_count=1, opened=opened)
    r = check_sub(h, stored, starts)
    assert kinds(r) == {"sub_acked_redelivered"}, r.summary()
    # a client opened before the answer may still get it (it was in flight): no violation
    h, stored, starts = clean()
    opened = h.clock()
    for n in range(5):
        h.sub_delivered(SUB, P0, n, f"id:p:{n}", generation=1, redelivery_count=0, opened=opened)
    h.sub_acked(SUB, [(P0, n) for n in range(5)], generation=1)
    h.sub_delivered(SUB, P0, 2, "id:p:2", generation=1, redelivery_count=1, opened=opened)
    assert check_sub(h, stored, starts).ok


def test_a_message_below_a_cumulative_ack_delivered_again() -> None:
    h, stored, starts = clean_sub(acked=(), cumulative=4)
    h.sub_delivered(SUB, P0, 3, "id:p:3", generation=3, redelivery_count=0, opened=h.clock())
    r = check_sub(h, stored, starts)
    assert kinds(r) == {"sub_acked_redelivered"}, r.summary()
    # above the cumulative ack it is not acknowledged: delivering it again is right
    h, stored, starts = clean_sub(acked=(), cumulative=2)
    h.sub_acked(SUB, [(P0, 3), (P0, 4)], generation=2)
    h.sub_delivered(SUB, P0, 3, "id:p:3", generation=2, redelivery_count=0, opened=0)
    assert check_sub(h, stored, starts).ok


def test_a_message_delivered_twice_in_one_lifetime_without_a_raised_count() -> None:
    h, stored, starts = clean_sub()
    h.sub_delivered(SUB, P0, 3, "id:p:3", generation=1, redelivery_count=0, opened=0)
    r = check_sub(h, stored, starts)
    assert kinds(r) == {"sub_repeated"}, r.summary()
    assert r.sub_repeated == ["s k0/3: delivered twice in lifetime 1 with redelivery count 0"]


def test_a_message_never_acknowledged() -> None:
    """Offset 3 is neither acknowledged (its ack's answer never came) nor dead-lettered."""
    h, stored, starts = clean_sub(acked=(0, 1, 2, 4), cumulative=None)
    r = check_sub(h, stored, starts)
    assert kinds(r) == {"sub_unacked"}, r.summary()
    assert r.sub_unacked == ["s k0/3 (id:p:3): never acknowledged"]
    # in the dead-letter topic instead: done
    r = check_sub(h, stored, starts, dead=[(P0, 3, "id:p:3")])
    assert r.ok, r.summary()
    assert r.dead_lettered == 1
    # removed by retention before it was acknowledged: still never acknowledged
    del stored[P0][:4]
    r = check_sub(h, stored, {P0: 4, P1: 0})
    assert kinds(r) == {"sub_unacked"}, r.summary()


def test_a_phantom_delivery_by_a_subscription() -> None:
    h, stored, starts = clean_sub()
    h.sub_delivered(SUB, P0, 5, "id:z:0", generation=1, redelivery_count=0, opened=0)
    r = check_sub(h, stored, starts)
    assert kinds(r) == {"phantoms"}, r.summary()
    assert r.phantoms == ["id:z:0"]


def test_a_subscription_delivers_another_message_than_the_one_stored() -> None:
    h, stored, starts = clean_sub()
    h.sub_delivered(SUB, P0, 1, "id:q:0", generation=1, redelivery_count=1, opened=0)
    r = check_sub(h, stored, starts)
    assert kinds(r) == {"reused_offsets", "duplicated"}, r.summary()
    assert r.reused_offsets == ["k0/1: ['id:p:1', 'id:q:0']"]


def test_a_dead_letter_that_is_not_the_message_at_its_origin() -> None:
    h, stored, starts = clean_sub(acked=(0, 1, 2, 4), cumulative=None)
    r = check_sub(h, stored, starts, dead=[(P0, 3, "id:p:2")])
    assert kinds(r) == {"reused_offsets", "duplicated"}, r.summary()
