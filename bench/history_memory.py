"""Memory of the reliability suite's history and checker per acknowledged message.

A synthetic history shaped like `make soak`'s (tests/reliability/chaos.py): a few steady
producers and many short-lived anonymous ones, each pinned to one of 8 partitions, every
message attempted and acknowledged, about 1.24 deliveries per message (a rebalance every
2,000 messages of a partition; its next session reads some again), half of each partition
removed by retention at the end.
It is recorded, read back and judged, and tracemalloc reports the bytes held by the
history after recording, with the final contents, and at the checker's peak.

    python -m bench.history_memory --messages 3000000
    python -m bench.history_memory --messages 300000 --module /tmp/old/history.py

``--module``: a history module of the older, one-file form (History, Stored and check in
one module, no Contents) to measure it the same way.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import resource
import sys
import time
import tracemalloc
from collections.abc import Iterator
from types import ModuleType
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(path: str | None) -> tuple[ModuleType, ModuleType]:
    """(history module, checker module)."""
    if path is None:
        sys.path.insert(0, ROOT)
        from tests.reliability import checker, history

        return history, checker
    spec = importlib.util.spec_from_file_location("history_under_test", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod, mod


def synth(messages: int, seed: int) -> Iterator[tuple[str, int, int, bool]]:
    """(id, partition key, offset, read again by a new session) of every message, in order."""
    rng = random.Random(seed)
    keys = [t * 1000 + p for t in (0, 1) for p in range(4)]
    ends = dict.fromkeys(keys, 0)
    next_n: dict[str, int] = {}
    steady = [f"p{i}" for i in range(6)]
    done = anon = 0
    while done < messages:
        if rng.random() < 0.7:
            label, count = rng.choice(steady), 500
        else:
            label, count = f"a{anon}", rng.randint(50, 400)
            anon += 1
        key = keys[sum(map(ord, label)) % len(keys)]
        count = min(count, messages - done)
        base = next_n.get(label, 0)
        next_n[label] = base + count
        for n in range(base, base + count):
            off = ends[key]
            ends[key] += 1
            yield f"id:{label}:{n}", key, off, rng.random() < 0.24
        done += count


def run(messages: int, module: str | None, seed: int = 1) -> dict[str, Any]:
    hist_mod, check_mod = load(module)
    tracemalloc.start()
    t0 = time.monotonic()
    h = hist_mod.History()
    ends: dict[int, int] = {}
    for mid, key, off, again in synth(messages, seed):
        h.attempted(mid)
        h.acked(mid, key, off)
        g = off // 2000  # a rebalance every 2,000 messages of a partition
        h.delivered(f"c{key}/g{g}", key, off, mid)
        if again:  # the next session (after the rebalance) reads it again
            h.delivered(f"c{key}/g{g + 1}", key, off, mid)
        ends[key] = off + 1
    recorded = tracemalloc.get_traced_memory()[0]
    t_record = time.monotonic() - t0
    # the read back: the upper half of each partition is still there
    starts = {k: e // 2 for k, e in ends.items()}
    stored: Any
    if hasattr(hist_mod, "Contents"):
        stored = hist_mod.Contents(h)
        for k in ends:
            stored.partition(k)
        for mid, key, off, _ in synth(messages, seed):
            if off >= starts[key]:
                stored.add(key, off, mid, "", 0)
    else:
        stored = {k: [] for k in ends}
        for mid, key, off, _ in synth(messages, seed):
            if off >= starts[key]:
                stored[key].append(hist_mod.Stored(off, mid, "", 0))
    with_contents = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    t1 = time.monotonic()
    report = check_mod.check(h, stored, starts)
    t_check = time.monotonic() - t1
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert report.ok, report.summary()
    assert report.acknowledged == messages, report.summary()
    return {
        "module": module or "tests/reliability (compact)",
        "messages": messages,
        "acknowledged": report.acknowledged,
        "delivered": report.delivered,
        "stored": report.stored,
        "history_B_per_msg": recorded / messages,
        "with_contents_B_per_msg": with_contents / messages,
        "check_peak_B_per_msg": peak / messages,
        "record_s": t_record,
        "check_s": t_check,
        "max_rss_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--module", help="an older one-file history module to measure instead")
    args = ap.parse_args()
    with open("/proc/loadavg") as f:
        load_avg = f.read().split()[:3]
    r = run(args.messages, args.module)
    print(f"load average {' '.join(load_avg)} (tracemalloc on: times are slower than real)")
    print("| | value |")
    print("|---|---|")
    for k, v in r.items():
        print(f"| {k} | {v:,.1f} |" if isinstance(v, float) else f"| {k} | {v} |")


if __name__ == "__main__":
    main()
