"""Which bookies hold a new ledger: spread over racks (or zones) when bookies name one.

A bookie registers its labels (``weir bookie serve --rack r1``). An ensemble
takes bookies round-robin over the racks, in a random order of racks and of
bookies within each, so E bookies span min(E, racks) racks and a rack lost
takes at most ceil(E / racks) of them. Bookies without a rack share the rack "".
"""

from __future__ import annotations

import random
from collections import defaultdict

from weir.replication.errors import NotEnoughBookiesError


def place_ensemble(
    available: dict[str, dict[str, str]], size: int, rng: random.Random | None = None
) -> tuple[str, ...]:
    rng = rng or random.Random()
    if len(available) < size:
        raise NotEnoughBookiesError(
            f"an ensemble of {size} needs as many available bookies; "
            f"{len(available)} registered: {sorted(available)}"
        )
    racks: dict[str, list[str]] = defaultdict(list)
    for bookie, labels in sorted(available.items()):
        racks[labels.get("rack", "")].append(bookie)
    queues = list(racks.values())
    rng.shuffle(queues)
    for q in queues:
        rng.shuffle(q)
    ensemble: list[str] = []
    while len(ensemble) < size:
        for q in queues:
            if q and len(ensemble) < size:
                ensemble.append(q.pop())
    return tuple(ensemble)
