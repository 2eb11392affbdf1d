"""What a replicated partition writes in its managed log: one kind byte, then the body.

- ``DATA``: stamped batches, concatenated exactly as the embedded log stores them
  (offsets and write times in their headers); the entry covers their records.
- ``STATE``: changes of derived state that no batch carries, as JSON: ``set``,
  named positions (consumer offsets, subscription cursors: opaque values to this
  layer) key -> base64 value or null to delete; ``drop_producers``, producers whose
  dedup state retention forgets. The entry covers no offset.

A new owner rebuilds everything derived (producer table, end offset, positions)
from a snapshot and these entries alone.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence

from weir.errors import CorruptDataError

DATA = 0x44  # "D"
STATE = 0x53  # "S"


def encode_data(chunks: list[bytes | memoryview]) -> bytes:
    return b"".join([bytes((DATA,)), *chunks])


def encode_state(
    positions: Mapping[str, bytes | None], drop_producers: Sequence[str] = ()
) -> bytes:
    body = {
        "set": {
            k: None if v is None else base64.b64encode(v).decode() for k, v in positions.items()
        },
        "drop_producers": list(drop_producers),
    }
    return bytes((STATE,)) + json.dumps(body, sort_keys=True).encode()


def decode_state(body: bytes | memoryview) -> tuple[dict[str, bytes | None], list[str]]:
    """(positions set or deleted, producers dropped) of a STATE entry's body."""
    try:
        raw = json.loads(bytes(body))
        positions = {k: None if v is None else base64.b64decode(v) for k, v in raw["set"].items()}
        return positions, [str(p) for p in raw["drop_producers"]]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptDataError(f"a state entry does not decode: {exc!r}") from None


def kind_of(payload: bytes | memoryview) -> int:
    if not payload:
        raise CorruptDataError("an empty partition-log entry")
    kind = payload[0]
    if kind not in (DATA, STATE):
        raise CorruptDataError(f"unknown partition-log entry kind {kind:#x}")
    return kind
