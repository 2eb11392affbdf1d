"""The producer access registry on its own: who is admitted, who waits, who is fenced."""

from __future__ import annotations

import asyncio

import pytest

from weir.access_mode import AccessMode
from weir.broker.access import Claim, ProducerAccess
from weir.errors import BadRequestError, ProducerBusyError, ProducerFencedError

SHARED, EXCL, WAIT, FENCE = (
    AccessMode.SHARED,
    AccessMode.EXCLUSIVE,
    AccessMode.WAIT_FOR_EXCLUSIVE,
    AccessMode.EXCLUSIVE_WITH_FENCING,
)


class Fences:
    def __init__(self) -> None:
        self.got: list[str] = []

    def of(self, name: str):  # type: ignore[no-untyped-def]
        return lambda err: self.got.append(f"{name}: {err.message}")


def granted(x: object) -> Claim:
    assert isinstance(x, Claim), x
    return x


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("shared", SHARED),
        ("Exclusive", EXCL),
        ("wait-for-exclusive", WAIT),
        ("WaitForExclusive", WAIT),
        ("EXCLUSIVE_WITH_FENCING", FENCE),
        (3, FENCE),
    ],
)
def test_modes_parse_from_every_spelling(text: object, mode: AccessMode) -> None:
    assert AccessMode.parse(text) is mode


@pytest.mark.parametrize("bad", ["exclusiv", "", 4, -1, True, None, 1.0])
def test_an_unknown_mode_is_a_bad_request(bad: object) -> None:
    with pytest.raises(BadRequestError, match="unknown producer access mode"):
        AccessMode.parse(bad)


def test_sessions_of_one_producer_count_as_one() -> None:
    a = ProducerAccess()
    f = Fences()
    c1 = granted(a.claim(1, "t", "p", EXCL, None, f.of("p1")))
    c2 = granted(a.claim(1, "t", "p", EXCL, None, f.of("p2")))  # another partition, say
    assert (c1.epoch, c1.new_epoch, c2.epoch, c2.new_epoch) == (1, True, 1, False)
    a.release(c1)
    with pytest.raises(ProducerBusyError):
        a.claim(1, "t", "q", SHARED, None, f.of("q"))
    a.release(c2)
    granted(a.claim(1, "t", "q", SHARED, None, f.of("q")))
    assert f.got == []


def test_a_reconnect_with_the_current_epoch_keeps_it_and_a_stale_one_is_fenced() -> None:
    a = ProducerAccess({7: 5})
    f = Fences()
    c = granted(a.claim(7, "t", "p", EXCL, 5, f.of("p")))
    assert (c.epoch, c.new_epoch) == (5, False)
    a.release(c)
    with pytest.raises(ProducerFencedError, match="epoch 5, this producer's 4"):
        a.claim(7, "t", "p", EXCL, 4, f.of("p"))
    # Shared producers carry no epoch
    granted(a.claim(7, "t", "s", SHARED, 1, f.of("s")))


def test_fencing_ends_every_other_producer_and_keeps_the_waiters_waiting() -> None:
    async def run() -> None:
        a = ProducerAccess()
        f = Fences()
        s1 = granted(a.claim(1, "t", "s1", SHARED, None, f.of("s1")))
        granted(a.claim(1, "t", "s2", SHARED, None, f.of("s2")))
        waiting = a.claim(1, "t", "w", WAIT, None, f.of("w"))
        assert isinstance(waiting, asyncio.Future)
        x = granted(a.claim(1, "t", "x", FENCE, None, f.of("x")))
        assert x.new_epoch and x.epoch == 1
        assert sorted(g.split(":")[0] for g in f.got) == ["s1", "s2"]
        assert "ExclusiveWithFencing" in f.got[0]
        a.release(s1)  # a fenced session ending later changes nothing
        assert a.holder(1) == "x" and not waiting.done()
        a.release(x)
        assert waiting.done()
        w = granted(a.claim(1, "t", "w", WAIT, None, f.of("w")))
        assert w.epoch == 2

    asyncio.run(run())


def test_a_woken_waiter_that_leaves_passes_its_turn_on() -> None:
    async def run() -> None:
        a = ProducerAccess()
        f = Fences()
        h = granted(a.claim(1, "t", "h", EXCL, None, f.of("h")))
        w1 = a.claim(1, "t", "w1", WAIT, None, f.of("w1"))
        w2 = a.claim(1, "t", "w2", WAIT, None, f.of("w2"))
        assert isinstance(w1, asyncio.Future) and isinstance(w2, asyncio.Future)
        a.release(h)
        assert w1.done() and not w2.done()
        a.pass_on(1, w1)  # w1's session ended before it claimed again
        assert w2.done()

    asyncio.run(run())
