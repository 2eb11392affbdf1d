"""A reader of topics whose partitions are served by several brokers (a cluster).

A reader's stream reads from one broker, and in ``storage.mode = "replicated"`` each
partition is served by its owner alone (docs/cluster.md). So the reader asks ``Lookup``
who owns each partition of its topics and opens one stream per owner, naming the
partitions that owner serves (`ReadInit.partitions`); their batches are merged into
one ``receive_batch``. A stream told ``NOT_OWNER``, or whose broker fails, ends and
hands its partitions back: they are looked up again (waiting with backoff while a
partition moves) and read from their new owner, starting at the consumer's committed
offsets, which move with the partition's log. Commits go to the stream that delivered
the message, as with one stream.

When every partition is served by one broker (an embedded server: all of them), the
reader is one stream without named partitions, exactly as before: with a consumer,
its partitions are shared with the consumer's other readers. Streams that name their
partitions are not shared through the consumer's group: two readers of one consumer
in a cluster both read every partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from typing import Any

from weir.client.chunks import DEFAULT_CHUNK_EXPIRY
from weir.client.connection import Backoff, Connection
from weir.client.messages import Batch, Message
from weir.client.reader import PartitionSession, ReaderCore, check_commit, check_reader
from weir.errors import ClosedError, WeirError, WeirTimeoutError
from weir.protocols.native import weir_pb2 as pb

log = logging.getLogger("weir.client.reader")

# a stream that lived this long before its partitions moved: reopen them at once
MOVE_SETTLED_S = 2.0

Part = tuple[str, int]


class OwnerReaders:
    """The reader's streams, one per partition owner (module docstring); what
    `weir.aio.Reader` and `weir.Reader` use of a `ReaderCore`."""

    def __init__(self, conn: Connection, topics: list[str], **settings: Any) -> None:
        check_reader(topics, settings.get("chunk_expiry", DEFAULT_CHUNK_EXPIRY))
        self.conn = conn
        self.topics = topics
        self.consumer: str = settings.get("consumer", "")
        self._settings = settings
        self._cores: list[ReaderCore] = []
        self._event = asyncio.Event()  # data (or an error) in any stream's queue
        self._planned = asyncio.Event()  # the first streams are open
        self._moved: asyncio.Queue[tuple[ReaderCore, WeirError]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._closed = False
        self._error: WeirError | None = None
        self._next = 0  # the stream to deliver from first (round robin)
        self._ended_reconnects = 0  # of streams that ended
        self._moves = 0
        self._last_error: WeirError | None = None
        self._born: dict[ReaderCore, float] = {}  # when each stream was opened
        self._backoff = Backoff()  # between moves that come right after the stream opened

    # ------------------------------------------------------------------ state

    @property
    def connected(self) -> bool:
        return bool(self._cores) and all(c.connected for c in self._cores)

    @property
    def disconnected_for(self) -> float:
        return max((c.disconnected_for for c in self._cores), default=0.0)

    @property
    def last_error(self) -> WeirError | None:
        errs = [c.last_error for c in self._cores if c.last_error is not None]
        return errs[-1] if errs else self._last_error

    @property
    def reconnects(self) -> int:
        return self._ended_reconnects + self._moves + sum(c.reconnects for c in self._cores)

    @property
    def partitions(self) -> list[PartitionSession]:
        return [ps for c in self._cores for ps in c.partitions]

    # ------------------------------------------------------------------ streams

    def start_session(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="weir-reader-owners")

    def _core(self, target: Connection, named: list[Part]) -> ReaderCore:
        topics = list(dict.fromkeys(t for t, _ in named)) if named else self.topics
        core = ReaderCore(
            self.conn, topics, partitions=named, on_moved=self._on_moved, **self._settings
        )
        core.target = target
        core._queue_event = self._event  # one wake-up for every stream's data
        core.start_session()
        self._born[core] = time.monotonic()
        return core

    def _on_moved(self, core: ReaderCore, err: WeirError) -> None:
        self._last_error = err
        self._moved.put_nowait((core, err))

    async def _run(self) -> None:
        try:
            await self._open(None, Backoff())
            self._planned.set()
            while not self._closing:
                core, err = await self._moved.get()
                if core not in self._cores:
                    continue
                self._cores.remove(core)
                self._ended_reconnects += core.reconnects
                self._moves += 1
                parts = core.named or None
                log.info("reader: %s; looking up the owners of its partitions", err.message)
                await core.close(0)
                # a stream that ends right after it opened (brokers disagreeing about the
                # owner for a moment) waits with backoff: no tight loop of lookups
                if time.monotonic() - self._born.pop(core, 0.0) < MOVE_SETTLED_S:
                    await asyncio.sleep(self._backoff.next_delay())
                else:
                    self._backoff.reset()
                await self._open(parts, Backoff())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: fail loudly rather than hang
            log.exception("reader failed")
            self._error = WeirError(f"reader failed: {exc!r}")
            self._event.set()
        finally:
            self._planned.set()

    async def _open(self, parts: list[Part] | None, backoff: Backoff) -> None:
        """Open streams for ``parts`` (None: every partition of the reader's topics) at
        their owners; partitions nobody owns now are looked up again after a backoff."""
        while not self._closing:
            owners = await self._lookup()
            if owners is None:  # no broker answered: one stream at home, as without a cluster
                self._cores.append(self._core(self.conn, parts or []))
                return
            wanted = parts if parts is not None else list(owners)
            by_conn: dict[Connection, list[Part]] = defaultdict(list)
            moving: list[Part] = []
            for part in wanted:
                conn = owners.get(part)
                if conn is None:
                    moving.append(part)
                else:
                    by_conn[conn].append(part)
            if parts is None and not moving and len(by_conn) <= 1:
                # one broker serves them all: one stream as before (shared with the group)
                self._cores.append(self._core(next(iter(by_conn), self.conn), []))
                return
            for conn, named in by_conn.items():
                self._cores.append(self._core(conn, named))
            if not moving:
                return
            parts = moving
            delay = backoff.next_delay()
            log.info("reader: %d partition(s) moving; again within %.2f s", len(moving), delay)
            self._planned.set()  # read the others meanwhile
            await asyncio.sleep(delay)

    async def _lookup(self) -> dict[Part, Connection | None] | None:
        """The owner's connection of every partition of the reader's topics (None: it is
        moving); None when no broker answered."""
        owners = self.conn.owners
        found: dict[Part, Connection | None] = {}
        for topic in self.topics:
            got = await owners.ask(pb.LookupRequest(topic=topic))
            if got is None:
                return None
            conn, resp = got
            for o in resp.partitions:
                endpoint = o.endpoints.get("native", "")
                if o.local:
                    found[(topic, o.partition)] = conn
                elif o.broker and endpoint:
                    found[(topic, o.partition)] = owners.connection(endpoint)
                else:
                    found[(topic, o.partition)] = None
        return found

    async def wait_connected(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            await asyncio.wait_for(self._planned.wait(), timeout)
        except TimeoutError:
            raise WeirTimeoutError(
                f"reader at {self.conn.endpoint} not connected after {timeout:g} s"
            ) from None
        if self._error is not None:
            raise self._error.with_traceback(None)
        for core in list(self._cores):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            await core.wait_connected(left)

    # ------------------------------------------------------------------ receiving

    async def receive_batch(self, timeout: float | None = None) -> Batch | None:
        """The next batch of any stream (None if none arrives within ``timeout``)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            if self._closing or self._closed:
                raise ClosedError("reader is closed")
            cores = self._cores
            for i in range(len(cores)):
                core = cores[(self._next + i) % len(cores)]
                while core._queue:
                    batch = core._deliver(core._queue.popleft())
                    if batch is not None:
                        self._next = (self._next + i + 1) % len(cores)
                        return batch
            for core in cores:
                if core._error is not None:
                    raise core._error.with_traceback(None)
            if self._error is not None:
                raise self._error.with_traceback(None)
            self._event.clear()
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), remaining)

    # ------------------------------------------------------------------ commits

    def _holder(self, item: Message | Batch) -> ReaderCore | None:
        for core in self._cores:
            if item.session is not None and item.session in core._sessions.values():
                return core
        return self._cores[0] if self._cores else None

    def commit(self, item: Message | Batch) -> asyncio.Future[None]:
        """Commit on the stream that delivered ``item`` (see `ReaderCore.commit`)."""
        self.check_commit(item)
        core = self._holder(item)
        if core is None:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            fut.set_exception(ClosedError("reader has no stream now"))
            return fut
        return core.commit(item)

    def check_commit(self, item: Any) -> None:
        check_commit(item, self.consumer, self._closed or self._closing)

    # ------------------------------------------------------------------ close

    async def close(self, timeout: float | None = 10.0) -> None:
        """Close every stream (each waits for the acks of its commits), then stop."""
        if self._closed:
            return
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await asyncio.gather(*(c.close(timeout) for c in self._cores), return_exceptions=True)
        self._closed = True
        self._event.set()
