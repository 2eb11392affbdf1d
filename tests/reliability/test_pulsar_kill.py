"""pulsar-client under kill -9: producers and consumers of the real client (C++ underneath)
ride through SIGKILLs and restarts of the server, and the history is judged afterwards.

Load, on a topic of two partitions:
- two named producers (one batching, one not) send messages with their own sequence ids
  and keys; the client resends what is unanswered after each reconnect; now and then a
  producer is closed with messages in flight and created again under its name: it learns
  its last sequence id and resends what it does not know to be stored (dedup drops the
  rest);
- a Shared subscription whose two consumers acknowledge individually, and a Failover one
  whose consumer acknowledges cumulatively; both with batch-index acks (the server's
  ``pulsar.batch_index_ack``), so every acknowledgement names exactly its messages. Each
  consumer now and then *confirms* what it acknowledged: it acks again and closes; the
  front answers the close only once those acks are durable (`subscription_history`).
  Then it subscribes again (a new incarnation).

Judged (`history.check` for the messages, `subscription_history` for the subscriptions):
no acknowledged message lost, duplicated, reordered or moved; no phantom; every stored
message reaches both subscriptions; no message comes back on a subscription after its
ack was confirmed; at the end every message is acknowledged on both (backlog 0).
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pulsar
import pytest

from tests.conftest import ServerProcess
from tests.reliability.history import History, Stored, check, make_data, message_id, parse_id
from tests.reliability.subscription_history import SubscriptionHistory, check_subscriptions

T = TypeVar("T")
TOPIC = "kill9"
PARTITIONS = 2
SUBS = {"shared": pulsar.ConsumerType.Shared, "failover": pulsar.ConsumerType.Failover}


@dataclass
class KillSettings:
    kills: int = 3
    min_acks_between_kills: int = 150  # producer acks after a restart before the next kill
    max_messages: int = 4000  # per producer: a bound, the kills end the run before
    confirm_every: int = 40  # deliveries between a consumer's confirmations
    recreate_every: int = 300  # messages between a producer's close-and-create-again
    seed: int = 1
    max_seconds: float = 240.0


LOG = Path("pulsar-client.log")  # the clients' own log (reconnects, timeouts): set per run


def _quiet() -> pulsar.FileLogger:
    return pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(LOG))


def _offset(mid: pulsar.MessageId) -> int:
    return int(mid.entry_id()) + max(int(mid.batch_index()), 0)


def _order(mid: pulsar.MessageId) -> tuple[int, int]:
    """Message ids as the client compares them (no batch index: after every index)."""
    b = int(mid.batch_index())
    return int(mid.entry_id()), b if b >= 0 else 1 << 31


class Run:
    def __init__(self, server: ServerProcess, s: KillSettings) -> None:
        self.server = server
        self.s = s
        self.rng = random.Random(s.seed)
        self.history = History()
        self.subs = SubscriptionHistory(self.history)
        self.url = server.pulsar_url
        self.client = pulsar.Client(self.url, operation_timeout_seconds=5, logger=_quiet())
        self.kill_lock = threading.Lock()  # held while killing; a confirmation takes it too
        self.stop_producing = threading.Event()
        self.final = threading.Event()  # after the last kill: acknowledge everything
        self.stop = threading.Event()
        self.acks = 0
        self.deliveries = 0
        self.restarts_seen = 0
        self._count = threading.Lock()
        self.errors: list[str] = []

    def _error(self, what: str) -> None:
        with self._count:
            self.errors.append(what)

    # ------------------------------------------------------------------ producers

    def produce(self, name: str, batching: bool) -> None:
        rng = random.Random(f"{self.s.seed}-{name}")
        unknown: dict[int, bytes] = {}  # n -> data: sent, no answer yet (or a failed one)
        lock = threading.Lock()
        n = 0
        h = self.history

        def done(res: pulsar.Result, mid: pulsar.MessageId, num: int, data: bytes) -> None:
            if res != pulsar.Result.Ok:
                return  # unknown: resent after the producer is created again
            m = message_id(data)
            if int(mid.ledger_id()) < 0:  # every message of its send was stored already
                h.acked(m, max(int(mid.partition()), 0), None)
            else:
                h.acked(m, int(mid.partition()), _offset(mid))
            with lock:
                unknown.pop(num, None)
            with self._count:
                self.acks += 1

        def create() -> pulsar.Producer:
            return self.client.create_producer(
                TOPIC,
                producer_name=name,
                batching_enabled=batching,
                batching_max_messages=8,
                batching_max_publish_delay_ms=2,
                max_pending_messages=200,
                block_if_queue_full=True,
                send_timeout_millis=20_000,
                message_routing_mode=pulsar.PartitionsRoutingMode.UseSinglePartition
                if not batching
                else pulsar.PartitionsRoutingMode.RoundRobinDistribution,
            )

        def send(p: pulsar.Producer, num: int, data: bytes) -> None:
            with lock:
                unknown[num] = data
            p.send_async(
                data,
                lambda res, mid, num=num, data=data: done(res, mid, num, data),
                partition_key=f"k{num % 7}",
                sequence_id=num,
            )

        p = self._retry(create)
        since = 0
        while not self.stop_producing.is_set() and n < self.s.max_messages:
            data = make_data(name, n, 60)
            h.attempted(message_id(data))
            try:
                send(p, n, data)
            except pulsar.PulsarException as err:
                self._error(f"{name} send {n}: {err!r}")
            n += 1
            since += 1
            if since >= self.s.recreate_every:
                since = 0
                p = self._recreate(p, create, send, unknown, lock)
            elif n % 20 == 0:
                with lock:
                    backlog = len(unknown)
                while backlog > 150 and not self.stop_producing.is_set():
                    time.sleep(0.005)  # pacing: let the answers catch up
                    with lock:
                        backlog = len(unknown)
            if rng.random() < 0.02:
                time.sleep(0.01)  # pacing: bursts and gaps
        # the end: everything sent gets an answer (resent until it has)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if not unknown:
                    break
            p = self._recreate(p, create, send, unknown, lock)
            with lock:
                if not unknown:
                    break
            flushed = time.monotonic() + 10
            while time.monotonic() < flushed:
                with lock:
                    if not unknown:
                        break
                time.sleep(0.01)  # pacing: waiting for answers to a bounded deadline
        with contextlib.suppress(pulsar.PulsarException):
            p.close()
        if unknown:
            self._error(f"{name}: {len(unknown)} sends never answered")

    def _recreate(
        self,
        p: pulsar.Producer,
        create: Callable[[], pulsar.Producer],
        send: Callable[[pulsar.Producer, int, bytes], None],
        unknown: dict[int, bytes],
        lock: threading.Lock,
    ) -> pulsar.Producer:
        """Close with messages in flight, create again under the same name, resend what is
        not known to be stored (the server drops what it has: dedup)."""
        with contextlib.suppress(pulsar.PulsarException):
            p.close()
        p = self._retry(create)
        with lock:
            todo = sorted(unknown.items())
        for num, data in todo:
            try:
                send(p, num, data)
            except pulsar.PulsarException as err:
                self._error(f"resend {num}: {err!r}")
        return p

    def _retry(self, make: Callable[[], T]) -> T:
        deadline = time.monotonic() + 60
        while True:
            try:
                return make()
            except pulsar.PulsarException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)  # the server is restarting: backoff before trying again

    # ------------------------------------------------------------------ consumers

    def consume(self, sub: str, who: str) -> None:
        rng = random.Random(f"{self.s.seed}-{sub}-{who}")
        kind = SUBS[sub]
        cumulative = kind == pulsar.ConsumerType.Failover
        while not self.stop.is_set():
            inc = self.subs.opened(sub)
            try:
                c = self._retry(
                    lambda: self.client.subscribe(
                        TOPIC,
                        sub,
                        consumer_type=kind,
                        consumer_name=who,
                        initial_position=pulsar.InitialPosition.Earliest,
                        receiver_queue_size=50,
                        batch_index_ack_enabled=True,
                    )
                )
            except pulsar.PulsarException as err:
                self._error(f"{sub}/{who} subscribe: {err!r}")
                continue
            self._incarnation(c, sub, inc, cumulative, rng)

    def _incarnation(
        self, c: pulsar.Consumer, sub: str, inc: int, cumulative: bool, rng: random.Random
    ) -> None:
        acked: list[pulsar.Message] = []
        held: list[pulsar.Message] = []
        latest: dict[int, pulsar.Message] = {}  # partition -> newest received
        last_cumulative: dict[int, tuple[int, int]] = {}
        got = 0
        while not self.stop.is_set():
            try:
                m: pulsar.Message | None = c.receive(200)
            except pulsar.PulsarException:  # a timeout, or the server is down
                m = None
            if m is not None:
                got += 1
                mid = m.message_id()
                key, off = int(mid.partition()), _offset(mid)
                self.subs.delivered(sub, inc, key, off)
                self.history.delivered(f"{sub}:{inc}:{got}", key, off, message_id(m.data()))
                with self._count:
                    self.deliveries += 1
                if cumulative:
                    prev = latest.get(key)
                    if prev is None or _order(mid) > _order(prev.message_id()):
                        latest[key] = m
                        if prev is not None and rng.random() < 0.2:
                            # through the one before the newest: the newest is kept for
                            # the confirmation, which must send an ack of its own
                            self._ack_cumulative(c, prev, last_cumulative)
                elif rng.random() < 0.7 or self.final.is_set():
                    self._ack(c, m, inc, acked)
                else:
                    held.append(m)
                if held and rng.random() < 0.2:
                    self._ack(c, held.pop(rng.randrange(len(held))), inc, acked)
            due = got >= self.s.confirm_every or (m is None and self.final.is_set())
            if due and self._confirm(c, inc, acked, held, latest, last_cumulative):
                return  # closed: the next incarnation subscribes

    def _ack(
        self, c: pulsar.Consumer, m: pulsar.Message, inc: int, acked: list[pulsar.Message]
    ) -> None:
        with contextlib.suppress(pulsar.PulsarException):
            c.acknowledge(m)
        mid = m.message_id()
        self.subs.acked(inc, int(mid.partition()), _offset(mid))
        acked.append(m)

    def _ack_cumulative(
        self, c: pulsar.Consumer, m: pulsar.Message, last: dict[int, tuple[int, int]]
    ) -> bool:
        """Ack cumulatively through ``m``; True when the client sends it (newer than the last)."""
        mid = m.message_id()
        key = int(mid.partition())
        if key in last and _order(mid) <= last[key]:
            return False
        with contextlib.suppress(pulsar.PulsarException):
            c.acknowledge_cumulative(m)
        last[key] = _order(mid)
        return True

    def _confirm(
        self,
        c: pulsar.Consumer,
        inc: int,
        acked: list[pulsar.Message],
        held: list[pulsar.Message],
        latest: dict[int, pulsar.Message],
        last_cumulative: dict[int, tuple[int, int]],
    ) -> bool:
        """Ack again, close, and if the server answered the close, record the confirmation.
        False: not connected now (the server is down), the incarnation goes on."""
        with self.kill_lock:
            if not c.is_connected():
                return False
            if self.final.is_set():
                for m in held:
                    self._ack(c, m, inc, acked)
                held.clear()
            for m in acked:  # an ack sent before a restart was lost with its connection
                with contextlib.suppress(pulsar.PulsarException):
                    c.acknowledge(m)
            through = {}
            for key, m in latest.items():
                # only an ack the client sends now (newer than its last one) is known to
                # reach the server on this connection
                if self._ack_cumulative(c, m, last_cumulative):
                    through[key] = _offset(m.message_id())
            try:
                c.close()
            except pulsar.PulsarException:
                return True  # not confirmed; subscribe again
            self.subs.confirmed(inc, through)
            return True

    # ------------------------------------------------------------------ the run

    def stats(self) -> dict[str, int]:
        url = f"{self.server.http_url}/admin/v2/persistent/public/default/{TOPIC}/stats"
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.load(resp)
        return {name: s["msgBacklog"] for name, s in body["subscriptions"].items()}

    def run(self) -> None:
        threads = [
            threading.Thread(target=self.produce, args=("pb", True)),
            threading.Thread(target=self.produce, args=("pn", False)),
            threading.Thread(target=self.consume, args=("shared", "a")),
            threading.Thread(target=self.consume, args=("shared", "b")),
            threading.Thread(target=self.consume, args=("failover", "f")),
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + self.s.max_seconds
        try:
            for k in range(self.s.kills):
                with self._count:
                    base_acks, base_deliveries = self.acks, self.deliveries
                    base_confirmations = self.subs.confirmations
                while True:
                    with self._count:
                        ready = (
                            self.acks - base_acks >= self.s.min_acks_between_kills
                            and self.deliveries - base_deliveries >= 50
                            and self.subs.confirmations > base_confirmations
                        )
                    if ready:
                        break
                    assert time.monotonic() < deadline, f"no progress before kill {k + 1}"
                    time.sleep(0.01)  # polling the load's progress to a deadline
                with self.kill_lock:
                    self.server.kill()
                    self.history.fault(f"kill9 {k + 1}")
                    self.server.start()
            self.stop_producing.set()
            self.final.set()
            for t in threads[:2]:
                t.join(timeout=max(1.0, deadline - time.monotonic()))
            # every message stored is to be acknowledged on both subscriptions
            while True:
                backlog = self.stats()
                if all(backlog.get(s, 1) == 0 for s in SUBS):
                    break
                assert time.monotonic() < deadline, f"backlog left: {backlog}"
                time.sleep(0.1)  # polling the subscriptions' backlog to a deadline
        finally:
            self.stop_producing.set()
            self.final.set()
            self.stop.set()
            for t in threads:
                t.join(timeout=30)
            self.client.close()

    def stored(self) -> dict[int, list[Stored]]:
        """The final contents of each partition, read by a Pulsar reader."""
        out: dict[int, list[Stored]] = {}
        client = pulsar.Client(self.server.pulsar_url, operation_timeout_seconds=5, logger=_quiet())
        try:
            for p in range(PARTITIONS):
                reader = client.create_reader(
                    f"{TOPIC}-partition-{p}", pulsar.MessageId.earliest, receiver_queue_size=500
                )
                rows = []
                while reader.has_message_available():
                    m = reader.read_next(10_000)
                    mid = message_id(m.data())
                    pn = parse_id(mid)
                    rows.append(
                        Stored(_offset(m.message_id()), mid, m.producer_name(), pn[1] if pn else 0)
                    )
                reader.close()
                out[p] = rows
        finally:
            client.close()
        return out


def run_kills(tmp_path: Path, settings: KillSettings) -> None:
    global LOG
    LOG = tmp_path / "pulsar-client.log"
    server = ServerProcess(
        tmp_path / "data",
        env={"WEIR_PULSAR_BATCH_INDEX_ACK": "true", "WEIR_METRICS_ENABLED": "false"},
    )
    server.start()
    try:
        # the same Pulsar port after every restart: the clients reconnect to it
        server.env = {**(server.env or {}), "WEIR_PULSAR_LISTEN": server.pulsar_url.split("//")[1]}
        admin = pulsar.Client(server.pulsar_url, operation_timeout_seconds=5, logger=_quiet())
        url = f"{server.http_url}/admin/v2/persistent/public/default/{TOPIC}/partitions"
        req = urllib.request.Request(url, data=str(PARTITIONS).encode(), method="PUT")
        req.add_header("Content-Type", "application/json")
        urllib.request.urlopen(req, timeout=10).close()
        for sub, kind in SUBS.items():  # both see every message from the start
            admin.subscribe(
                TOPIC, sub, consumer_type=kind, initial_position=pulsar.InitialPosition.Earliest
            ).close()
        admin.close()
        run = Run(server, settings)
        run.run()
        stored = run.stored()
    finally:
        server.kill()
    report = check(run.history, stored, {}, routed={"pb", "pn"})
    subs = check_subscriptions(
        run.subs, {k: [r.offset for r in rows] for k, rows in stored.items()}, SUBS
    )
    summary = f"seed {settings.seed}: {report.summary()} | {subs.summary()}"
    print(summary)
    assert report.ok, summary
    assert subs.ok, summary
    assert not run.errors, run.errors[:10]
    # not vacuous: the kills came while messages were in flight, acknowledged positions
    # were checked after restarts, and stored messages came back (redelivered)
    assert len(run.history.faults) == settings.kills
    assert report.acknowledged > 0 and report.stored >= report.acknowledged
    assert subs.confirmations > settings.kills and subs.checked_after_confirmation > 0
    assert subs.delivered > 2 * report.stored  # two subscriptions, and redeliveries


def test_pulsar_client_through_kill_9(tmp_path: Path, chaos_seed: int) -> None:
    run_kills(tmp_path, KillSettings(kills=3, seed=chaos_seed))


@pytest.mark.slow
def test_pulsar_client_through_many_kill_9(tmp_path: Path, chaos_seed: int) -> None:
    run_kills(
        tmp_path,
        KillSettings(kills=20, min_acks_between_kills=400, max_messages=40_000, seed=chaos_seed),
    )
