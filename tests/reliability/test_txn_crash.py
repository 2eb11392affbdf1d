"""Transactions under kill -9: workers commit and abort transactions at random (writes to
three topics of two partitions each, and a consumer offset per transaction) while the
server is SIGKILLed and restarted; a read-committed reader reads along.

Judged by `tests.reliability.txn_history` after a last kill and restart: every
transaction is all or nothing to read-committed readers (its messages and its
offset), every acknowledged commit is there, nothing of an aborted one is ever seen,
and every acknowledged write is stored. A few kills in the default run; many more
behind the ``slow`` marker (`make soak`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random

import pytest

import weir.aio
from tests.conftest import ServerProcess
from tests.reliability.history import TOPIC_STRIDE, make_data
from tests.reliability.txn_history import TxnHistory, check
from weir.errors import (
    TransactionCommittedError,
    TransactionEndedError,
    UnknownTransactionError,
    WeirError,
)

TOPICS = 3
PARTITIONS = 2
WORKERS = 3
SOURCE_MESSAGES = 2_000  # the consumer offsets the transactions commit point into this topic


def key(t: int, p: int) -> int:
    return t * TOPIC_STRIDE + p


async def run_crash(server: ServerProcess, base: str, seed: int, kills: int) -> None:
    rng = random.Random(seed)
    names = [f"{base}_{t}" for t in range(TOPICS)]
    source = f"{base}_src"
    h = TxnHistory()
    stop = asyncio.Event()

    async with weir.aio.Client(server.endpoint) as admin:
        for n in names:
            await admin.create_topic(n, partitions=PARTITIONS)
        await admin.create_topic(source, partitions=1)
        w = admin.writer(source, partition=0)
        await w.write_many([b"s"] * SOURCE_MESSAGES)
        await w.close()

    async def worker(wid: int) -> None:
        local = random.Random(rng.randrange(2**31))
        consumer = f"w{wid}"
        n = 0
        async with weir.aio.Client(server.endpoint) as client:
            while not stop.is_set() and n < SOURCE_MESSAGES:
                n += 1
                name = f"w{wid}.{n}"
                try:
                    tx = await client.transaction(timeout=30).begin(call_timeout=20)
                except WeirError:
                    continue  # nothing written, nothing to judge
                h.begin(name)
                writers: dict[tuple[int, int], weir.aio.Writer] = {}
                sent = []
                try:
                    for i in range(local.randint(1, 12)):
                        t, p = local.randrange(TOPICS), local.randrange(PARTITIONS)
                        wr = writers.get((t, p))
                        if wr is None:
                            wr = writers[(t, p)] = tx.writer(
                                names[t], partition=p, delivery_timeout=20
                            )
                        data = make_data(name, i, 48)
                        h.wrote(name, data)
                        sent.append(data)
                        await wr.write(data)
                    for wr in writers.values():
                        await wr.flush(30)
                    for data in sent:
                        h.write_acked(name, data)
                    h.offset(name, consumer, 0, n)
                    await tx.commit_offsets(_at(source, n), consumer, call_timeout=20)
                    commit = local.random() < 0.7
                    if commit:
                        await tx.commit(call_timeout=20)
                    else:
                        await tx.abort(call_timeout=20)
                    h.ended(name, "committed" if commit else "aborted")
                except TransactionCommittedError:
                    h.ended(name, "committed")  # a retried commit: the first attempt landed
                except UnknownTransactionError:
                    h.ended(name, "unknown")  # the server restarted and forgot: either way
                except TransactionEndedError:
                    h.ended(name, "aborted")  # timed out, or aborted by a restart
                except WeirError:
                    h.ended(name, "unknown")  # the answer was lost
                if tx.state == "open":  # a write failed: stop its writers, end it if it can
                    with contextlib.suppress(WeirError):
                        await tx.abort(call_timeout=5)

    async def read_committed() -> None:
        async with weir.aio.Client(server.endpoint) as client:
            reader = client.reader(names, read_committed=True, on_reconnect=lambda _: None)
            try:
                while not stop.is_set():
                    b = await reader.receive_batch(timeout=0.2)
                    if b is not None:
                        for d in b.values:
                            h.delivered_committed(d)
            finally:
                await reader.close(1.0)

    tasks = [asyncio.create_task(worker(w)) for w in range(WORKERS)]
    tasks.append(asyncio.create_task(read_committed()))
    try:
        for _ in range(kills):
            # kill under load: once the workers are busy again (a few transactions ended
            # since the last restart), at a random moment
            ended = h.ended_count()
            async with asyncio.timeout(60):
                while h.ended_count() < ended + WORKERS:
                    await asyncio.sleep(0.02)
            await asyncio.sleep(rng.uniform(0, 0.3))
            await asyncio.to_thread(server.kill)
            await asyncio.to_thread(server.start)
        ended = h.ended_count()
        async with asyncio.timeout(60):
            while h.ended_count() < ended + WORKERS:
                await asyncio.sleep(0.02)
    finally:
        stop.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    assert not [r for r in results if isinstance(r, BaseException)], results
    await asyncio.to_thread(server.kill)  # the last word: what survives a kill -9
    await asyncio.to_thread(server.start)

    committed: dict[int, list[bytes]] = {}
    uncommitted: dict[int, list[bytes]] = {}
    async with weir.aio.Client(server.endpoint) as client:
        for t, n in enumerate(names):
            for p in range(PARTITIONS):
                for rc, out in ((True, committed), (False, uncommitted)):
                    got = out.setdefault(key(t, p), [])
                    async for c in client.read_range(n, p, 0, read_committed=rc):
                        got.extend(m.data for m in c.messages())
        offsets: dict[tuple[str, int], int | None] = {}
        for w in range(WORKERS):
            info = await client.describe_consumer(source, f"w{w}")
            offsets[(f"w{w}", 0)] = info.partitions[0].committed_offset or None
    report = check(h, committed, uncommitted, offsets)
    print(f"transactions under {kills} kills, seed {seed}: {report.summary()}")
    assert report.ok, f"seed {seed}: {report.summary()}"
    outcomes = report.transactions
    assert outcomes.get("committed", 0) > 0 and outcomes.get("aborted", 0) > 0, report.summary()


def _at(topic: str, n: int) -> weir.aio.Message:
    """A message at offset n - 1 of ``topic``: committing it makes n the next offset."""
    return weir.aio.Message(topic, 0, n - 1, 0, 0, 0, "", b"", b"", {})


async def test_transactions_are_all_or_nothing_across_kill_9(
    server: ServerProcess, topic_name: str, chaos_seed: int
) -> None:
    await run_crash(server, topic_name, chaos_seed, kills=2)  # and a last one before the check


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 40 restarts under load: well past the default 300 s
async def test_transactions_are_all_or_nothing_across_many_kill_9(
    server: ServerProcess, topic_name: str, chaos_seed: int
) -> None:
    await run_crash(server, topic_name, chaos_seed, kills=40)
