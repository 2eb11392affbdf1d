"""A consumer group of three confluent-kafka processes on six partitions: the partitions
are shared out, a member killed with SIGKILL is dropped after its session timeout and its
partitions move to the others, and a member that joins takes its share."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import ROOT, ServerProcess

MEMBER = Path(__file__).with_name("group_member.py")


class Member:
    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(MEMBER), bootstrap, topic, group],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
        )
        self.owned: tuple[int, ...] = ()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("ASSIGNED"):
                text = line.split(" ", 1)[1].strip() if " " in line.strip() else ""
                self.owned = tuple(int(x) for x in text.split(",") if x)

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.owned = ()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def _await_split(members: list[Member], partitions: int, timeout: float = 60) -> None:
    """Until the live members own every partition, each exactly once, evenly."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        owned = [p for m in members for p in m.owned]
        sizes = sorted(len(m.owned) for m in members)
        if sorted(owned) == list(range(partitions)) and sizes[-1] - sizes[0] <= 1:
            return
        time.sleep(0.1)
    raise AssertionError(f"no even split: {[m.owned for m in members]}")


def test_three_processes_rebalance_on_kill_and_join(kafka_server: ServerProcess) -> None:
    bootstrap = kafka_server.kafka
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("rb", 6)])["rb"].result(10)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(600):
        p.produce("rb", b"%d" % i, partition=i % 6)
    p.flush(10)
    members = [Member(bootstrap, "rb", "rbg") for _ in range(3)]
    try:
        _await_split(members, 6)
        victim = members.pop(0)
        victim.kill()
        _await_split(members, 6)  # its partitions moved after its session timeout
        assert all(len(m.owned) == 3 for m in members)
        members.append(Member(bootstrap, "rb", "rbg"))
        _await_split(members, 6)
        assert all(len(m.owned) == 2 for m in members)
        # every message was read by the group: the committed offsets reach the end
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "rbg"})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            committed = c.committed([TopicPartition("rb", i) for i in range(6)], timeout=10)
            if all(tp.offset == 100 for tp in committed):
                break
            time.sleep(0.2)
        c.close()
        assert [tp.offset for tp in committed] == [100] * 6
    finally:
        for m in members:
            m.stop()
