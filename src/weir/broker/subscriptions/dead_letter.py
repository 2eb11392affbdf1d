"""Dead letters: a message delivered again more than ``max_redeliver_count`` times goes to
the subscription's dead-letter topic instead (default ``<topic>-<subscription>-DLQ``),
with its key, headers and creation time, plus headers naming where it came from; then
it counts as acknowledged in the subscription.

At least once: the copy is durable before the ack is; a crash between the two leaves
the message unacknowledged, so it may reach the dead-letter topic twice.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from weir.errors import BadRequestError
from weir.storage.batch import decode_payload, iter_batches
from weir.storage.batch_encoding import encode_batch

ORIGIN_TOPIC = "weir-origin-topic"
ORIGIN_PARTITION = "weir-origin-partition"
ORIGIN_OFFSET = "weir-origin-offset"
ORIGIN_SUBSCRIPTION = "weir-origin-subscription"


@dataclass(frozen=True, slots=True)
class DeadLetterPolicy:
    max_redeliver_count: int
    topic: str = ""  # empty: <topic>-<subscription>-DLQ

    def __post_init__(self) -> None:
        if self.max_redeliver_count < 1:
            raise BadRequestError(
                f"max_redeliver_count must be >= 1, got {self.max_redeliver_count}"
            )

    def topic_for(self, short_topic: str, subscription: str) -> str:
        return self.topic or f"{short_topic}-{subscription}-DLQ"


def copied_batches(
    chunks: Iterable[Any],
    offsets: Collection[int],
    headers_for: Callable[[int, dict[str, str]], dict[str, str]],
) -> list[bytes]:
    """New batches holding the messages at ``offsets`` of stored ``chunks`` (one per stored
    batch), with their data, key and creation time; ``headers_for(offset, headers)``
    gives each one's new headers."""
    out: list[bytes] = []
    for chunk in chunks:
        for pos, h in iter_batches(chunk, verify=False):
            picked = [i for i in range(h.record_count) if h.base_offset + i in offsets]
            if not picked:
                continue
            p = decode_payload(chunk, pos, h)
            data, keys, headers = p.data_list(), p.key_list(), p.header_list()
            created = (
                [h.created_base] * h.record_count
                if p.created_deltas is None
                else [h.created_base + d for d in p.created_deltas]
            )
            out.append(
                encode_batch(
                    [data[i] for i in picked],
                    keys=[keys[i] for i in picked],
                    headers=[headers_for(h.base_offset + i, headers[i]) for i in picked],
                    created_at=[created[i] for i in picked],
                    data_codec=h.data_codec,
                )
            )
    return out


def with_origin(origin: dict[str, str], offset: int, headers: dict[str, str]) -> dict[str, str]:
    """``headers`` plus where the message came from; a message that carries an origin
    already (a retry letter) keeps its first one."""
    if ORIGIN_TOPIC in headers:
        return dict(headers)
    return {**headers, **origin, ORIGIN_OFFSET: str(offset)}


def dead_letter_batches(
    chunks: Iterable[Any], offsets: Collection[int], origin: dict[str, str]
) -> list[bytes]:
    """New batches holding the messages at ``offsets`` of stored ``chunks``, one per
    stored batch, each message's headers extended with ``origin`` and its offset."""
    return copied_batches(chunks, offsets, lambda o, h: with_origin(origin, o, h))
