"""A broker of the cluster in a process of its own, writing through its partition actor.

Usage: python actor_broker.py ZK_HOSTS ZK_ROOT BROKER_ID TOPIC COUNT

Joins the cluster (Ownership with a 4 s session, `ClusterPartitions` as its host),
records partition 0 of TOPIC and, while it serves it, writes messages one at a time
through the partition's actor, as the broker's write path does: producer ``w``,
message n (from 0) with seq_no n + 1 and the history checker's data ``id:w:n``.
Prints ``try <n>`` before each write and ``ack <n> <offset>`` once it is
acknowledged, until COUNT writes or 120 s; a test kills it with SIGKILL meanwhile.
"""

from __future__ import annotations

import asyncio
import sys
import time

from weir.broker.cluster import Ownership, OwnershipConfig, ReplicatedLogHost, partition_key
from weir.broker.cluster.partitions import ClusterPartitions
from weir.errors import WeirError
from weir.replication.ledger import LedgerClient
from weir.replication.managed_log import ManagedLogConfig
from weir.replication.partition_log import ReplicationConfig
from weir.storage.batch_encoding import encode_batch
from weir.storage.incoming import validate_incoming

REP = ReplicationConfig(ManagedLogConfig(max_entries_per_ledger=16), snapshot_every=10)
CONFIG = OwnershipConfig(session_timeout=4.0, reconcile_interval=1.0)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def batch(n: int) -> list[bytes]:
    data = f"id:w:{n}|".encode() + b"." * 32  # tests.reliability.history.make_data's form
    return [encode_batch([data], producer_id="w", first_seq_no=n + 1)]


async def main(hosts: str, root: str, broker: str, topic: str, count: int) -> int:
    key = partition_key(topic, 0)
    async with LedgerClient(hosts, root=root, zk_timeout=4.0, request_timeout=5.0) as client:
        parts = ClusterPartitions(ReplicatedLogHost(client, broker, REP))
        own = Ownership(hosts, root, broker, parts, config=CONFIG)
        parts.attach(own)
        await own.start()
        try:
            await own.add_partitions([key])
            deadline = time.monotonic() + 120
            n = 0
            while n < count and time.monotonic() < deadline:
                try:
                    actor = await parts.actor(topic, 0)
                except WeirError:
                    await asyncio.sleep(0.02)  # not (yet) served here
                    continue
                say(f"try {n}")
                try:
                    res = await actor.write(validate_incoming(batch(n)), 64)
                except WeirError as exc:
                    say(f"error {exc.code}")
                    continue  # the same message again: dedup makes a resend safe
                say(f"ack {n} {res[0].offset if not res[0].skipped else -1}")
                n += 1
        finally:
            await own.stop()
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:5], int(sys.argv[5]))))
