"""What a new producer costs the broker: the pin of its first write session.

    python bench/pins_bench.py [--producers 500] [--partitions 4]

Opens a broker on a fresh data directory (in a temporary directory beside the
repository, so on the same disk as a real data directory) and resolves the pin
of N new producers one after the other, then N at once, counting the group
commits (fsyncs) they caused. Every writer of the SDK has a producer id, so this
is paid by every `weir write` and every new writer.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig

ROOT = Path(__file__).resolve().parents[1]


async def run(producers: int, partitions: int) -> None:
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        broker = await Broker.open(BrokerConfig(data_dir=Path(tmp), retention_interval_s=3600))
        try:
            await broker.create_topic("t", partitions=partitions)
            commits = broker.store.committer.stats.commits
            t0 = time.perf_counter()
            for i in range(producers):
                await broker.resolve_partition("t", f"seq-{i}")
            one_by_one = (time.perf_counter() - t0) / producers
            t0 = time.perf_counter()
            await asyncio.gather(
                *(broker.resolve_partition("t", f"par-{i}") for i in range(producers))
            )
            at_once = time.perf_counter() - t0
            commits = broker.store.committer.stats.commits - commits
        finally:
            await broker.close()
    print(
        f"{producers} new producers one by one: {one_by_one * 1e6:,.0f} us each; "
        f"{producers} at once: {at_once * 1e3:,.1f} ms; group commits: {commits}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--producers", type=int, default=500)
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args()
    asyncio.run(run(args.producers, args.partitions))


if __name__ == "__main__":
    main()
