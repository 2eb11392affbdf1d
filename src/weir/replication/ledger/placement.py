"""Which bookies hold a ledger: spread over racks (or zones) when bookies name one.

A bookie registers its labels (``weir bookie serve --rack r1``). A new ledger's
ensemble takes bookies round-robin over the racks, in a random order of racks and
of bookies within each, so E bookies span min(E, racks) racks and a rack lost
takes at most ceil(E / racks) of them. A replacement (an ensemble change, a
re-replication) goes to a rack holding the fewest of the ensemble's other
bookies, none when it can. Bookies without a rack share the rack "". When the
racks cannot be honoured (fewer racks than bookies to spread), placement goes on
on the racks there are and says so in a warning: a ledger is never refused for
its racks.
"""

from __future__ import annotations

import logging
import random
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from weir.replication.errors import NotEnoughBookiesError

log = logging.getLogger("weir.replication.placement")

Labels = dict[str, dict[str, str]]  # bookie id -> its labels


@dataclass(frozen=True)
class BookieView:
    """The registered bookies: the writable ones (candidates) and the read-only ones
    (still holding data: their racks count when spreading a replacement)."""

    writable: Labels = field(default_factory=dict)
    read_only: Labels = field(default_factory=dict)

    def rack(self, bookie: str) -> str | None:
        """The bookie's rack, None when it is not registered (gone: rack unknown)."""
        labels = self.writable.get(bookie, self.read_only.get(bookie))
        return None if labels is None else labels.get("rack", "")

    @property
    def racked(self) -> bool:
        """Whether any registered bookie names a rack (else nothing to spread over)."""
        return any(
            labels.get("rack", "") for d in (self.writable, self.read_only) for labels in d.values()
        )


def place_ensemble(
    available: Labels, size: int, rng: random.Random | None = None
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
    if len(racks) > 1 or "" not in racks:
        per_rack = Counter(available[b].get("rack", "") for b in ensemble)
        if len(per_rack) < size:
            log.warning(
                "ensemble of %d over %d racks only (%s): a rack lost takes %d of its bookies",
                size,
                len(per_rack),
                ", ".join(f"{r or '(none)'}: {n}" for r, n in sorted(per_rack.items())),
                max(per_rack.values()),
            )
    return tuple(ensemble)


def choose_replacement(
    view: BookieView,
    ensemble: Sequence[str],
    failed: str,
    exclude: Collection[str] = (),
    rng: random.Random | None = None,
) -> str | None:
    """A writable bookie outside ``ensemble`` (and ``exclude``) to take ``failed``'s
    place, on the rack holding the fewest of the ensemble's other bookies; None when no
    bookie is free."""
    rng = rng or random.Random()
    candidates = sorted(
        b for b in view.writable if b not in ensemble and b != failed and b not in exclude
    )
    if not candidates:
        return None
    others = Counter(view.rack(b) for b in ensemble if b != failed)
    others.pop(None, None)  # bookies gone: their rack is unknown

    def crowding(bookie: str) -> int:
        return others[view.rack(bookie)]

    least = min(crowding(b) for b in candidates)
    chosen = rng.choice([b for b in candidates if crowding(b) == least])
    if least > 0 and view.racked:
        log.warning(
            "replacing %s: no free bookie on a rack outside the ensemble's (%s); %s on rack "
            "%r joins %d of them",
            failed,
            ", ".join(sorted(r or "(none)" for r in others if r is not None)),
            chosen,
            view.rack(chosen),
            least,
        )
    return chosen
