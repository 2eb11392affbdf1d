"""weir.gc_tuning: after `settle` a full collection no longer walks the server's startup
objects (the pause that landed in ack latency), and young collections are rarer."""

from __future__ import annotations

import subprocess
import sys

# the server's imports, then how many objects a full collection walks before and after
PROBE = """
import gc, sys
import weir.server, weir.cli.serve, weir.protocols.native.tcp_front
from weir import gc_tuning
before = len(gc.get_objects())
if sys.argv[1] == "settled":
    gc_tuning.settle()
junk = [[i] for i in range(1000)]  # made after: still collected, and freed when dropped
print(before, len(gc.get_objects()), gc.get_freeze_count(), gc.get_threshold()[0])
"""


def _probe(mode: str) -> list[int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return [int(x) for x in out.stdout.split()]


def test_settle_takes_startup_objects_out_of_full_collections() -> None:
    before, walked_plain, frozen_plain, gen0_plain = _probe("plain")
    assert before > 20_000  # the server's imports: what every full collection walked
    assert frozen_plain == 0 and gen0_plain == 700
    _, walked, frozen, gen0 = _probe("settled")
    assert frozen >= before  # the startup objects are in the permanent generation
    assert walked < 5_000  # a full collection walks what was made since: the 1,000 lists
    assert walked >= 1_000
    assert gen0 == 10_000 and walked_plain > before
