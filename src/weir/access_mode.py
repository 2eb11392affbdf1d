"""Producer access modes (Pulsar's), shared by the broker, the SDK and the CLI.

The broker enforces them (`weir.broker.access`); the SDK and the CLI only name
them, so this module depends on nothing but the errors.
"""

from __future__ import annotations

import enum

from weir.errors import BadRequestError


class AccessMode(enum.IntEnum):
    """The wire values (`weir.v1.ProducerAccessMode`)."""

    SHARED = 0
    EXCLUSIVE = 1
    WAIT_FOR_EXCLUSIVE = 2
    EXCLUSIVE_WITH_FENCING = 3

    @classmethod
    def parse(cls, value: object) -> AccessMode:
        """From a wire int, a member, or a name such as ``"Exclusive"`` /
        ``"wait-for-exclusive"`` / ``"EXCLUSIVE_WITH_FENCING"``; anything else is a
        `BadRequestError` naming the choices."""
        if isinstance(value, AccessMode):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                pass
        elif isinstance(value, str):
            norm = value.replace("-", "").replace("_", "").lower()
            for m in cls:
                if m.name.replace("_", "").lower() == norm:
                    return m
        raise BadRequestError(
            f"unknown producer access mode {value!r}: use one of {', '.join(ACCESS_MODE_NAMES)}"
        )

    @property
    def exclusive(self) -> bool:
        return self is not AccessMode.SHARED

    @property
    def title(self) -> str:
        """Pulsar's spelling: Shared, Exclusive, WaitForExclusive, ExclusiveWithFencing."""
        return "".join(w.capitalize() for w in self.name.split("_"))


ACCESS_MODE_NAMES = ("shared", "exclusive", "wait-for-exclusive", "exclusive-with-fencing")
