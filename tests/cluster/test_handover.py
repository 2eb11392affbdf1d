"""Ownership and the replicated partition log together: the next owner fences the last."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.replication.test_partition_log import read_back
from weir.broker.cluster import Ownership, OwnershipConfig, ReplicatedLogHost, partition_key
from weir.errors import UnavailableError
from weir.replication.errors import ManagedLogFencedError
from weir.replication.ledger import LedgerClient
from weir.replication.local_cluster import BookieProcess
from weir.replication.managed_log import ManagedLogConfig
from weir.replication.partition_log import ReplicationConfig
from weir.replication.zkserver import ZooKeeperServer
from weir.storage.batch_encoding import encode_batch
from weir.storage.incoming import validate_incoming

from .test_ownership import until

REP = ReplicationConfig(ManagedLogConfig(max_entries_per_ledger=20))


class LogHost(ReplicatedLogHost):
    """A broker's replicated logs. A *zombie* host ignores releases, as a broker paused
    through its session loss would: its log stays open, and only fencing can stop it."""

    def __init__(self, client: LedgerClient, broker: str, zombie: bool = False) -> None:
        super().__init__(client, broker, REP)
        self.zombie = zombie

    async def release(self, key: str, *, graceful: bool) -> None:
        if not self.zombie:
            await super().release(key, graceful=graceful)


def batch(seq: int) -> bytes:
    return encode_batch([b"m%d" % seq], producer_id="p", first_seq_no=seq)


async def test_a_broker_that_lost_its_session_cannot_write_after_the_next_owner_took_over(
    zookeeper: ZooKeeperServer,
    shared_root: str,
    shared_bookies: list[BookieProcess],
    shared_client: LedgerClient,
) -> None:
    cfg = OwnershipConfig(session_timeout=4.0, reconcile_interval=1.0)
    async with LedgerClient(zookeeper.hosts, root=shared_root) as other_client:
        host_a = LogHost(shared_client, "a", zombie=True)
        host_b = LogHost(other_client, "b")
        a = await Ownership(zookeeper.hosts, shared_root, "a", host_a, config=cfg).start()
        b = await Ownership(zookeeper.hosts, shared_root, "b", host_b, config=cfg).start()
        try:
            key = partition_key("public/default/handover", 0)
            await a.add_partitions([key])
            await until(lambda: key in a.owned or key in b.owned)
            if key in b.owned:
                await a.unload(key, to="a")
                await until(lambda: key in a.owned)
            zombie = host_a.logs[key]
            gen_a = a.owned[key]
            for seq in range(1, 4):
                await zombie.write(validate_incoming([batch(seq)]))
            # a's session expires; b claims the partition and opens its log (fencing a's)
            sid, password = a.zk.client_id
            killer = KazooClient(hosts=zookeeper.hosts, client_id=(sid, password))
            await asyncio.to_thread(killer.start, 30)
            await asyncio.to_thread(killer.stop)
            await asyncio.to_thread(killer.close)
            await until(lambda: key in b.owned and key in host_b.logs, 60)
            assert b.serving(key) == gen_a + 1
            assert a.serving(key) is None
            with pytest.raises(ManagedLogFencedError):
                await zombie.write(validate_incoming([batch(4)]))
            new = host_b.log(key)
            assert host_b.generations[key] == gen_a + 1
            with pytest.raises(UnavailableError, match="not open on broker b"):
                host_b.log(partition_key("public/default/handover", 1))
            assert new.end_offset == 3 and new.last_seq_no("p") == 3
            res = await new.write(validate_incoming([batch(3), batch(4)]))
            assert (res[0].skipped, res[1].offset) == (1, 3)  # dedup survived the move
        finally:
            try:
                await a.stop()
            finally:
                await b.stop()


def test_a_paused_broker_acknowledges_nothing_after_it_resumes(
    zookeeper: ZooKeeperServer, shared_root: str, shared_bookies: list[BookieProcess]
) -> None:
    """A broker process SIGSTOPped past its session timeout: another broker claims its
    partition and writes; the paused one resumes, sees its session lost, and none of its
    acknowledged writes is missing from (or different in) the new owner's log."""
    key = partition_key("public/default/paused", 0)
    script = Path(__file__).with_name("cluster_broker.py")
    proc = subprocess.Popen(
        [sys.executable, str(script), zookeeper.hosts, shared_root, "a", key, "100000"],
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: list[list[str]] = []
    enough = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.split())
            if len(lines) >= 30:
                enough.set()
        enough.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert enough.wait(60), lines
        proc.send_signal(signal.SIGSTOP)
        acked_before = sum(1 for ln in lines if ln[0] == "ack")

        async def take_over() -> tuple[int, int, list[bytes]]:
            cfg = OwnershipConfig(session_timeout=4.0, reconcile_interval=1.0)
            async with LedgerClient(zookeeper.hosts, root=shared_root) as client:
                host = LogHost(client, "b")
                b = await Ownership(zookeeper.hosts, shared_root, "b", host, config=cfg).start()
                try:
                    await until(lambda: key in b.owned and key in host.logs, 60)
                    new = host.logs[key]
                    start = new.end_offset
                    for seq in range(1, 21):
                        await new.write(validate_incoming([batch(seq)]))
                    proc.send_signal(signal.SIGCONT)
                    await asyncio.to_thread(proc.wait, 60)
                    return start, b.owned[key], await read_back(new)
                finally:
                    await b.stop()

        start, gen_b, final = asyncio.run(take_over())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and lines[-2:] == [["lost"], ["done"]], lines[-5:]
    acked = {int(ln[1]): ln[2].encode() for ln in lines if ln[0] == "ack"}
    assert len(acked) >= acked_before >= 20
    assert all(o < start for o in acked), (start, max(acked))  # nothing after the handover
    assert {o: final[o] for o in acked} == acked
    assert final[start:] == [b"m%d" % seq for seq in range(1, 21)]
    assert {int(ln[3]) for ln in lines if ln[0] == "ack"} == {gen_b - 1}
