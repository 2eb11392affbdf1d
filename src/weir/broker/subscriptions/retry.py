"""Retry letters: ``reconsume_later(message, delay)`` (Pulsar's retry letter topic).

The message is copied to the subscription's retry topic (default
``<topic>-<subscription>-RETRY``, as Pulsar names it; created with one partition when
missing) with its data, key, headers and creation time, plus:

- ``weir-reconsume-count``: one more than the message carried (1 the first time);
- ``weir-deliver-at``: now + delay, so the retry topic's subscription (Shared, or
  Key_Shared for a Key_Shared subscription: both hold delayed messages back) delivers
  it back to the consumers after the delay;
- ``weir-origin-topic``, ``-partition``, ``-offset``, ``-subscription``: where it was first
  consumed (kept from the first time on);

then the original is acknowledged. With a dead-letter policy, a message whose reconsume
count would pass ``max_redeliver_count`` goes to the dead-letter topic instead.

At least once: the copy is durable before the original's ack; a crash between the two
may copy it twice.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from weir.broker.subscriptions.dead_letter import copied_batches, with_origin
from weir.broker.subscriptions.delayed import DELIVER_AT
from weir.storage.batch import FLAG_HEADERS, decode_payload, iter_batches

RECONSUME_COUNT = "weir-reconsume-count"


def retry_topic_for(short_topic: str, subscription: str) -> str:
    return f"{short_topic}-{subscription}-RETRY"


@dataclass(frozen=True, slots=True)
class RetryLetters:
    """Where ``reconsume_later`` sends a subscription's messages."""

    topic: str  # the retry letter topic
    dead_letter_topic: str = ""  # where a message goes after max_redeliver_count reconsumes
    max_redeliver_count: int = 0  # 0: reconsumed for ever


def reconsume_count(headers: dict[str, str]) -> int:
    raw = headers.get(RECONSUME_COUNT, "")
    return int(raw) if raw.isdigit() else 0


def _counts(chunks: Iterable[Any], offsets: Collection[int]) -> dict[int, int]:
    """offset -> reconsume count carried, of the messages at ``offsets`` that carry one."""
    out: dict[int, int] = {}
    for chunk in chunks:
        for pos, h in iter_batches(chunk, verify=False):
            if not h.flags & FLAG_HEADERS:
                continue
            for i, headers in enumerate(decode_payload(chunk, pos, h).header_list()):
                n = reconsume_count(headers)
                if n and h.base_offset + i in offsets:
                    out[h.base_offset + i] = n
    return out


def retry_copies(
    chunks: list[Any],
    offsets: Collection[int],
    origin: dict[str, str],
    deliver_at_ms: int,
    letters: RetryLetters,
) -> tuple[list[bytes], list[bytes]]:
    """The batches for the retry topic and those for the dead-letter topic."""
    counts = _counts(chunks, offsets)
    limit = letters.max_redeliver_count
    dead = {o for o in offsets if limit and counts.get(o, 0) + 1 > limit}
    again = [o for o in offsets if o not in dead]

    def retried(o: int, headers: dict[str, str]) -> dict[str, str]:
        out = with_origin(origin, o, headers)
        out[RECONSUME_COUNT] = str(counts.get(o, 0) + 1)
        out[DELIVER_AT] = str(deliver_at_ms)
        return out

    retry = copied_batches(chunks, set(again), retried) if again else []
    buried = copied_batches(chunks, dead, lambda o, h: with_origin(origin, o, h)) if dead else []
    return retry, buried
