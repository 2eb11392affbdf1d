"""Producer access modes: who may write to a topic at the same time (Pulsar's model).

* **Shared** (the default): any number of producers; refused while an exclusive
  producer holds the topic.
* **Exclusive**: the only producer of the topic; refused at once
  (`ProducerBusyError`) when another producer is there.
* **WaitForExclusive**: exclusive, but waits (in arrival order) until the other
  producers have left.
* **ExclusiveWithFencing**: exclusive at once; every other producer is fenced: its
  sessions end with `ProducerFencedError` and so do its reconnects.

Exclusivity belongs to a producer_id on the whole topic: the sessions of one
producer (a reconnect that overlaps its old session, one session per partition)
count as one producer. Each time an exclusive producer takes the topic, the
topic's **producer epoch** grows. The broker persists it (the caller commits
`Claim.new_epoch` before it answers), so it survives restarts. A producer hears
the epoch at its first init and sends it back when it reconnects: when the epoch
has grown since, another exclusive producer took the topic in between, and the
reconnect is refused as fenced, even after a restart and even when that other
producer has left. Without this, a producer cut off by a network partition would
come back and interleave with the one that replaced it.

The registry is pure bookkeeping, without I/O: a check and its record happen in
one step without awaiting, so two sessions racing for a topic cannot both win.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from weir.access_mode import AccessMode
from weir.errors import ProducerBusyError, ProducerFencedError

Fence = Callable[[ProducerFencedError], None]


@dataclass(slots=True)
class _TopicAccess:
    epoch: int = 0
    holder: str | None = None  # the exclusive producer, if any
    sessions: dict[str, dict[int, Fence]] = field(default_factory=dict)  # producer -> sessions
    waiters: deque[asyncio.Future[None]] = field(default_factory=deque)

    def others(self, producer_id: str) -> list[str]:
        return [p for p in self.sessions if p != producer_id]


@dataclass(frozen=True, slots=True)
class Claim:
    """A granted session: ``epoch`` is the topic's producer epoch to report;
    ``new_epoch`` says it grew and must be persisted before the producer hears it."""

    topic_id: int
    producer_id: str
    session: int
    epoch: int
    new_epoch: bool


class ProducerAccess:
    """The producers of every topic and their access modes; see the module docstring."""

    def __init__(self, epochs: dict[int, int] | None = None) -> None:
        self._topics: dict[int, _TopicAccess] = {}
        for tid, epoch in (epochs or {}).items():
            self._topics[tid] = _TopicAccess(epoch=epoch)
        self._ids = itertools.count(1)

    def epoch(self, topic_id: int) -> int:
        t = self._topics.get(topic_id)
        return t.epoch if t is not None else 0

    def holder(self, topic_id: int) -> str | None:
        t = self._topics.get(topic_id)
        return t.holder if t is not None else None

    def observe(self, topic_id: int, topic: str, epoch: int, holder: str | None) -> None:
        """The topic's epoch as the cluster records it (`weir.broker.cluster.producer_registry`):
        when another broker's exclusive producer (``holder``) took the topic since, the
        sessions of every other producer here are fenced and the epoch is raised to it."""
        t = self._topics.setdefault(topic_id, _TopicAccess())
        if epoch <= t.epoch:
            return
        t.epoch = epoch
        err = ProducerFencedError(
            f"fenced: producer {holder!r} took topic {topic!r} as an exclusive producer "
            f"(producer epoch {epoch})"
        )
        for p in t.others(holder or ""):
            for f in t.sessions.pop(p).values():
                f(err)
        if t.holder != holder:
            t.holder = None
        if not t.sessions:
            self._wake(t)

    def claim(
        self,
        topic_id: int,
        topic: str,
        producer_id: str,
        mode: AccessMode,
        known_epoch: int | None,
        fence: Fence,
    ) -> Claim | asyncio.Future[None]:
        """Grant a session, or raise, or (WaitForExclusive) return a future that
        resolves when it is worth claiming again. Never awaits."""
        t = self._topics.setdefault(topic_id, _TopicAccess())
        if mode.exclusive and known_epoch is not None and known_epoch < t.epoch:
            raise ProducerFencedError(
                f"producer {producer_id!r} of {topic!r} is fenced: an exclusive producer took "
                f"the topic since (producer epoch {t.epoch}, this producer's {known_epoch})"
            )
        if t.holder is not None and t.holder != producer_id:
            if mode is AccessMode.WAIT_FOR_EXCLUSIVE:
                return self._wait(t)
            if mode is not AccessMode.EXCLUSIVE_WITH_FENCING:
                raise ProducerBusyError(
                    f"topic {topic!r} has the exclusive producer {t.holder!r}: "
                    f"{mode.title} producer {producer_id!r} refused"
                )
        new_epoch = False
        if mode.exclusive and t.holder != producer_id:
            # a producer coming back with the current epoch takes the topic again as it
            # was (nobody took it in between); anyone else makes the epoch grow
            others = t.others(producer_id)
            if others and mode is AccessMode.EXCLUSIVE:
                raise ProducerBusyError(
                    f"topic {topic!r} has {len(others)} other producer(s) (such as "
                    f"{others[0]!r}): Exclusive producer {producer_id!r} refused"
                )
            if others and mode is AccessMode.WAIT_FOR_EXCLUSIVE:
                return self._wait(t)
            if known_epoch != t.epoch:
                t.epoch = max(t.epoch, known_epoch or 0) + 1
                new_epoch = True
            t.holder = producer_id
            if others:  # ExclusiveWithFencing
                err = ProducerFencedError(
                    f"fenced: producer {producer_id!r} took topic {topic!r} with "
                    f"ExclusiveWithFencing (producer epoch {t.epoch})"
                )
                for p in others:
                    for f in t.sessions.pop(p).values():
                        f(err)
        session = next(self._ids)
        t.sessions.setdefault(producer_id, {})[session] = fence
        return Claim(topic_id, producer_id, session, t.epoch, new_epoch)

    def _wait(self, t: _TopicAccess) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        t.waiters.append(fut)
        return fut

    def release(self, claim: Claim) -> None:
        """The session ended (or its epoch could not be persisted)."""
        t = self._topics.get(claim.topic_id)
        if t is None:
            return
        sessions = t.sessions.get(claim.producer_id)
        if sessions is not None:
            sessions.pop(claim.session, None)
            if not sessions:
                del t.sessions[claim.producer_id]
        if t.holder is not None and t.holder not in t.sessions:
            t.holder = None
        if not t.sessions:
            self._wake(t)

    def _wake(self, t: _TopicAccess) -> None:
        """The topic is free: the first live waiter claims again (the rest keep waiting)."""
        while t.waiters:
            fut = t.waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def pass_on(self, topic_id: int, woken: asyncio.Future[None]) -> None:
        """A waiter gave up (its session ended): when it had been woken, wake the next."""
        t = self._topics.get(topic_id)
        if t is None:
            return
        if woken.done() and not woken.cancelled():
            if not t.sessions:
                self._wake(t)
        else:
            woken.cancel()

    def wake_all(self) -> None:
        """The broker is closing: every waiter claims again and hears so."""
        for t in self._topics.values():
            for fut in t.waiters:
                if not fut.done():
                    fut.set_result(None)
            t.waiters.clear()

    def forget_topic(self, topic_id: int) -> None:
        t = self._topics.pop(topic_id, None)
        if t is not None:
            for fut in t.waiters:
                if not fut.done():
                    fut.set_result(None)  # the claim again finds the topic gone
