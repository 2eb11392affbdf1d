"""Where each partition should live: the placement policy of a cluster (pure, no I/O).

The leader broker runs it whenever brokers join or leave, partitions appear or
an admin unloads one, and records the result as each partition's assignment.

The policy, by load (a partition's weight; 1 each by default, so load is the
partition count; the broker's measured bytes/s can be passed as weights):

1. A partition stays on its broker while that broker is alive (moves cost a
   handover: fencing, a new ledger, clients reconnecting).
2. A partition with no live broker (new, its broker gone, or unloaded) goes to
   the least-loaded live broker, never to the one an unload asked it to leave
   when another exists. Ties go to the smallest broker id, so every run of the
   policy on the same input gives the same answer.
3. Then, while moving one partition from the most-loaded broker to the
   least-loaded one lowers the larger of the two, it moves (the lightest
   partition that does): after a join the new broker takes partitions until the
   spread is within one partition's weight, and no more moves than that.
   A *pinned* partition (an admin unloaded it to a named broker) counts in its
   broker's load but is never moved for balance while that broker lives.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping


def place(
    partitions: Iterable[str],
    brokers: Iterable[str],
    current: Mapping[str, str | None],
    *,
    avoid: Mapping[str, str] | None = None,
    weights: Mapping[str, float] | None = None,
    pinned: Collection[str] = (),
) -> dict[str, str]:
    """The broker of every partition (empty when no broker is alive).

    ``current``: each partition's broker now (None or absent: none); ``avoid``:
    partitions being unloaded -> the broker they leave; ``weights``: load per
    partition (1.0 when absent); ``pinned``: partitions never moved for balance."""
    live = sorted(set(brokers))
    if not live:
        return {}
    avoid = avoid or {}
    weights = weights or {}

    def weight(p: str) -> float:
        return float(weights.get(p, 1.0))

    load = dict.fromkeys(live, 0.0)
    owned: dict[str, list[str]] = {b: [] for b in live}
    out: dict[str, str] = {}
    homeless: list[str] = []
    for p in sorted(set(partitions)):
        b = current.get(p)
        if b in load and p not in avoid:
            out[p] = b
            load[b] += weight(p)
            owned[b].append(p)
        else:
            homeless.append(p)
    # heaviest first: greedy placement of big partitions balances better
    for p in sorted(homeless, key=lambda p: (-weight(p), p)):
        choices = [b for b in live if b != avoid.get(p)] or live
        b = min(choices, key=lambda b: (load[b], b))
        out[p] = b
        load[b] += weight(p)
        owned[b].append(p)
    while True:
        hi = max(live, key=lambda b: (load[b], b))
        lo = min(live, key=lambda b: (load[b], b))
        gap = load[hi] - load[lo]
        # moving p lowers the max of the two only if its weight is below the gap
        movable = [
            p for p in owned[hi] if 0 < weight(p) < gap and avoid.get(p) != lo and p not in pinned
        ]
        if not movable:
            return out
        p = min(movable, key=lambda p: (weight(p), p))
        owned[hi].remove(p)
        owned[lo].append(p)
        load[hi] -= weight(p)
        load[lo] += weight(p)
        out[p] = lo
