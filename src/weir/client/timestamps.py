"""Times as the SDK takes them (a datetime, a timedelta or a number of ms) and as the wire
carries them (ms)."""

from __future__ import annotations

import datetime as dt

from weir.errors import BadRequestError


def to_ms(value: dt.datetime | dt.timedelta | int | float | None, what: str) -> int | None:
    """ms from a datetime (since epoch), a timedelta (duration), or a number already in ms."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, dt.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    raise BadRequestError(
        f"{what} must be a datetime, a timedelta or ms, not {type(value).__name__}"
    )
