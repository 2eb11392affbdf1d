"""Writing known records into topics and reading topics back, through the SDK alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import weir
from weir.client import Message


@dataclass(frozen=True)
class Rec:
    """One record as a test writes it."""

    value: bytes
    key: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    created_at_ms: int | None = None


def produce(client: weir.Client, topic: str, per_partition: Mapping[int, Sequence[Rec]]) -> None:
    """Write each partition's records, in order, with a producer of its own."""
    for p, recs in per_partition.items():
        with client.writer(topic, producer_id=f"test-{topic}-{p}", partition=p) as w:
            for r in recs:
                w.write(
                    r.value, key=r.key, headers=dict(r.headers) or None, created_at=r.created_at_ms
                )


def read_topic(
    client: weir.Client, topic: str, *, read_committed: bool = False
) -> dict[int, list[Message]]:
    """Every stored message of every partition, in offset order (``read_committed``: only
    what transactions committed, up to each partition's last stable offset)."""
    info = client.describe_topic(topic)
    out: dict[int, list[Message]] = {}
    for pi in info.partition_info:
        msgs: list[Message] = []
        end = pi.stable_offset if read_committed else pi.end_offset
        for chunk in client.read_range(
            topic, pi.partition, pi.start_offset, end, read_committed=read_committed
        ):
            msgs.extend(m for m in chunk.messages() if m.offset >= pi.start_offset)
        out[pi.partition] = msgs
    return out


def values(client: weir.Client, topic: str) -> list[bytes]:
    """All values of a topic, partition by partition."""
    return [m.data for msgs in read_topic(client, topic).values() for m in msgs]
