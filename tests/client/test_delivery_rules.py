"""The writer's I/O-free delivery rules: the message size limit and the stall clock."""

from __future__ import annotations

import pytest

from weir.client.delivery import DEFAULT_MAX_MESSAGE_BYTES, MessageLimit, StallClock
from weir.errors import MessageTooLargeError


def test_limit_follows_the_server_and_a_setting_only_lowers_it() -> None:
    follow = MessageLimit(None)
    assert follow.bytes == DEFAULT_MAX_MESSAGE_BYTES
    assert follow.must_wait(DEFAULT_MAX_MESSAGE_BYTES + 1)  # the server may allow more
    assert not follow.must_wait(DEFAULT_MAX_MESSAGE_BYTES)
    follow.learn(64 << 20)
    assert follow.bytes == 64 << 20 and not follow.must_wait(1 << 30)
    follow.check(64 << 20)
    with pytest.raises(MessageTooLargeError, match="exceeds the server's limit of 67108864"):
        follow.check((64 << 20) + 1)

    low = MessageLimit(100)
    assert not low.must_wait(101)  # the setting is an upper bound already
    with pytest.raises(MessageTooLargeError, match="exceeds max_message_bytes of 100"):
        low.check(101)
    low.learn(1000)
    assert low.bytes == 100
    high = MessageLimit(1 << 30)
    high.learn(1000)
    assert high.bytes == 1000
    old_server = MessageLimit(None)
    old_server.learn(0)  # a server that does not report its limit
    assert old_server.bytes == DEFAULT_MAX_MESSAGE_BYTES and not old_server.may_grow


def test_stall_clock_runs_only_while_messages_wait_without_acks() -> None:
    clock = StallClock()
    assert clock.observe(0, 0, 10.0) == 0.0  # nothing waits
    assert clock.observe(5, 0, 11.0) == 0.0  # starts now
    assert clock.observe(5, 0, 14.5) == 3.5
    assert clock.observe(3, 2, 15.0) == 0.0  # an ack: progress, start over
    assert clock.observe(3, 2, 16.0) == 1.0
    assert clock.observe(0, 5, 17.0) == 0.0  # all acknowledged
    assert clock.observe(1, 5, 20.0) == 0.0  # a new wait starts when it is seen
    assert clock.observe(1, 5, 21.0) == 1.0
