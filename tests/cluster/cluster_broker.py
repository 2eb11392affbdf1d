"""A broker of the cluster in a process of its own, so a test can SIGSTOP or SIGKILL it.

Usage: python cluster_broker.py ZK_HOSTS ZK_ROOT BROKER_ID PARTITION_KEY COUNT

Joins the cluster (Ownership with a 4 s session), records the partition, and while
its Ownership says it serves the partition writes one message at a time (producer
BROKER_ID, sequence numbers from 1, data ``BROKER_ID:n``) to the partition's
replicated log, opened under the claim's generation, as a broker's write path
would. Prints ``ack <offset> <data> <generation>`` for each acknowledged write,
``error <CODE>`` for a refused one, ``lost`` once its ZooKeeper session is lost,
and ``done`` at the end: after a refused write or a lost session (it waits up to
30 s for the session loss to be seen), or after COUNT writes.
"""

from __future__ import annotations

import asyncio
import sys
import time

from weir.broker.cluster import Ownership, OwnershipConfig, ReplicatedLogHost
from weir.errors import WeirError
from weir.replication.ledger import LedgerClient
from weir.replication.managed_log import ManagedLogConfig
from weir.replication.partition_log import ReplicationConfig
from weir.storage.batch_encoding import encode_batch
from weir.storage.incoming import validate_incoming

REP = ReplicationConfig(ManagedLogConfig(max_entries_per_ledger=40))
CONFIG = OwnershipConfig(session_timeout=4.0, reconcile_interval=1.0)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(hosts: str, root: str, broker: str, key: str, count: int) -> int:
    async with LedgerClient(hosts, root=root, zk_timeout=4.0, request_timeout=5.0) as client:
        host = ReplicatedLogHost(client, broker, REP)
        own = await Ownership(hosts, root, broker, host, config=CONFIG).start()
        try:
            await own.add_partitions([key])
            deadline = time.monotonic() + 120
            n = 0
            while n < count and time.monotonic() < deadline and not own.session_losses:
                gen = own.serving(key)
                plog = host.logs.get(key)
                if gen is None or plog is None:
                    await asyncio.sleep(0.01)
                    continue
                n += 1
                data = f"{broker}:{n}"
                batch = encode_batch([data.encode()], producer_id=broker, first_seq_no=n)
                try:
                    res = await plog.write(validate_incoming([batch]))
                except WeirError as exc:
                    say(f"error {exc.code}")
                    break
                say(f"ack {res[0].offset} {data} {gen}")
            end = time.monotonic() + 30
            while not own.session_losses and time.monotonic() < end:
                await asyncio.sleep(0.05)
            if own.session_losses:
                say("lost")
        finally:
            await own.stop()
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:5], int(sys.argv[5]))))
