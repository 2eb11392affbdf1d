"""One YDB StreamRead: partition sessions, flow control, commits and rebalancing.

With a consumer, the session joins the consumer's `ConsumerGroup` for each topic
and reads the partitions the group assigns (`assign` / `revoke` are the
GroupMember calls); with explicit partition ids, or without a consumer, it
reads the partitions it names (all of them by default).

For each partition the server sends start_partition_session with the
consumer's committed offset (where the SDK's commit ranges begin) and waits for
the client's answer, which may move the read offset. Then a pump sends
messages as they arrive, within the byte credit the client granted: credit is
the sum of ReadRequest.bytes_size minus the bytes_size of every ReadResponse,
and a response never charges more than the credit left. The one exception is a
single message bigger than the credit left while less than half the client's
buffer is outstanding: the SDK hands bytes back only in steps of half its
buffer, so that message would otherwise wait for ever (it goes out alone).

Readers get what is committed (YDB's semantics: a transaction's writes are
invisible until it commits): each partition up to its last stable offset, without
the messages of aborted transactions.

Commits move the consumer's committed offset only over contiguous ranges
(`CommitTracker`); every CommitOffsetRequest is answered once its effect is
durable. A rebalance stops a partition session gracefully (the client answers
and the group hands the partition on) or, after the group's timeout, by force.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc

from weir.broker.broker import Broker
from weir.broker.consumer_readers import ReaderHold
from weir.broker.consumers import ConsumerGroup
from weir.broker.tenancy.limits import Lease
from weir.errors import BadRequestError, UnavailableError, WeirError
from weir.protocols.ydb.auth import Authenticator
from weir.protocols.ydb.commits import CommitTracker
from weir.protocols.ydb.conversions import duration_ms, set_ts, ts_ms
from weir.protocols.ydb.protos import StreamRead, ydb_topic_pb2
from weir.protocols.ydb.read_batches import add_messages
from weir.protocols.ydb.shutdown import Shutdown
from weir.protocols.ydb.status import SUCCESS, UnsupportedError, end_stream
from weir.protocols.ydb.topic_settings import persistent_only
from weir.security import BearerToken, Principal
from weir.security.authenticator import Credential
from weir.security.grants import Permission

log = logging.getLogger("weir.ydb.read")

MAX_RESPONSE_BYTES = 2 << 20  # one ReadResponse: big enough to batch, small enough to interleave
_session_ids = itertools.count(1)


@dataclass
class _TopicSettings:
    path: str  # as the client named it (it comes back in partition sessions)
    partitions: list[int]
    read_from_ms: int
    group: ConsumerGroup | None = None


@dataclass(eq=False)
class _PartitionSession:
    id: int
    topic: str
    path: str
    partition: int
    read_offset: int
    tracker: CommitTracker
    durable: int  # committed offset known to be stored
    started: bool = False
    stopping: bool = False  # a stop request went out: nothing more is sent for it
    pump: asyncio.Task[None] | None = None
    commit_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class ReadSession:
    """One StreamRead call; also the `GroupMember` its consumer groups talk to."""

    def __init__(
        self,
        broker: Broker,
        auth: Authenticator,
        shutdown: Shutdown,
        context: grpc.aio.ServicerContext,
        database: str,
    ) -> None:
        self.broker = broker
        self.auth = auth
        self.shutdown = shutdown
        self.context = context
        self.database = database
        self.session_id = f"weir-r{next(_session_ids)}-{uuid.uuid4().hex[:12]}"
        self.consumer = ""
        self._topics: dict[str, _TopicSettings] = {}
        self._leases: list[Lease] = []
        self._holds: list[ReaderHold] = []  # readers of the consumer's offsets outside a group
        self._sessions: dict[int, _PartitionSession] = {}
        self._by_tp: dict[tuple[str, int], _PartitionSession] = {}
        self._next_ps = itertools.count(1)
        self._out: asyncio.Queue[Any] = asyncio.Queue()
        self._credit = 0
        self._max_credit = 0
        self._credit_event = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None
        self._stop = asyncio.Event()
        self.credential: Credential | None = auth.credential(context)
        self.principal: Principal | None = None
        self._access_ended = False  # nothing more is sent but the stream's end

    # ------------------------------------------------------------------ lifecycle

    async def run(self, requests: AsyncIterator[Any]) -> None:
        sender = asyncio.create_task(self._send())
        handler = asyncio.create_task(self._handle(requests))
        stop = asyncio.create_task(self._stop.wait())
        shutdown = asyncio.create_task(self.shutdown.wait())
        cancelled = False
        try:
            await asyncio.wait({handler, stop, shutdown}, return_when=asyncio.FIRST_COMPLETED)
            if shutdown.done():
                self._fail(UnavailableError("server is shutting down"))
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            for t in (handler, stop, shutdown):
                t.cancel()
            self._close()
            if cancelled:
                sender.cancel()
            else:
                # commits in flight finish and are answered before the stream ends
                commits = [t for t in self._tasks if t.get_name() == "commit"]
                if commits:
                    await asyncio.wait(commits, timeout=10)
                self._out.put_nowait(None)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(sender, 10)
        if self._failure is not None:
            await end_stream(self.context, StreamRead.FromServer, self._failure)

    def _close(self) -> None:
        """Leave the groups (their partitions go to other readers) and stop every pump."""
        for lease in self._leases:
            lease.release()
        self._leases.clear()
        for hold in self._holds:
            hold.release()
        self._holds.clear()
        for t in self._topics.values():
            if t.group is not None:
                t.group.leave(self.session_id)
        for ps in self._sessions.values():
            if ps.pump is not None:
                ps.pump.cancel()
        for task in self._tasks:
            if not task.done() and task.get_name() != "commit":
                task.cancel()  # commits in flight finish: they are durable work

    def _fail(self, err: BaseException) -> None:
        if self._failure is None:
            self._failure = err
            if isinstance(err, WeirError):
                log.debug("read session %s ends: %s", self.session_id, err)
        self._stop.set()

    def end_access(self, err: WeirError) -> None:
        """The caller lost the right to read (see `Authenticator.watching`): what is queued
        for it is dropped, and the stream ends with ``err``."""
        self._access_ended = True
        self._failure = err
        for ps in self._sessions.values():
            if ps.pump is not None:
                ps.pump.cancel()
        self._stop.set()

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _send(self) -> None:
        while True:
            msg = await self._out.get()
            if msg is None:
                return
            if self._access_ended:
                continue
            try:
                await self.context.write(msg)
            except Exception:  # the client is gone
                self._stop.set()
                return

    # ------------------------------------------------------------------ requests in

    async def _handle(self, requests: AsyncIterator[Any]) -> None:
        try:
            self.principal = self.auth.principal(self.context)
            first = await anext(requests, None)
            if first is None:
                return
            if first.WhichOneof("client_message") != "init_request":
                raise BadRequestError("the first message of a read stream must be init_request")
            await self._init(first.init_request)
            async for req in requests:
                kind = req.WhichOneof("client_message")
                if kind == "read_request":
                    self._add_credit(req.read_request.bytes_size)
                elif kind == "commit_offset_request":
                    self._commit(req.commit_offset_request)
                elif kind == "start_partition_session_response":
                    self._started(req.start_partition_session_response)
                elif kind == "stop_partition_session_response":
                    self._stopped(req.stop_partition_session_response.partition_session_id)
                elif kind == "partition_session_status_request":
                    self._status(req.partition_session_status_request.partition_session_id)
                elif kind == "update_token_request":
                    self._update_token(req.update_token_request.token)
                else:
                    raise UnsupportedError(f"{kind} is not supported by weir")
            # The client half-closed: let its commits finish so their answers go out.
            commits = [t for t in self._tasks if t.get_name() == "commit"]
            if commits:
                await asyncio.gather(*commits, return_exceptions=True)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._fail(err)

    async def _init(self, init: Any) -> None:
        if not init.topics_read_settings:
            raise BadRequestError("a read session needs at least one topic")
        if init.direct_read:
            raise UnsupportedError("direct read is not supported by weir")
        self.consumer = init.consumer
        now_ms = int(time.time() * 1000)
        for s in init.topics_read_settings:
            self.auth.allow(Permission.CONSUME, s.path, self.database, "read")
            cfg = persistent_only(self.broker.topic(s.path, self.database), "read")
            if cfg.name in self._topics:
                raise BadRequestError(f"topic {s.path!r} is named twice")
            parts = list(s.partition_ids)
            for p in parts:
                self.broker.actor(cfg.name, p)  # range check
            read_from = ts_ms(s.read_from) if s.HasField("read_from") else 0
            if s.HasField("max_lag"):
                read_from = max(read_from, now_ms - duration_ms(s.max_lag))
            if self.consumer:
                consumer = await self.broker.ensure_consumer(cfg.name, self.consumer)
                read_from = max(read_from, consumer.read_from_ms)
            self._topics[cfg.name] = _TopicSettings(s.path, parts, read_from)
            self._leases.append(self.broker.count_consumer(cfg.name))
        for name, t in self._topics.items():
            # before the init answer: a consumer held by subscription consumers is refused
            if self.consumer and not t.partitions:
                t.group = self.broker.group(name, self.consumer)
            elif self.consumer:
                self._holds.append(
                    self.broker.hold_consumer("partition read session", name, self.consumer)
                )
        await self.context.write(
            StreamRead.FromServer(
                status=SUCCESS,
                init_response=StreamRead.InitResponse(session_id=self.session_id),
            )
        )
        log.debug(
            "ydb read session %s opened: topics=%s consumer=%r",
            self.session_id,
            sorted(self._topics),
            self.consumer,
        )
        for name, t in self._topics.items():
            if t.group is not None:
                t.group.join(self)
            else:
                for p in t.partitions or range(self.broker.topic(name).partitions):
                    self.assign(name, p)

    def _add_credit(self, n: int) -> None:
        if n < 0:
            raise BadRequestError(f"ReadRequest.bytes_size must not be negative, got {n}")
        self._credit += n
        self._max_credit = max(self._max_credit, self._credit)
        if n:
            self._credit_event.set()

    def _update_token(self, token: str) -> None:
        if token or not self.auth.allow_anonymous:
            self.auth.verify(token)
        self.credential = BearerToken(token, "ticket") if token else None
        self._out.put_nowait(
            StreamRead.FromServer(
                status=SUCCESS, update_token_response=ydb_topic_pb2.UpdateTokenResponse()
            )
        )

    def _status(self, ps_id: int) -> None:
        ps = self._sessions.get(ps_id)
        if ps is None:
            return
        actor = self.broker.actor(ps.topic, ps.partition)
        resp = StreamRead.FromServer(status=SUCCESS)
        st = resp.partition_session_status_response
        st.partition_session_id = ps.id
        st.partition_offsets.start = actor.start_offset
        st.partition_offsets.end = actor.end_offset
        st.committed_offset = ps.durable
        st.read_offset = ps.read_offset
        blobs = actor.log.blobs
        set_ts(st.write_time_high_watermark, blobs[-1].max_written if blobs else 0)
        self._out.put_nowait(resp)

    # ------------------------------------------------------------------ partition sessions

    def assign(self, topic: str, partition: int) -> None:
        """GroupMember: start a partition session; reading begins once the client answers."""
        try:
            actor = self.broker.actor(topic, partition)
            settings = self._topics[topic]
            start, end = actor.start_offset, actor.end_offset
            if self.consumer:
                committed = self.broker.committed_offset(topic, partition, self.consumer)
                commit_from = start if committed is None else min(max(committed, start), end)
                read_offset = self.broker.read_start(
                    topic, partition, self.consumer, settings.read_from_ms
                )
            else:
                commit_from = start
                read_offset = (
                    actor.log.offset_for_time(settings.read_from_ms)
                    if settings.read_from_ms
                    else start
                )
            ps = _PartitionSession(
                next(self._next_ps),
                topic,
                settings.path,
                partition,
                read_offset,
                CommitTracker(commit_from),
                commit_from,
            )
            self._sessions[ps.id] = ps
            self._by_tp[(topic, partition)] = ps
            resp = StreamRead.FromServer(status=SUCCESS)
            req = resp.start_partition_session_request
            req.partition_session.partition_session_id = ps.id
            req.partition_session.path = settings.path
            req.partition_session.partition_id = partition
            req.committed_offset = commit_from
            req.partition_offsets.start = start
            req.partition_offsets.end = end
            self._out.put_nowait(resp)
        except Exception as err:
            self._fail(err)

    def revoke(self, topic: str, partition: int, graceful: bool) -> None:
        """GroupMember: stop a partition session (graceful: the client answers first)."""
        ps = self._by_tp.get((topic, partition))
        if ps is None or ps.stopping:
            return
        ps.stopping = True
        if ps.pump is not None:
            ps.pump.cancel()  # nothing more is sent for it: the client drops it at once
            ps.pump = None
        resp = StreamRead.FromServer(status=SUCCESS)
        req = resp.stop_partition_session_request
        req.partition_session_id = ps.id
        req.graceful = graceful
        req.committed_offset = ps.durable
        self._out.put_nowait(resp)
        if not graceful:
            self._forget(ps)

    def _forget(self, ps: _PartitionSession) -> None:
        if ps.pump is not None:
            ps.pump.cancel()
        self._sessions.pop(ps.id, None)
        if self._by_tp.get((ps.topic, ps.partition)) is ps:
            del self._by_tp[(ps.topic, ps.partition)]

    def _started(self, resp: Any) -> None:
        ps = self._sessions.get(resp.partition_session_id)
        if ps is None or ps.started or ps.stopping:
            return
        ps.started = True
        actor = self.broker.actor(ps.topic, ps.partition)
        if resp.HasField("read_offset"):
            ps.read_offset = min(max(resp.read_offset, actor.start_offset), actor.end_offset)
        if resp.HasField("commit_offset") and self.consumer:
            self._commit_range(ps, ps.tracker.committed, resp.commit_offset)
        ps.pump = self._spawn(self._pump(ps), f"pump-{ps.topic}/{ps.partition}")

    def _stopped(self, ps_id: int) -> None:
        ps = self._sessions.get(ps_id)
        if ps is None:
            return
        self._forget(ps)
        group = self._topics[ps.topic].group
        if group is not None:
            group.released(self.session_id, ps.partition)

    # ------------------------------------------------------------------ commits

    def _commit(self, req: Any) -> None:
        for pc in req.commit_offsets:
            ps = self._sessions.get(pc.partition_session_id)
            if ps is None:
                continue  # stopped already; its commits belong to a session the client dropped
            if not self.consumer:
                raise BadRequestError("a reader without a consumer cannot commit")
            for r in pc.offsets:
                self._check_range(ps, r.start, r.end)
                ps.tracker.add(r.start, r.end)
            self._schedule_commit(ps)

    def _check_range(self, ps: _PartitionSession, start: int, end: int) -> None:
        limit = self.broker.actor(ps.topic, ps.partition).end_offset
        if start < 0 or end < start or end > limit:
            raise BadRequestError(
                f"commit range [{start}, {end}) is not within partition "
                f"{ps.partition}'s offsets (end offset {limit})"
            )

    def _commit_range(self, ps: _PartitionSession, start: int, end: int) -> None:
        self._check_range(ps, min(start, end), end)
        ps.tracker.add(min(start, end), end)
        self._schedule_commit(ps)

    def _schedule_commit(self, ps: _PartitionSession) -> None:
        self._spawn(self._store_commit(ps), "commit")

    async def _store_commit(self, ps: _PartitionSession) -> None:
        """Store the tracker's offset (if it moved) and answer with what is durable."""
        try:
            async with ps.commit_lock:
                target = ps.tracker.committed
                if target > ps.durable:
                    await self.broker.commit_offset(ps.topic, ps.partition, self.consumer, target)
                    ps.durable = max(ps.durable, target)
                    self.broker.observer.on_consumer_commit(
                        ps.topic, ps.partition, self.consumer, target
                    )
            resp = StreamRead.FromServer(status=SUCCESS)
            resp.commit_offset_response.partitions_committed_offsets.add(
                partition_session_id=ps.id, committed_offset=ps.durable
            )
            self._out.put_nowait(resp)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._fail(err)

    # ------------------------------------------------------------------ data out

    def _first_limit(self) -> int:
        """How big the next message may be: the credit left, or anything while less than
        half the client's buffer is outstanding (the SDK hands bytes back only after it
        consumed half its buffer, so a bigger message would otherwise wait for ever)."""
        if 2 * self._credit >= self._max_credit:
            return 1 << 62
        return self._credit

    async def _pump(self, ps: _PartitionSession) -> None:
        """Send the partition's messages from ``ps.read_offset`` on, within the credit."""
        actor = self.broker.actor(ps.topic, ps.partition)
        try:
            while True:
                if actor.stable_offset <= ps.read_offset:
                    await actor.wait_for_data(ps.read_offset, None, committed=True)
                while self._credit <= 0:
                    self._credit_event.clear()
                    await self._credit_event.wait()
                budget = min(self._credit, MAX_RESPONSE_BYTES)
                res = await actor.read_async(ps.read_offset, budget, committed=True)
                if not res.chunks:
                    # retention removed what we were about to read: continue after the gap
                    ps.read_offset = max(ps.read_offset, res.start_offset, res.next_offset)
                    await asyncio.sleep(0)
                    continue
                resp = StreamRead.FromServer(status=SUCCESS)
                rr = resp.read_response
                pd = rr.partition_data.add(partition_session_id=ps.id)
                nxt, _ = add_messages(
                    pd,
                    res.chunks,
                    max(ps.read_offset, res.first_offset),
                    budget,
                    first_limit=self._first_limit(),
                )
                if not pd.batches:
                    if nxt > ps.read_offset:  # skipped a gap, nothing to send yet
                        ps.read_offset = nxt
                        continue
                    self._credit_event.clear()  # wait for the client to hand bytes back
                    await self._credit_event.wait()
                    continue
                charged = rr.ByteSize()
                rr.bytes_size = charged
                self._credit -= charged
                ps.read_offset = nxt
                self.broker.observer.on_read(ps.topic, ps.partition, charged)
                self._out.put_nowait(resp)
                await asyncio.sleep(0)  # let other partitions and the sender run
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._fail(err)
