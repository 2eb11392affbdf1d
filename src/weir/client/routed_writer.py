"""A routing writer: one `WriterCore` per partition it writes to, a router choosing.

The home core (the producer's home partition, where keyless messages go with
the default routing) opens first: its init reports the partition count and the
home. Keyed messages wait for that (bounded like a connection wait) and go to
the core of their partition, opened on the first message routed there. Every
core is a routed session of the same producer_id, so its seq_nos and dedup
state are per (producer, partition): each core resends what its partition has
not acknowledged, and the broker drops what that partition already has. See
`weir.client.routing` for the routers and the hash.

The partition count is looked at again every ``partitions_refresh_interval`` (as
Pulsar's client does) and when the broker answers that a partition the writer
routed to is unknown (the topic was dropped and made again, smaller): keys then
spread over the partitions the topic has now. A key's partition changes when the
count does, as in Pulsar and Kafka.

It offers what `WriterCore` offers, so `weir.Writer` and `weir.aio.Writer`
wrap either. Its keyless fast path is the home core's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from weir.client.connection import Connection
from weir.client.routing import Custom, RoundRobin, SinglePartition
from weir.client.write_buffer import AnyFuture, as_bytes
from weir.client.write_columns import IntColumn, to_list
from weir.client.writer import WriterCore
from weir.client.writer_settings import WriterSettings
from weir.errors import (
    BadRequestError,
    ClosedError,
    UnknownPartitionError,
    WeirError,
    WeirTimeoutError,
)
from weir.protocols.native import weir_pb2 as pb

log = logging.getLogger("weir.client")


class RoutedWriterCore:
    """Shared by the sync and asyncio writers of a routing writer; see the module docstring."""

    def __init__(
        self,
        conn: Connection,
        topic: str,
        settings: WriterSettings,
        loop: asyncio.AbstractEventLoop,
        router: SinglePartition | RoundRobin | Custom,
    ) -> None:
        self.conn = conn
        self.topic = topic
        self.settings = settings
        self.loop = loop
        self.router = router
        self.home = WriterCore(conn, topic, settings, loop, routed=True)
        self.producer_id = self.home.producer_id
        self._cores: dict[int, WriterCore] = {}  # by partition, the home's included
        self._retired: list[WriterCore] = []  # cores of partitions the topic lost (closed last)
        self._refreshes: set[asyncio.Task[None]] = set()
        self._shape: tuple[int, int] | None = None  # (partitions, home partition)
        self._lock = threading.Lock()
        self._closed = False
        # keyed writes made before the home session reported the partition count: routed,
        # in order, as soon as it does (write() does not wait for it, as with one partition)
        self._early: list[tuple[bool, tuple[Any, ...], AnyFuture | None]] = []
        self._early_error: WeirError | None = None  # the writer failed before routing
        self._deferred: WeirError | None = None  # a queued write refused: the next call raises it
        self._drain: asyncio.Task[None] | None = None
        self._shaped = threading.Event()  # the shape is known, or the writer failed
        self._queued_any = False  # a write was queued (keyless ones then queue too, in order)
        self._early_unseen = False  # queued writes failed, and no call or future said so

    def start(self) -> None:
        self.home.start()
        self._drain = self.loop.create_task(self._route_early(), name=f"weir-router-{self.topic}")

    # ------------------------------------------------------------------ what it reports

    @property
    def partition(self) -> int | None:
        """The home partition (where keyless messages go by default)."""
        return self.home.partition

    @property
    def partitions(self) -> int | None:
        return self._shape[0] if self._shape is not None else self.home.partitions

    @property
    def last_seq_no(self) -> int | None:
        return self.home.last_seq_no

    @property
    def producer_epoch(self) -> int | None:
        return self.home.producer_epoch

    def _all(self) -> list[WriterCore]:
        with self._lock:
            cores = (c for c in self._cores.values() if c is not self.home)
            return [self.home, *cores, *self._retired]

    @property
    def last_error(self) -> WeirError | None:
        for c in self._all():
            if c.last_error is not None:
                return c.last_error
        return None

    @property
    def reconnects(self) -> int:
        return sum(c.reconnects for c in self._all())

    @property
    def unacknowledged(self) -> int:
        with self._lock:
            early = sum(len(args[0]) if many else 1 for many, args, _ in self._early)
        return early + sum(c.unacknowledged for c in self._all())

    @property
    def max_message_bytes(self) -> int:
        return self.home.max_message_bytes

    @property
    def closed(self) -> bool:
        return self._closed

    async def wait_init(self, timeout: float | None = None) -> None:
        await self.home.wait_init(timeout)
        await self._routed(timeout)  # and the writes queued until then are routed

    # ------------------------------------------------------------------ routing

    def _home_shape(self) -> tuple[int, int]:
        home = self.home.partition
        assert home is not None
        return (self.home.partitions or home + 1, home)

    def _shape_threadsafe(self, timeout: float | None) -> tuple[int, int]:
        """Wait for the partition count (only when too many writes wait for it already)."""
        wait = timeout if timeout is not None else self.settings.delivery_timeout
        if not self._shaped.wait(wait):
            raise self._not_connected(wait)
        self._raise_early()
        assert self._shape is not None
        return self._shape

    async def _shape_async(self, timeout: float | None) -> tuple[int, int]:
        wait = timeout if timeout is not None else self.settings.delivery_timeout
        assert self._drain is not None
        try:
            await asyncio.wait_for(asyncio.shield(self._drain), wait)
        except TimeoutError:
            raise self._not_connected(wait) from None
        self._raise_early()
        assert self._shape is not None
        return self._shape

    def _raise_early(self, seen: bool = True) -> None:
        if self._early_error is not None:
            if seen:
                self._early_unseen = False
                if self._early_error is self.home._error:
                    self.home._error_seen = True  # so the home core's close() won't raise it again
            raise self._early_error.with_traceback(None)
        err, self._deferred = self._deferred, None
        if err is not None:
            raise err

    def _keyless_direct(self) -> bool:
        """Keyless messages go straight to the home session (no partition count needed),
        unless writes wait in the queue: then they queue behind them, in order."""
        return self.router.keyless_home and (self._shape is not None or not self._queued_any)

    def _queued(self, many: bool, args: tuple[Any, ...], fut: AnyFuture | None) -> bool:
        """Queue a keyed write until the partition count is known; False: it is known
        (route it now), or too much waits already (wait for it)."""
        if self._shape is not None:
            return False
        with self._lock:
            if self._shape is not None or len(self._early) >= self.settings.max_buffer_messages:
                return False
            self._raise_early()
            if self._closed:
                raise ClosedError(f"writer to {self.topic!r} is closed")
            self._early.append((many, args, fut))
            self._queued_any = True
            return True

    async def _route_early(self) -> None:
        """Once the home session is up, route the queued writes in order, then let writes
        route at once (the shape is set only when the queue is empty, under the lock)."""
        await self.home._init_done.wait()
        shape = None
        try:
            if self.home._error is not None:  # not raised to the caller: not "seen"
                raise self.home._error
            shape = self._home_shape()
            with self._lock:  # the home partition's messages go to the home session
                self._cores.setdefault(shape[1], self.home)
            while True:
                with self._lock:
                    items, self._early = self._early, []
                    if not items:
                        self._shape = shape
                        self._shaped.set()
                        if self.settings.partitions_refresh_interval is not None:
                            self._spawn(
                                self._refresh_loop(self.settings.partitions_refresh_interval)
                            )
                        return
                for many, args, fut in items:
                    try:
                        if many:
                            for core, idx in self._split(len(args[0]), args[1], shape).items():
                                await core.write_many_async(*_columns(idx, *args[:5]), args[5])
                        else:
                            d, k, h, sq, c, t = args
                            await self._route(k, shape).write_async(d, k, h, sq, c, t, fut)
                    except BadRequestError as err:  # this message's (a router's answer)
                        if fut is not None:
                            fut.set_exception(err)
                        else:
                            self._deferred = err  # the next call raises it
        except asyncio.CancelledError:
            if self._early_error is None:
                self._early_error = ClosedError(f"writer to {self.topic!r} is closed")
            self._fail_early(ClosedError("writer closed before the message was routed"))
            raise
        except WeirError as err:
            self._early_error = err
            self._fail_early(err)

    def _fail_early(self, err: WeirError) -> None:
        self._shaped.set()
        with self._lock:
            items, self._early = self._early, []
        if any(fut is None for _, _, fut in items):
            self._early_unseen = True
        for _, _, fut in items:
            if fut is not None and not fut.done():
                fut.set_exception(err)

    # ------------------------------------------------------------------ the partition count

    def _spawn(self, coro: Any) -> None:
        task = self.loop.create_task(coro, name=f"weir-partitions-{self.topic}")
        self._refreshes.add(task)
        task.add_done_callback(self._refreshes.discard)

    async def _refresh_loop(self, interval: float) -> None:
        while not self._closed:
            await asyncio.sleep(interval)
            with contextlib.suppress(WeirError):  # the write sessions report real trouble
                await self.refresh_partitions()

    async def refresh_partitions(self, timeout: float | None = 30.0) -> int:
        """Ask the broker for the topic's partition count and route by it from now on
        (also done every ``partitions_refresh_interval``); returns the count."""
        d = await self.conn.call(
            "DescribeTopic", pb.DescribeTopicRequest(topic=self.topic), timeout
        )
        n = int(d.partitions)
        shape = self._shape
        if shape is not None and n > 0 and n != shape[0] and not self._closed:
            log.info("writer to %s: %d partitions, was %d", self.topic, n, shape[0])
            self._shape = (n, shape[1])  # one assignment: writers read it without the lock
        return n

    def _core_failed(self, partition: int, core: WriterCore, err: WeirError) -> None:
        """A partition's core failed: when the broker does not know the partition any
        more, later messages route by the count it has now."""
        if not isinstance(err, UnknownPartitionError) or core is self.home:
            return
        with self._lock:
            if self._cores.get(partition) is core:
                del self._cores[partition]
                self._retired.append(core)
        if not self._closed:
            self._spawn(self._refresh_once())

    async def _refresh_once(self) -> None:
        with contextlib.suppress(WeirError):
            await self.refresh_partitions()

    def _not_connected(self, wait: float | None) -> WeirError:
        return WeirTimeoutError(
            f"routing writer to {self.topic!r} at {self.conn.endpoint} not connected after "
            f"{wait:g} s: the partition count, which routing needs, is unknown{self.home._why()}"
        )

    def _core(self, partition: int) -> WriterCore:
        """The core of ``partition``, opened on first use (from any thread)."""
        with self._lock:
            if self._closed:
                raise ClosedError(f"writer to {self.topic!r} is closed")
            core = self._cores.get(partition)
            if core is not None:
                return core
            settings = dataclasses.replace(
                self.settings, producer_id=self.producer_id, partition=partition
            )
            core = WriterCore(self.conn, self.topic, settings, self.loop, routed=True)
            core.on_failed = lambda err: self._core_failed(partition, core, err)
            self._cores[partition] = core
        if _in_loop(self.loop):
            core.start()
        else:
            self.loop.call_soon_threadsafe(core.start)  # before the core's first wake-up
        return core

    def _route(self, key: Any, shape: tuple[int, int]) -> WriterCore:
        k = None if key is None else as_bytes(key, "key")
        return self._core(self.router.partition(k or None, *shape))

    # ------------------------------------------------------------------ writing

    def write_threadsafe(
        self,
        data: Any,
        key: Any = None,
        headers: Mapping[str, str] | None = None,
        seq_no: int | None = None,
        created_at: Any = None,
        timeout: float | None = None,
        fut: AnyFuture | None = None,
    ) -> None:
        if key is None and self._keyless_direct():
            core = self.home  # the common call: no partition count needed
        else:
            _, _, size, _ = self.home._prepare(data, key, headers, seq_no, created_at)
            self.home.precheck(size, seq_no)  # bad input fails here, not once routed
            self._raise_early()
            if self._queued(False, (data, key, headers, seq_no, created_at, timeout), fut):
                return
            core = self._route(key, self._shape_threadsafe(timeout))
        core.write_threadsafe(data, key, headers, seq_no, created_at, timeout, fut)

    async def write_async(
        self,
        data: Any,
        key: Any = None,
        headers: Mapping[str, str] | None = None,
        seq_no: int | None = None,
        created_at: Any = None,
        timeout: float | None = None,
        fut: AnyFuture | None = None,
    ) -> None:
        if key is None and self._keyless_direct():
            core = self.home
        else:
            _, _, size, _ = self.home._prepare(data, key, headers, seq_no, created_at)
            self.home.precheck(size, seq_no)  # bad input fails here, not once routed
            self._raise_early()
            if self._queued(False, (data, key, headers, seq_no, created_at, timeout), fut):
                return
            core = self._route(key, await self._shape_async(timeout))
        await core.write_async(data, key, headers, seq_no, created_at, timeout, fut)

    def _split(
        self, n: int, keys: Sequence[Any] | None, shape: tuple[int, int]
    ) -> dict[WriterCore, list[int]]:
        groups: dict[WriterCore, list[int]] = defaultdict(list)
        for i in range(n):
            groups[self._route(keys[i] if keys is not None else None, shape)].append(i)
        return groups

    def write_many_threadsafe(
        self,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        headers: Sequence[Mapping[str, str] | None] | None = None,
        seq_nos: Sequence[int] | IntColumn | None = None,
        created_at: Sequence[int] | IntColumn | int | None = None,
        timeout: float | None = None,
    ) -> None:
        if keys is None and self._keyless_direct():
            self.home.write_many_threadsafe(values, keys, headers, seq_nos, created_at, timeout)
            return
        # routed per key, message by message: Arrow columns as lists
        values, keys = to_list(values), to_list(keys)
        seqs: Sequence[int] | None = to_list(seq_nos)
        created: Sequence[int] | int | None = to_list(created_at)
        if not values:
            return
        _check_lengths(len(values), keys, headers, seqs, created)
        if self._queued(True, (values, keys, headers, seqs, created, timeout), None):
            return
        for core, idx in self._split(len(values), keys, self._shape_threadsafe(timeout)).items():
            core.write_many_threadsafe(
                *_columns(idx, values, keys, headers, seqs, created), timeout
            )

    async def write_many_async(
        self,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        headers: Sequence[Mapping[str, str] | None] | None = None,
        seq_nos: Sequence[int] | IntColumn | None = None,
        created_at: Sequence[int] | IntColumn | int | None = None,
        timeout: float | None = None,
    ) -> None:
        if keys is None and self._keyless_direct():
            await self.home.write_many_async(values, keys, headers, seq_nos, created_at, timeout)
            return
        # routed per key, message by message: Arrow columns as lists
        values, keys = to_list(values), to_list(keys)
        seqs: Sequence[int] | None = to_list(seq_nos)
        created: Sequence[int] | int | None = to_list(created_at)
        if not values:
            return
        _check_lengths(len(values), keys, headers, seqs, created)
        if self._queued(True, (values, keys, headers, seqs, created, timeout), None):
            return
        shape = await self._shape_async(timeout)
        for core, idx in self._split(len(values), keys, shape).items():
            await core.write_many_async(
                *_columns(idx, values, keys, headers, seqs, created), timeout
            )

    # ------------------------------------------------------------------ flush / close

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every message written before this call is acknowledged, in every partition."""
        if self._closed:
            raise ClosedError(f"writer to {self.topic!r} is closed")
        await self._routed(timeout)
        await _all_or_first_error([c.flush(timeout) for c in self._all()])

    async def _routed(self, timeout: float | None, seen: bool = True) -> None:
        """Wait until the queued writes are routed (bounded like a flush)."""
        assert self._drain is not None
        if not self._drain.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._drain), timeout)
            except TimeoutError:
                raise WeirTimeoutError(
                    f"flush timed out: writes to {self.topic!r} wait for the writer to connect "
                    f"after {timeout:g} s{self.home._why()}"
                ) from None
        self._raise_early(seen)

    async def close(self, timeout: float | None = None) -> None:
        """Route what is queued (up to ``timeout``), close every partition's core (each
        flushes first), then stop; raises as `WriterCore.close` does."""
        if self._closed:
            return
        routed_err: WeirError | None = None
        unseen = False
        try:
            await self._routed(timeout, seen=False)
        except WeirError as err:
            routed_err, unseen = err, self._early_unseen
        finally:
            with self._lock:
                self._closed = True
            assert self._drain is not None
            self._drain.cancel()
            for t in list(self._refreshes):
                t.cancel()
        await _all_or_first_error([c.close(timeout) for c in self._all()])
        if routed_err is not None and (isinstance(routed_err, WeirTimeoutError) or unseen):
            raise routed_err


def _in_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


async def _all_or_first_error(calls: list[Any]) -> None:
    results = await asyncio.gather(*calls, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r


def _check_lengths(
    n: int,
    keys: Sequence[Any] | None,
    headers: Sequence[Any] | None,
    seq_nos: Sequence[int] | None,
    created_at: Sequence[int] | int | None,
) -> None:
    cols: list[tuple[str, Sequence[Any] | None]] = [
        ("keys", keys),
        ("headers", headers),
        ("seq_nos", seq_nos),
    ]
    if not isinstance(created_at, int):
        cols.append(("created_at", created_at))
    for name, col in cols:
        if col is not None and len(col) != n:
            raise BadRequestError(f"{name} has {len(col)} entries for {n} values")


def _columns(
    idx: list[int],
    values: Sequence[Any],
    keys: Sequence[Any] | None,
    headers: Sequence[Mapping[str, str] | None] | None,
    seq_nos: Sequence[int] | None,
    created_at: Sequence[int] | int | None,
) -> tuple[Any, Any, Any, Any, Any]:
    def pick(col: Sequence[Any] | None) -> list[Any] | None:
        return None if col is None else [col[i] for i in idx]

    created = created_at if created_at is None or isinstance(created_at, int) else pick(created_at)
    return pick(values), pick(keys), pick(headers), pick(seq_nos), created
