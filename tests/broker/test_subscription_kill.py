"""What a subscription keeps across kill -9 of the broker's process: batch-index acks,
redelivery counts (dead-lettering is not reset by a crash), held-back delayed messages.
The scenario runs in a child process (tests/broker/subscription_child.py) that is
killed with SIGKILL once it printed DONE; the directory is then reopened here."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.broker.test_subscriptions import attach, fill, one, open_broker
from weir.broker.broker import Broker

ROOT = Path(__file__).resolve().parents[2]


async def run_and_kill(path: Path, scenario: str) -> Broker:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.broker.subscription_child",
        str(path),
        scenario,
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(60):
            line = await proc.stdout.readline()
        assert line == b"DONE\n", line
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
    return await open_broker(path)


async def test_batch_index_acks_survive_kill_9_and_only_the_rest_comes_again(
    tmp_path: Path,
) -> None:
    b = await run_and_kill(tmp_path, "batch_index")
    try:
        p = b.describe_subscription("t", "s").partitions[0]
        assert (p.mark_delete, p.backlog) == (1, 6)
        inbox, _ = await attach(b, "s", "exclusive")
        assert [o for _, o, _ in await inbox.wait(6)] == [1, 2, 5, 6, 7, 8]
    finally:
        await b.close()


async def test_redelivery_counts_survive_kill_9_and_dead_lettering_goes_on(
    tmp_path: Path,
) -> None:
    b = await run_and_kill(tmp_path, "counts")
    try:
        inbox, _ = await attach(b, "s", "shared")
        # offset 1 was delivered twice more before the crash; the count says so
        assert sorted(await inbox.wait(2)) == [(0, 1, 2), (0, 2, 0)]
        sub = b.subscription("t", "s")
        sub.negative_acknowledge(one([(0, 1)]), 0)  # the third failure: over the limit of 2
        async with asyncio.timeout(10):  # buried: copied to the DLQ, then acknowledged
            while b.describe_subscription("t", "s").partitions[0].mark_delete < 2:
                await asyncio.sleep(0.01)
        assert b.actor("t-s-DLQ", 0).end_offset == 1
        assert len(inbox.got) == 2  # not delivered a fourth time
    finally:
        await b.close()


async def test_a_delayed_message_stays_held_back_after_kill_9(tmp_path: Path) -> None:
    b = await run_and_kill(tmp_path, "delayed")
    try:
        await fill(b, 1)
        inbox, _ = await attach(b, "s", "shared")
        assert await inbox.wait(1) == [(0, 2, 0)]  # offset 0 waits for its hour
        assert b.describe_subscription("t", "s").backlog == 2
    finally:
        await b.close()


async def test_a_consumers_acks_are_its_commits_across_kill_9(tmp_path: Path) -> None:
    """A consumer's committed offsets as a Failover subscription (cumulative acks, or
    individual ones in order): what was acked stays acked, the rest comes again, and the
    old reader API starts where the acks left it. Redelivery counts of such a
    subscription are kept in memory only: after the crash they start again at 0."""
    b = await run_and_kill(tmp_path, "consumer_acks")
    try:
        assert b.committed_offset("t", 0, "audit") == 4
        assert b.read_start("t", 0, "audit") == 4
        inbox, _ = await attach(b, "audit", "failover")
        assert await inbox.wait(2) == [(0, 4, 0), (0, 5, 0)]
    finally:
        await b.close()
