"""The server's garbage collector, set for a long-running process with a big static heap.

After start a server holds tens of thousands of objects that live as long as it does
(modules, protobuf descriptors, gRPC, the configuration): 72,000 from the imports alone.
CPython's full collection (generation 2) walks every one of them each time: 18-34 ms of
CPU on this project's machine, a pause that lands in whichever acks are in flight. `settle`
moves what is alive once the server is up into the permanent generation (`gc.freeze`), so
later collections walk only what was made since (a full collection right after: under
0.01 ms), and raises the first generation's threshold, so the young objects of writes are
collected in a tenth as many passes (docs/performance.md, issue 26).

Frozen objects are still freed by reference counting; only cycles among them are never
collected (the few that startup leaves). Called by ``weir serve`` once every listener is
up; a process that embeds the server (tests) keeps CPython's defaults.
"""

from __future__ import annotations

import gc

# CPython's default is 700: one young collection per ~700 new container objects. A write
# of 100 B messages makes some dozens per batch, so the default collects every few
# batches; at 10,000 a young collection still takes well under a millisecond (measured:
# docs/performance.md) and happens a tenth as often.
GEN0_THRESHOLD = 10_000


def settle(gen0_threshold: int = GEN0_THRESHOLD) -> None:
    """Freeze what is alive now (startup objects) and raise the gen0 threshold.

    No full collection first: on this machine it took up to 0.6 s under load, while the
    server was already serving; the startup garbage it would free is a few cycles."""
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(gen0_threshold, gen1, gen2)


__all__ = ["GEN0_THRESHOLD", "settle"]
