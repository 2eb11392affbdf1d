"""Producer pins: the one partition each producer_id writes to, and its live write session.

A producer writes to one partition so that its seq_no order and dedup hold
across reconnects. Its home is where its state is: the partition's producer
table (max seq_no, offset, last write), which storage writes in the same
commit as the messages and drops when retention removes the producer's last
message. So a pin is *derived*, never stored on its own:

* a producer with state in a partition is pinned there, the same after a
  restart, until retention removes its state;
* a producer without state is pinned when its first session opens (the
  partition it asks for, else ``crc32c(producer_id) % partitions``) in memory
  only: until it writes, it has nothing whose order or dedup a move could
  break, and the write that creates its state is what makes the pin durable.
  Not persisting the pin saves a commit (an fsync) per new producer, and a pin
  can never disagree with where the producer's messages are;
* a producer idle for longer than ``producer_idle_timeout_ms`` is no longer
  bound: a session naming another partition is pinned there afresh (and reads
  that partition's dedup state). Without a partition it stays where its state is.

Creation is single-flight: `resolve` checks and records a pin in one step,
without awaiting, so two sessions opened at once for a new producer get one
pin, and the one asking for another partition gets a clear error.

The in-memory map holds pins of producers seen since the start; `expire` drops
the ones that have no open session and whose state is gone (after a short
grace, for writes still in flight) or idle, so the map stays bounded by the
live producers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import crc32c

from weir.broker.topics import TopicConfig, short_topic
from weir.errors import BadRequestError
from weir.storage.producers import ProducerState

# How long a pin without stored state outlives its last session: covers writes that
# were queued when the session ended and commit afterwards.
PIN_GRACE_MS = 60_000

ProducerTables = Sequence[Mapping[str, ProducerState]]  # per partition, producer_id -> state
Key = tuple[int, str]  # (topic id, producer_id)


def _wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class Pin:
    partition: int
    touched_ms: int  # when a session last resolved, opened or closed on it


@dataclass(frozen=True, slots=True)
class WriterToken:
    key: Key
    callback: Callable[[], None]


class ProducerPins:
    """Pins and live write sessions of every producer; see the module docstring."""

    def __init__(self, idle_timeout_ms: int | None, clock: Callable[[], int] = _wall_ms) -> None:
        self.idle_timeout_ms = idle_timeout_ms
        self.clock = clock  # ms since epoch; tests move it
        self._pins: dict[Key, Pin] = {}
        self._writers: dict[Key, Callable[[], None]] = {}

    def __len__(self) -> int:
        return len(self._pins)

    def pins(self, topic_id: int) -> dict[str, int]:
        """producer_id -> partition of the pins held in memory for one topic."""
        return {pid: pin.partition for (tid, pid), pin in self._pins.items() if tid == topic_id}

    def _idle(self, last_ms: int, now_ms: int) -> bool:
        return self.idle_timeout_ms is not None and last_ms < now_ms - self.idle_timeout_ms

    # ------------------------------------------------------------------ resolve

    def resolve(
        self,
        cfg: TopicConfig,
        producer_id: str,
        partition: int | None,
        producers: ProducerTables,
    ) -> int:
        """The partition ``producer_id`` writes to; records the pin. Never awaits, so a
        check and its record cannot interleave with another session's."""
        key = (cfg.topic_id, producer_id)
        now = self.clock()
        pin = self._pins.get(key)
        if pin is None:
            home = _home(producer_id, producers)
            if home is not None and (partition is None or not self._idle(home[1], now)):
                pin = Pin(home[0], now)
            else:
                chosen = partition if partition is not None else home_partition(producer_id, cfg)
                pin = Pin(chosen, now)
            self._pins[key] = pin
        if partition is not None and partition != pin.partition:
            raise BadRequestError(
                f"producer {producer_id!r} is pinned to partition {pin.partition} of "
                f"{short_topic(cfg.name)!r}, not {partition}: a producer writes to one partition "
                "(write to that one, or use another producer_id)"
            )
        pin.touched_ms = now
        return pin.partition

    # ------------------------------------------------------------------ sessions

    def register_writer(
        self, topic_id: int, producer_id: str, on_superseded: Callable[[], None]
    ) -> WriterToken:
        """One live write session per producer: a new one closes the old (its writes can't interleave)."""
        key = (topic_id, producer_id)
        old = self._writers.get(key)
        self._writers[key] = on_superseded
        self._touch(key)
        if old is not None:
            old()
        return WriterToken(key, on_superseded)

    def unregister_writer(self, token: WriterToken) -> None:
        if self._writers.get(token.key) is token.callback:
            del self._writers[token.key]
            self._touch(token.key)

    def _touch(self, key: Key) -> None:
        pin = self._pins.get(key)
        if pin is not None:
            pin.touched_ms = self.clock()

    # ------------------------------------------------------------------ expiry

    def expire(
        self, producers: Callable[[int], ProducerTables | None], now_ms: int | None = None
    ) -> int:
        """Drop the pins whose producer has no open session and whose state is gone or
        idle; ``producers`` gives a topic's producer tables by topic id (None: dropped).
        Returns how many went."""
        now = self.clock() if now_ms is None else now_ms
        gone = []
        tables: dict[int, ProducerTables | None] = {}
        for key, pin in self._pins.items():
            if key in self._writers:
                continue
            topic_id, producer_id = key
            if topic_id not in tables:
                tables[topic_id] = producers(topic_id)
            topic = tables[topic_id]
            state = (
                topic[pin.partition].get(producer_id)
                if topic is not None and pin.partition < len(topic)
                else None
            )
            last = max(pin.touched_ms, state.last_write_ms if state is not None else 0)
            if (state is None and pin.touched_ms < now - PIN_GRACE_MS) or self._idle(last, now):
                gone.append(key)
        for key in gone:
            del self._pins[key]
        return len(gone)

    def forget_topic(self, topic_id: int) -> None:
        """The topic was dropped: its pins go (its sessions end with their partitions)."""
        for key in [k for k in self._pins if k[0] == topic_id]:
            del self._pins[key]


def home_partition(producer_id: str, cfg: TopicConfig) -> int:
    """Where a new producer writes: ``crc32c(producer_id) % partitions`` (a routing
    writer's keyless messages go there too)."""
    return int(crc32c.crc32c(producer_id.encode()) % cfg.partitions)


def routed_home(producer_id: str, cfg: TopicConfig, producers: ProducerTables) -> int:
    """Where a routing writer's keyless messages go (its session without a partition).

    A producer with state in exactly one partition goes on there: a producer that
    wrote only keyless messages (or was pinned before) keeps its partition when the
    topic grows, so a new writer's resends land where the first attempts did. Else
    (new, or state in several partitions from keyed messages) its `home_partition`."""
    holding = [p for p, table in enumerate(producers) if producer_id in table]
    if len(holding) == 1:
        return holding[0]
    return home_partition(producer_id, cfg)


def _home(producer_id: str, producers: ProducerTables) -> tuple[int, int] | None:
    """(partition, last write ms) of the partition holding the producer's newest state."""
    best: tuple[int, int] | None = None
    for p, table in enumerate(producers):
        state = table.get(producer_id)
        if state is not None and (best is None or state.last_write_ms > best[1]):
            best = (p, state.last_write_ms)
    return best
