"""The YDB front's pure parts: commit ranges, tickets, and the status each error maps to."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from weir import errors
from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.protocols.ydb.auth import Authenticator
from weir.protocols.ydb.commits import CommitTracker
from weir.protocols.ydb.protos import StatusIds
from weir.protocols.ydb.status import status_of
from weir.protocols.ydb.write_session import _cuts


def test_committed_offset_moves_only_over_contiguous_ranges() -> None:
    t = CommitTracker(100)
    assert not t.add(110, 120) and t.committed == 100  # a gap before it: wait
    assert not t.add(130, 140) and t.pending == 2
    assert t.add(100, 110) and t.committed == 120  # the gap closes, the next range joins
    assert not t.add(100, 120)  # repeated: fine, nothing moves
    assert t.add(120, 130) and t.committed == 140 and t.pending == 0
    assert t.add(135, 150) and t.committed == 150  # overlapping the committed part
    with pytest.raises(errors.BadRequestError):
        t.add(10, 5)
    with pytest.raises(errors.BadRequestError):
        t.add(-1, 5)


def test_requests_are_cut_into_batches_of_bounded_size() -> None:
    assert _cuts([10, 10, 10], 25) == [0, 2, 3]
    assert _cuts([30, 5, 5], 25) == [0, 1, 3]  # one message bigger than the bound: alone
    assert _cuts([1] * 5, 100) == [0, 5]


def test_every_weir_error_maps_to_a_status_the_sdk_handles_sensibly() -> None:
    assert status_of(errors.UnknownTopicError("x")) == StatusIds.SCHEME_ERROR
    assert status_of(errors.UnknownConsumerError("x")) == StatusIds.SCHEME_ERROR
    assert status_of(errors.UnknownPartitionError("x")) == StatusIds.BAD_REQUEST
    assert status_of(errors.MessageTooLargeError("x")) == StatusIds.BAD_REQUEST
    assert status_of(errors.OverloadedError("x")) == StatusIds.OVERLOADED
    assert status_of(errors.PartitionOverflowError("x")) == StatusIds.OVERLOADED
    assert status_of(errors.UnavailableError("x")) == StatusIds.UNAVAILABLE
    assert status_of(errors.UnauthorizedError("x")) == StatusIds.UNAUTHORIZED
    assert status_of(RuntimeError("bug")) == StatusIds.INTERNAL_ERROR

    def all_errors(cls: type[errors.WeirError]) -> list[type[errors.WeirError]]:
        return [cls, *(c for sub in cls.__subclasses__() for c in all_errors(sub))]

    over = (
        errors.UnknownTransactionError,
        errors.TransactionEndedError,
        errors.TransactionCommittedError,
    )
    for cls in all_errors(errors.WeirError):
        status = status_of(cls.__new__(cls))
        if cls in over:
            # as YDB answers a transaction that is over: retry_tx_* begins a new one, and a
            # stream only meets it as a transaction writer's, which the SDK never reconnects
            assert status == StatusIds.NOT_FOUND, cls
            continue
        # the SDK reconnects in a hot loop on NOT_FOUND: never used otherwise
        assert status != StatusIds.NOT_FOUND, cls
        if not cls.retryable:
            assert status != StatusIds.UNAVAILABLE or cls is errors.ClosedError, cls


async def test_tickets_survive_a_restart_and_expire_and_die_with_the_password(
    tmp_path: Path,
) -> None:
    config = BrokerConfig(data_dir=tmp_path, users={"ann": "pw1"}, allow_anonymous=False)
    broker = await Broker.open(config)
    try:
        auth = Authenticator(broker)
        token = auth.login("ann", "pw1")
        assert auth.verify(token) == "ann"
        with pytest.raises(errors.UnauthorizedError, match="Invalid user or password"):
            auth.login("ann", "pw2")
        with pytest.raises(errors.UnauthorizedError, match="invalid auth ticket"):
            auth.verify(token[:-2] + "xx")
        with pytest.raises(errors.UnauthorizedError, match="malformed"):
            auth.verify("garbage")
        stale = Authenticator(broker, ttl_s=-1).login("ann", "pw1")
        with pytest.raises(errors.UnauthorizedError, match="expired"):
            auth.verify(stale)
    finally:
        await broker.close()

    broker = await Broker.open(config)  # a restart: the signing secret is stored
    try:
        assert Authenticator(broker).verify(token) == "ann"
    finally:
        await broker.close()

    broker = await Broker.open(dataclasses.replace(config, users={"ann": "changed"}))
    try:
        with pytest.raises(errors.UnauthorizedError):
            Authenticator(broker).verify(token)
    finally:
        await broker.close()
