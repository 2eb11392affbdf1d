"""The native front's read session (StreamRead).

Partitions are assigned by the consumer group (or all, without a consumer); it
sends stored chunks as they are, within the byte credit the client grants, and
answers commits once they are durable.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc

from weir.broker.broker import Broker
from weir.broker.consumers import ConsumerGroup
from weir.broker.non_persistent import LivePartition, LiveQueue
from weir.broker.tenancy.limits import Lease
from weir.broker.topics import PERSISTENT, short_topic
from weir.errors import (
    BadRequestError,
    UnknownPartitionError,
    WeirError,
)
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.stream import Allow, Responses, StreamSession, allow_all
from weir.protocols.native.wire import (
    RawReadData,
)
from weir.security.grants import Permission

log = logging.getLogger("weir.native")

MAX_CHUNK_BYTES = 4 << 20


@dataclass(eq=False)
class _Assignment:
    id: int
    topic: str
    partition: int
    offset: int
    task: asyncio.Task[None] | None = None
    revoking: bool = False
    group: ConsumerGroup | None = None
    commits: set[asyncio.Task[None]] = field(default_factory=set)


_assignment_ids = itertools.count(1)


class ReadSession(StreamSession[pb.ReadRequest, pb.ReadResponse | RawReadData]):
    """One StreamRead: partitions assigned by the consumer group (or all, without a consumer)."""

    def __init__(
        self,
        broker: Broker,
        context: grpc.aio.ServicerContext | Responses,
        stopping: asyncio.Event | None = None,
        allow: Allow | None = None,
    ) -> None:
        super().__init__(context, stopping or asyncio.Event())
        self.broker = broker
        self.allow: Allow = allow or allow_all
        self.session_id = uuid.uuid4().hex[:16]
        self.consumer = ""
        self.start = pb.START_COMMITTED
        self.read_from_ms = 0
        self.committed = False  # read committed: stop at the last stable offset
        self.compacted = False
        self._credit = 0
        self._credit_event = asyncio.Event()
        self._assignments: dict[int, _Assignment] = {}
        self._by_tp: dict[tuple[str, int], _Assignment] = {}
        self._groups: list[ConsumerGroup] = []
        self._leases: list[Lease] = []

    def _error_response(self, error: pb.Error) -> pb.ReadResponse:
        return pb.ReadResponse(error=error)

    def _on_failure(self, err: BaseException) -> None:
        if not isinstance(err, WeirError):
            log.error("read session failed: %r", err, extra={"session": self.session_id})

    def _release(self) -> None:
        for lease in self._leases:
            lease.release()
        for g in self._groups:
            g.leave(self.session_id)
        for a in list(self._assignments.values()):
            if a.task is not None:
                a.task.cancel()

    async def _handle(self, requests: AsyncIterator[pb.ReadRequest]) -> None:
        try:
            first = await anext(requests, None)
            if first is None:
                return
            if first.WhichOneof("kind") != "init":
                raise BadRequestError("the first message of a read stream must be init")
            init = first.init
            if not init.topics:
                raise BadRequestError("a read session needs at least one topic")
            self.consumer = init.consumer
            self.start = init.start
            self.read_from_ms = init.read_from_ms
            self.committed = init.read_committed
            self.compacted = init.compacted
            self._add_credit(init.credit_bytes or (16 << 20))
            for t in init.topics:
                self.allow(Permission.CONSUME, t, "read", self.consumer)
            topics = [(await self.broker.topic_for_use(t)).name for t in init.topics]
            for t in dict.fromkeys(topics):
                self._leases.append(self.broker.count_consumer(t))
            named = self._named_partitions(init, topics)
            groups = {}
            if self.consumer:
                for t in topics:
                    await self.broker.ensure_consumer(t, self.consumer)
                # before the init answer: a consumer held by subscription consumers is refused
                if named:
                    for t in topics:
                        self.broker.check_not_subscribed(t, self.consumer)
                else:
                    groups = {t: self.broker.group(t, self.consumer) for t in topics}
            self._out.put_nowait(
                pb.ReadResponse(init=pb.ReadInitResult(session_id=self.session_id))
            )
            log.debug(
                "read session opened",
                extra={
                    "session": self.session_id,
                    "topics": ",".join(map(short_topic, topics)),
                    "consumer": self.consumer,
                },
            )
            for t, p in named:  # (a cluster's client: the partitions this broker serves)
                self.assign(t, p)
            for t in topics if not named else ():
                if self.consumer:
                    g = groups[t]
                    self._groups.append(g)
                    g.join(self)
                else:
                    for p in range(self.broker.topic(t).partitions):
                        self.assign(t, p)
            async for req in requests:
                kind = req.WhichOneof("kind")
                if kind == "credit":
                    self._add_credit(req.credit.bytes)
                elif kind == "commit":
                    self._commit(req.commit)
                elif kind == "released":
                    self._released(req.released.assignment_id)
                else:
                    raise BadRequestError(f"unexpected {kind} on a read stream")
            # client half-closed: let commits finish so their acks go out
            await self._drain()
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._fail(err)

    def _named_partitions(self, init: pb.ReadInit, topics: list[str]) -> list[tuple[str, int]]:
        """The partitions the init names (`ReadInit.partitions`), by full topic name; each
        must be of a topic the init reads and exist."""
        if not init.partitions:
            return []
        full = dict(zip(init.topics, topics, strict=True))
        out: list[tuple[str, int]] = []
        for rp in init.partitions:
            topic = full.get(rp.topic)
            if topic is None:
                raise BadRequestError(
                    f"partition {rp.topic}/{rp.partition} is not of a topic this stream reads"
                )
            count = self.broker.topic(topic).partitions
            if not 0 <= rp.partition < count:
                raise UnknownPartitionError(
                    f"topic {short_topic(topic)!r} has partitions 0..{count - 1}, "
                    f"not {rp.partition}"
                )
            if (topic, rp.partition) not in out:
                out.append((topic, rp.partition))
        return out

    def _add_credit(self, n: int) -> None:
        if n < 0:
            raise BadRequestError("credit must not be negative")
        self._credit += n
        if self._credit > 0:
            self._credit_event.set()

    async def _drain(self) -> None:
        tasks = [t for a in self._assignments.values() for t in a.commits]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # GroupMember -------------------------------------------------------------

    def assign(self, topic: str, partition: int) -> None:
        if self.broker.topic(topic).kind != PERSISTENT:
            self._assign_live(topic, partition)
            return
        actor = self.broker.actor(topic, partition)
        committed = (
            self.broker.committed_offset(topic, partition, self.consumer) if self.consumer else None
        )
        if self.start == pb.START_LATEST:
            offset = actor.end_offset
        elif self.start == pb.START_EARLIEST or not self.consumer:
            offset = actor.start_offset
            if self.read_from_ms:
                offset = actor.log.offset_for_time(self.read_from_ms)
            elif self.compacted:
                offset = self.broker.compacted_start(topic, partition)
        elif self.compacted and committed is not None:
            offset = min(committed, actor.end_offset)  # the view may hold it after retention
        else:
            consumer = self.broker.consumer(topic, self.consumer)
            offset = self.broker.read_start(
                topic, partition, self.consumer, self.read_from_ms or consumer.read_from_ms
            )
        a = _Assignment(next(_assignment_ids), topic, partition, offset)
        a.group = next((g for g in self._groups if g.topic == topic), None)
        self._assignments[a.id] = a
        self._by_tp[(topic, partition)] = a
        self._out.put_nowait(
            pb.ReadResponse(
                assigned=pb.PartitionAssigned(
                    assignment_id=a.id,
                    topic=short_topic(topic),
                    partition=partition,
                    read_offset=offset,
                    committed_offset=committed if committed is not None else actor.start_offset,
                    start_offset=actor.start_offset,
                    end_offset=actor.end_offset,
                )
            )
        )
        a.task = asyncio.get_running_loop().create_task(self._pump(a))

    def _assign_live(self, topic: str, partition: int) -> None:
        """A partition of a non-persistent topic: what is written from now on, through a
        bounded queue of this session's (a slow reader's messages are dropped, counted)."""
        live = self.broker.live_partition(topic, partition)
        a = _Assignment(next(_assignment_ids), topic, partition, live.end_offset)
        a.group = next((g for g in self._groups if g.topic == topic), None)
        self._assignments[a.id] = a
        self._by_tp[(topic, partition)] = a
        queue = live.open_queue()  # before the answer: nothing written after it is missed
        self._out.put_nowait(
            pb.ReadResponse(
                assigned=pb.PartitionAssigned(
                    assignment_id=a.id,
                    topic=short_topic(topic),
                    partition=partition,
                    read_offset=a.offset,
                    committed_offset=a.offset,
                    start_offset=a.offset,
                    end_offset=a.offset,
                )
            )
        )
        a.task = asyncio.get_running_loop().create_task(self._pump_live(a, live, queue))

    async def _pump_live(self, a: _Assignment, live: LivePartition, queue: LiveQueue) -> None:
        try:
            while True:
                await queue.wait()
                while self._credit <= 0:
                    self._credit_event.clear()
                    await self._credit_event.wait()
                items = queue.take(min(self._credit, MAX_CHUNK_BYTES))
                chunks: list[bytes | memoryview] = [batch for _, batch, _ in items]
                n = sum(len(c) for c in chunks)
                self._credit -= n
                a.offset = items[-1][2][-1] + 1
                self.broker.observer.on_read(a.topic, a.partition, n)
                self._out.put_nowait(RawReadData(a.id, chunks, a.offset, live.end_offset, n))
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._fail(err)
        finally:
            live.close_queue(queue)

    def revoke(self, topic: str, partition: int, graceful: bool) -> None:
        a = self._by_tp.get((topic, partition))
        if a is None:
            return
        a.revoking = True
        if a.task is not None:
            a.task.cancel()
        self._out.put_nowait(
            pb.ReadResponse(revoked=pb.PartitionRevoked(assignment_id=a.id, graceful=graceful))
        )
        if not graceful:
            self._forget(a)

    def _forget(self, a: _Assignment) -> None:
        self._assignments.pop(a.id, None)
        if self._by_tp.get((a.topic, a.partition)) is a:
            del self._by_tp[(a.topic, a.partition)]

    def _released(self, assignment_id: int) -> None:
        a = self._assignments.get(assignment_id)
        if a is None:
            return
        self._forget(a)
        if a.group is not None:
            a.group.released(self.session_id, a.partition)

    def _commit(self, c: pb.ReadCommit) -> None:
        a = self._assignments.get(c.assignment_id)
        if a is None:
            raise BadRequestError(
                f"commit for assignment {c.assignment_id}, which this session does not hold"
            )
        if not self.consumer:
            raise BadRequestError("a read session without a consumer cannot commit")

        async def do() -> None:
            try:
                await self.broker.commit_offset(a.topic, a.partition, self.consumer, c.offset)
                committed = self.broker.committed_offset(a.topic, a.partition, self.consumer)
                self._out.put_nowait(
                    pb.ReadResponse(
                        commit_ack=pb.CommitAck(assignment_id=a.id, committed_offset=committed or 0)
                    )
                )
            except WeirError as err:
                self._fail(err)

        t = asyncio.get_running_loop().create_task(do())
        a.commits.add(t)
        t.add_done_callback(a.commits.discard)

    async def _pump(self, a: _Assignment) -> None:
        """Send stored chunks of one partition as data arrives and credit allows."""
        actor = self.broker.actor(a.topic, a.partition)
        try:
            while True:
                committed = self.committed
                if (actor.stable_offset if committed else actor.end_offset) <= a.offset:
                    await actor.wait_for_data(a.offset, None, committed=committed)
                while self._credit <= 0:
                    self._credit_event.clear()
                    await self._credit_event.wait()
                budget = min(self._credit, MAX_CHUNK_BYTES)
                res = await (
                    self.broker.read_compacted(
                        a.topic, a.partition, a.offset, budget, committed=committed
                    )
                    if self.compacted
                    else actor.read_async(a.offset, budget, committed=committed)
                )
                if not res.chunks:
                    if res.next_offset > a.offset:
                        a.offset = res.next_offset
                    else:
                        await asyncio.sleep(0)
                    continue
                n = res.nbytes
                self._credit -= n
                self.broker.observer.on_read(a.topic, a.partition, n)
                self._out.put_nowait(
                    RawReadData(a.id, res.chunks, res.next_offset, res.end_offset, n)
                )
                a.offset = res.next_offset
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._fail(err)
