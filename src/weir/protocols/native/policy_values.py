"""Policy values on the wire: ``map<string, PolicyValue>`` to and from a plain dict.

A number, a flag, a named choice (a string), or "unlimited" (None in Python: keep
forever, no TTL, any number).
Shared by the server and the SDK, so both read the map the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from weir.errors import BadRequestError
from weir.protocols.native import weir_pb2 as pb


def to_wire(values: Mapping[str, Any], into: Any) -> None:
    """Fill the proto map ``into`` from ``values``."""
    for key, v in values.items():
        slot = into[key]
        if v is None:
            slot.unlimited = True
        elif isinstance(v, bool):
            slot.flag = v
        elif isinstance(v, int):
            slot.number = v
        elif isinstance(v, str):
            slot.text = v
        else:
            raise BadRequestError(
                f"policy {key} must be a number, true/false, a name or None (no limit), got {v!r}"
            )


def from_wire(values: Mapping[str, pb.PolicyValue]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, v in values.items():
        which = v.WhichOneof("value")
        if which is None:
            raise BadRequestError(f"policy {key} has no value")
        out[key] = None if which == "unlimited" else getattr(v, which)
    return out
