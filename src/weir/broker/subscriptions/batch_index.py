"""Batch-index acknowledgements: some messages of one stored batch, named by their index
in it (Pulsar's ``ack_set``; a Pulsar entry is a weir stored batch).

A weir message has an offset of its own (the batch at offset X holds X, X+1, ...), so
acknowledging index i of the batch at X is acknowledging offset X+i: the cursor's
range set keeps exactly which messages of a batch are done, its snapshot rides the
same group commit as every ack, and a redelivery sends only the rest of the batch.
This module checks the request against the stored batch and turns it into ranges.
"""

from __future__ import annotations

from collections.abc import Iterable

from weir.broker.partition_actor import PartitionActor
from weir.errors import BadRequestError
from weir.storage.batch import iter_batches

MAX_BATCH_INDEX = 1 << 20


async def batch_count_at(actor: PartitionActor, batch_offset: int) -> int:
    """The message count of the stored batch that starts at ``batch_offset``."""
    if batch_offset < actor.start_offset or batch_offset >= actor.end_offset:
        raise BadRequestError(
            f"no stored batch at offset {batch_offset} of partition {actor.partition} "
            f"(it holds {actor.start_offset}..{actor.end_offset - 1})"
        )
    res = await actor.read_async(batch_offset, 1, batch_offset + 1)
    for chunk in res.chunks:
        for _, h in iter_batches(chunk, verify=False):
            if h.base_offset <= batch_offset < h.next_offset:
                if h.base_offset != batch_offset:
                    raise BadRequestError(
                        f"offset {batch_offset} of partition {actor.partition} is index "
                        f"{batch_offset - h.base_offset} of the batch at offset {h.base_offset}, "
                        "not the start of a batch"
                    )
                return h.record_count
    raise BadRequestError(
        f"no stored batch at offset {batch_offset} of partition {actor.partition}"
    )


def index_ranges(batch_offset: int, count: int, indexes: Iterable[int]) -> list[tuple[int, int]]:
    """``[start, end)`` offset ranges of the batch's messages at ``indexes`` (checked)."""
    picked = sorted(set(indexes))
    if not picked:
        raise BadRequestError("a batch-index acknowledgement needs at least one index")
    bad = [i for i in picked if not isinstance(i, int) or not 0 <= i < count]
    if bad:
        raise BadRequestError(
            f"the batch at offset {batch_offset} holds indexes 0..{count - 1}, not {bad[:5]}"
        )
    out: list[tuple[int, int]] = []
    for i in picked:
        o = batch_offset + i
        if out and out[-1][1] == o:
            out[-1] = (out[-1][0], o + 1)
        else:
            out.append((o, o + 1))
    return out
