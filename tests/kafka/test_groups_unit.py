"""The coordinator's state machine without a network: generations, fencing, rejoining an
emptied group, session expiry."""

from __future__ import annotations

import asyncio

import pytest

from weir.protocols.kafka.errors import ErrorCode, KafkaError
from weir.protocols.kafka.groups import Coordinator, GroupState

PROTOCOLS = [("range", b"meta")]


async def _join(c: Coordinator, member: str = "", session_ms: int = 1000) -> object:
    return await c.join(
        "g",
        member,
        group_instance_id=None,
        client_id="t",
        client_host="h",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=2000,
        protocol_type="consumer",
        protocols=PROTOCOLS,
        require_known_member_id=False,
    )


async def test_a_group_emptied_and_joined_again_gets_a_new_generation() -> None:
    c = Coordinator(initial_rebalance_delay_ms=10)
    first = await _join(c)
    assert first.error == ErrorCode.NONE and first.generation == 1  # type: ignore[attr-defined]
    await c.sync("g", 1, first.member_id, {first.member_id: b"a"})  # type: ignore[attr-defined]
    c.leave("g", [first.member_id])  # type: ignore[attr-defined]
    assert c.groups["g"].state == GroupState.EMPTY
    again = await _join(c)  # the second life of the group (this hung before: issue found by README)
    assert again.generation == 2 and again.leader == again.member_id  # type: ignore[attr-defined]


async def test_two_members_share_a_generation_and_stale_ones_are_fenced() -> None:
    c = Coordinator(initial_rebalance_delay_ms=50)
    a, b = await asyncio.gather(_join(c), _join(c))
    assert a.generation == b.generation == 1  # type: ignore[attr-defined]
    leader = a if a.members else b  # type: ignore[attr-defined]
    assert len(leader.members) == 2  # type: ignore[attr-defined]
    with pytest.raises(KafkaError) as info:
        c.heartbeat("g", 0, a.member_id)  # type: ignore[attr-defined]
    assert info.value.code == ErrorCode.ILLEGAL_GENERATION
    with pytest.raises(KafkaError) as info:
        c.heartbeat("g", 1, "nobody")
    assert info.value.code == ErrorCode.UNKNOWN_MEMBER_ID


async def test_a_member_that_stops_heartbeating_is_removed() -> None:
    clock = [0.0]
    c = Coordinator(initial_rebalance_delay_ms=0, clock=lambda: clock[0])
    c.start()
    try:
        m = await _join(c, session_ms=1000)
        await c.sync("g", 1, m.member_id, {})  # type: ignore[attr-defined]
        clock[0] = 5.0  # past its session timeout
        deadline = asyncio.get_running_loop().time() + 5
        while c.groups["g"].members and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        assert not c.groups["g"].members and c.groups["g"].state == GroupState.EMPTY
    finally:
        await c.close()
