"""Delayed delivery: a message whose ``weir-deliver-at`` header (ms since the epoch; the
SDK's ``deliver_at`` / ``deliver_after``) lies in the future is held back from Shared and
Key_Shared subscriptions until then (Exclusive and Failover deliver it at once, as
Pulsar does).

The time travels with the message, so the index of held-back messages is rebuilt from
the data after a restart: nothing about it needs storing. Only batches that carry
headers are looked at.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from weir.storage.batch import FLAG_HEADERS, decode_payload, iter_batches

DELIVER_AT = "weir-deliver-at"


def deliver_times(chunks: Iterable[Any], lo: int, hi: int) -> dict[int, int]:
    """offset -> deliver-at (ms) of the messages of ``[lo, hi)`` that carry one."""
    out: dict[int, int] = {}
    for chunk in chunks:
        for pos, h in iter_batches(chunk, verify=False):
            if h.next_offset <= lo or not h.flags & FLAG_HEADERS:
                continue
            if h.base_offset >= hi:
                return out
            for i, headers in enumerate(decode_payload(chunk, pos, h).header_list()):
                at = headers.get(DELIVER_AT)
                o = h.base_offset + i
                if at is not None and lo <= o < hi and at.isdigit():
                    out[o] = int(at)
    return out
