"""Delayed delivery on the writer's side: ``deliver_at`` / ``deliver_after`` become the
``weir-deliver-at`` header (ms since the epoch) that Shared and Key_Shared subscriptions
hold a message back by (see docs/subscriptions.md)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping

from weir.errors import BadRequestError

DELIVER_AT = "weir-deliver-at"  # the broker's weir.broker.subscriptions.delayed.DELIVER_AT


def with_deliver_at(
    headers: Mapping[str, str] | None,
    deliver_at: dt.datetime | int | None,
    deliver_after: float | dt.timedelta | None,
) -> Mapping[str, str] | None:
    """``headers`` plus the delivery time, when one is asked for."""
    if deliver_at is None and deliver_after is None:
        return headers
    if deliver_at is not None and deliver_after is not None:
        raise BadRequestError("give deliver_at or deliver_after, not both")
    if deliver_after is not None:
        seconds = (
            deliver_after.total_seconds()
            if isinstance(deliver_after, dt.timedelta)
            else float(deliver_after)
        )
        if seconds < 0:
            raise BadRequestError(f"deliver_after must not be negative, got {deliver_after!r}")
        ms = int(time.time() * 1000 + seconds * 1000)
    elif isinstance(deliver_at, dt.datetime):
        ms = round(deliver_at.timestamp() * 1000)
    else:
        assert deliver_at is not None
        ms = int(deliver_at)
    if ms < 0:
        raise BadRequestError(f"deliver_at must be a time after the epoch, got {deliver_at!r}")
    return {**(headers or {}), DELIVER_AT: str(ms)}
