"""Every subscription type with consumers in processes of their own (each one
tests/client/subscription_worker.py, its own weir.Client and connection): Shared spreads
and redelivers what a consumer process held when it is killed with SIGKILL; Failover
hands over in order to the next process (which acknowledges cumulatively); Exclusive
refuses a second process; Key_Shared gives each key to one process, in order. Across
processes, a negatively acknowledged message and one left past its ack timeout are
delivered again, their count raised by one, to whichever process has room (another one
too), and a dead-letter policy buries what processes keep failing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest

import weir
from tests.conftest import ROOT, ServerProcess


class Worker:
    """One consumer process and what it printed."""

    def __init__(
        self,
        endpoint: str,
        topic: str,
        sub: str,
        type: str,
        mode: str,
        name: str,
        queue: int = 1000,
        ack_timeout: float = 0,
        max_redeliver_count: int = 0,
    ) -> None:
        args = [endpoint, topic, sub, type, mode, name, str(queue)]
        args += [str(ack_timeout), str(max_redeliver_count)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.client.subscription_worker", *args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.name = name
        self.lines: list[Any] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(json.loads(line))
                self._cond.notify_all()

    def wait_for(self, pred: Any, timeout: float = 30) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: pred(self), timeout), self.lines[-5:]

    @property
    def got(self) -> list[tuple[int, int, str, int]]:
        return [tuple(x) for x in self.lines if isinstance(x, list)]  # type: ignore[misc]

    def ready(self) -> Worker:
        self.wait_for(lambda w: any(isinstance(x, dict) for x in w.lines))
        assert self.lines[0] == {"ready": True}, self.lines[0]
        return self

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def client(shared_server: ServerProcess) -> Iterator[weir.Client]:
    c = weir.Client(shared_server.endpoint)
    yield c
    c.close()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for w in started:
        w.stop()


def _write(client: weir.Client, topic: str, n: int, keys: int = 0) -> None:
    with client.writer(topic, producer_id="w") as w:
        for i in range(n):
            w.write(b"%d" % i, key=b"k%d" % (i % keys) if keys else None)


def _backlog_drains(client: weir.Client, topic: str, sub: str) -> None:
    deadline = time.monotonic() + 30
    while client.describe_subscription(topic, sub).backlog:
        assert time.monotonic() < deadline, client.describe_subscription(topic, sub)
        time.sleep(0.05)


def test_shared_consumer_processes_spread_and_one_killed_is_redelivered(
    client: weir.Client, shared_server: ServerProcess, topic_name: str, workers: list[Worker]
) -> None:
    client.create_topic(topic_name, partitions=2)
    client.create_subscription(topic_name, "s", type="shared", initial_position="earliest")
    ep = shared_server.endpoint
    acker = Worker(ep, topic_name, "s", "shared", "ack", "acker", queue=10)
    holder = Worker(ep, topic_name, "s", "shared", "hold", "holder", queue=10)
    workers += [acker, holder]
    acker.ready(), holder.ready()
    _write(client, topic_name, 60)
    deadline = time.monotonic() + 30
    while len(holder.got) + len(acker.got) < 60:
        assert time.monotonic() < deadline, (holder.got, acker.got)
        time.sleep(0.05)
    held = {(p, o) for p, o, _, _ in holder.got}
    acked = {(p, o) for p, o, _, _ in acker.got}
    assert held and acked and not held & acked  # spread, each message to one process
    first = len(acker.got)
    holder.kill()  # unacknowledged: the server redelivers them to the acker, counted
    acker.wait_for(lambda w: len(w.got) == 60)
    assert {(p, o) for p, o, _, n in acker.got[first:] if n == 1} == held
    _backlog_drains(client, topic_name, "s")


def test_failover_processes_hand_over_in_order_and_exclusive_refuses_a_second(
    client: weir.Client, shared_server: ServerProcess, topic_name: str, workers: list[Worker]
) -> None:
    client.create_topic(topic_name, partitions=1)
    ep = shared_server.endpoint
    a = Worker(ep, topic_name, "f", "failover", "hold", "a")
    b = Worker(ep, topic_name, "f", "failover", "cumulative", "b")
    workers += [a, b]
    a.ready(), b.ready()
    _write(client, topic_name, 5)
    a.wait_for(lambda w: len(w.got) == 5)
    assert [(o, n) for _, o, _, n in a.got] == [(i, 0) for i in range(5)] and b.got == []
    a.kill()  # "a" dies holding everything: "b", next in order, gets it again, in order
    b.wait_for(lambda w: len(w.got) == 5)
    assert [(o, n) for _, o, _, n in b.got] == [(i, 1) for i in range(5)]
    _backlog_drains(client, topic_name, "f")

    x = Worker(ep, topic_name, "x", "exclusive", "ack", "x")
    workers.append(x)
    x.ready()
    y = Worker(ep, topic_name, "x", "exclusive", "ack", "y")
    workers.append(y)
    assert y.proc.wait(30) == 3
    assert y.lines[0]["error"] == "ConsumerBusyError"
    x.wait_for(lambda w: len(w.got) == 5)


def test_key_shared_processes_each_get_their_keys_in_order(
    client: weir.Client, shared_server: ServerProcess, topic_name: str, workers: list[Worker]
) -> None:
    client.create_topic(topic_name, partitions=1)
    client.create_subscription(topic_name, "k", type="key_shared", initial_position="earliest")
    ep = shared_server.endpoint
    ws = [Worker(ep, topic_name, "k", "key_shared", "ack", f"w{i}") for i in range(2)]
    workers += ws
    for w in ws:
        w.ready()
    _write(client, topic_name, 80, keys=16)
    deadline = time.monotonic() + 30
    while sum(len(w.got) for w in ws) < 80:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    owners: dict[str, set[int]] = {}
    for i, w in enumerate(ws):
        by_key: dict[str, list[int]] = {}
        for _, o, k, _ in w.got:
            by_key.setdefault(k, []).append(o)
            owners.setdefault(k, set()).add(i)
        assert all(offs == sorted(offs) for offs in by_key.values())
    assert all(len(o) == 1 for o in owners.values()) and len(owners) == 16
    assert all(w.got for w in ws)  # 16 keys on 2 consumers: both get some
    _backlog_drains(client, topic_name, "k")


def _receipts(ws: list[Worker]) -> dict[int, list[tuple[int, str]]]:
    """Per offset (one partition), every (redelivery count, process) it was delivered with."""
    out: dict[int, list[tuple[int, str]]] = {}
    for w in ws:
        for _, o, _, n in w.got:
            out.setdefault(o, []).append((n, w.name))
    return {o: sorted(r) for o, r in out.items()}


def _counted(receipts: dict[int, list[tuple[int, str]]], n: int) -> bool:
    """Every one of n messages delivered with counts 0, 1, 2, ... once each (none twice)."""
    return sorted(receipts) == list(range(n)) and all(
        [c for c, _ in r] == list(range(len(r))) for r in receipts.values()
    )


def _handed_on(receipts: dict[int, list[tuple[int, str]]], source: str) -> bool:
    """Whether some message that ``source`` had was delivered next to another process."""
    return any(a[1] == source and b[1] != source for r in receipts.values() for a, b in pairwise(r))


def _wait(pred: Any, what: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what()
        time.sleep(0.05)


def test_nacked_and_timed_out_messages_go_to_another_process_with_the_count_raised(
    client: weir.Client, shared_server: ServerProcess, topic_name: str, workers: list[Worker]
) -> None:
    client.create_topic(topic_name, partitions=1)
    client.create_subscription(topic_name, "s", type="shared", initial_position="earliest")
    ep = shared_server.endpoint
    nacker = Worker(ep, topic_name, "s", "shared", "nack", "nacker", queue=10)
    holder = Worker(ep, topic_name, "s", "shared", "hold", "holder", queue=10, ack_timeout=0.2)
    workers += [nacker, holder]
    nacker.ready(), holder.ready()
    _write(client, topic_name, 20)
    # every message goes first to one of the two that fail it, and around between them
    _wait(
        lambda: {o for _, o, _, n in nacker.got + holder.got if n == 0} == set(range(20)),
        lambda: (nacker.got, holder.got),
    )
    acker = Worker(ep, topic_name, "s", "shared", "ack", "acker", queue=10)
    workers.append(acker)
    acker.ready()
    _backlog_drains(client, topic_name, "s")
    ws = [nacker, holder, acker]
    _wait(lambda: _counted(_receipts(ws), 20), lambda: _receipts(ws))  # the last lines printed
    receipts = _receipts(ws)
    # each failure raised the count by exactly one; the acker's delivery was the last
    assert all(r[-1][1] == "acker" and r[-1][0] >= 1 for r in receipts.values()), receipts
    assert all(p != "acker" for r in receipts.values() for _, p in r[:-1]), receipts
    # a nack and an expired ack timeout each handed a message to another process
    assert _handed_on(receipts, "nacker") and _handed_on(receipts, "holder"), receipts
    assert client.describe_subscription(topic_name, "s").unacked == 0


def test_what_consumer_processes_keep_failing_is_buried_in_the_dead_letter_topic(
    client: weir.Client, shared_server: ServerProcess, topic_name: str, workers: list[Worker]
) -> None:
    client.create_topic(topic_name, partitions=1)
    ep = shared_server.endpoint
    nacker = Worker(ep, topic_name, "d", "shared", "nack", "nacker", 10, max_redeliver_count=2)
    workers.append(nacker)
    nacker.ready()  # it creates the subscription, with the dead-letter policy
    holder = Worker(ep, topic_name, "d", "shared", "hold", "holder", 10, 0.2, 2)
    workers.append(holder)
    holder.ready()
    _write(client, topic_name, 10)
    _backlog_drains(client, topic_name, "d")  # all of them buried
    ws = [nacker, holder]
    _wait(lambda: _counted(_receipts(ws), 10), lambda: _receipts(ws))
    receipts = _receipts(ws)
    # delivered with counts 0, 1 and 2 (max_redeliver_count), then buried, never again
    assert all(len(r) == 3 for r in receipts.values()), receipts
    assert _handed_on(receipts, "nacker") or _handed_on(receipts, "holder"), receipts
    info = client.describe_subscription(topic_name, "d")
    assert (info.unacked, info.dead_letter_topic) == (0, f"{topic_name}-d-DLQ")
    dead = [
        m for chunk in client.read_range(info.dead_letter_topic, 0, 0) for m in chunk.messages()
    ]
    origins = sorted(int(m.headers["weir-origin-offset"]) for m in dead)
    assert origins == list(range(10)), origins  # each one once, none lost
    assert {m.data for m in dead} == {b"%d" % i for i in range(10)}
