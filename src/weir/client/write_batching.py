"""The writer's buffering and batching core: ``write()`` / ``write_many()`` validate
a message and append it to the bounded buffer (blocking, or awaiting, only while it
is full; chunking a message over the server's limit), and `_take` encodes what is
buffered into the storage batch format, one request's worth at a time."""

from __future__ import annotations

import asyncio
import contextlib
import time
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from itertools import accumulate, compress, count, islice
from operator import lt
from time import time as _time
from typing import Any

from weir.client.chunks import split as split_chunks
from weir.client.write_buffer import AnyFuture, Buffer, Sent, as_bytes
from weir.client.write_columns import (
    Block,
    IntColumn,
    is_arrow,
    is_numpy,
    joined,
    make_block,
    to_list,
)
from weir.client.writer_state import WriterState
from weir.errors import (
    BadRequestError,
    WeirError,
    WeirTimeoutError,
)
from weir.storage.batch_encoding import encode_batch

_INT_TYPES = frozenset((int, bool))


class WriteBatching(WriterState):
    """Messages into the buffer, and out of it as encoded batches."""

    def _prepare(
        self,
        data: Any,
        key: Any,
        headers: Mapping[str, str] | None,
        seq_no: int | None,
        created_at: Any,
    ) -> tuple[bytes, bytes, int, int]:
        d = as_bytes(data, "data")
        k = b"" if key is None else as_bytes(key, "key")
        size = len(d) + len(k)
        if headers is not None and not isinstance(headers, Mapping):
            raise BadRequestError(
                f"headers must be a mapping of str to str, got {type(headers).__name__}"
            )
        if created_at is None:
            ms = int(time.time() * 1000)
        elif isinstance(created_at, int | float):
            ms = int(created_at)
        elif hasattr(created_at, "timestamp"):
            ms = int(created_at.timestamp() * 1000)
        else:
            raise BadRequestError("created_at must be a datetime or ms since epoch")
        if seq_no is not None and (not isinstance(seq_no, int) or seq_no < 0):
            raise BadRequestError(f"seq_no must be a non-negative int, got {seq_no!r}")
        return d, k, size, ms

    def _limit_wait(self, timeout: float | None) -> float | None:
        return timeout if timeout is not None else self.settings.delivery_timeout

    def _limit_unknown(self, size: int, waited: float | None) -> WeirError:
        if self._error is not None:
            self._error_seen = True
            return self._error
        return WeirTimeoutError(
            f"writer to {self.topic!r} at {self.conn.endpoint} not connected after {waited:g} s: "
            f"the server's message size limit, which a message of {size} bytes needs, is "
            f"unknown{self._why()}"
        )

    def _await_limit_threadsafe(self, size: int, timeout: float | None) -> None:
        """A message bigger than the default limit waits for the server's (a thread's call)."""
        wait = self._limit_wait(timeout)
        if not self._inited.wait(wait) or self._error is not None:
            raise self._limit_unknown(size, wait)

    async def _await_limit_async(self, size: int, timeout: float | None) -> None:
        wait = self._limit_wait(timeout)
        try:
            await asyncio.wait_for(self._init_done.wait(), wait)
        except TimeoutError:
            raise self._limit_unknown(size, wait) from None
        self._raise_error()

    def _append(
        self,
        d: bytes,
        k: bytes,
        headers: Mapping[str, str] | None,
        seq_no: int | None,
        ms: int,
        size: int,
        fut: AnyFuture | None,
    ) -> bool:
        """Append under the lock; True when the sender must be woken."""
        manual = seq_no is not None
        if self._manual_seq is None:
            self._manual_seq = manual
        elif self._manual_seq != manual:
            raise BadRequestError(
                "either give every message a seq_no or none (automatic numbering)"
            )
        b = self._buf
        if manual:
            assert seq_no is not None
            if seq_no <= self._last_manual_seq:
                raise BadRequestError(
                    f"seq_no {seq_no} is not above the previous {self._last_manual_seq}"
                )
            self._last_manual_seq = seq_no
            b.seqs.append(seq_no)
        i = len(b.data)
        b.data.append(d)
        b.created.append(ms)
        if k:
            b.keys[i] = k
        if headers:
            b.headers[i] = headers
        if fut is not None:
            b.futures[i] = fut
        self._buf_bytes += size
        self._unacked += 1
        self._unacked_bytes += size
        self._written += 1
        if self._sender_idle:
            self._sender_idle = False
            return True
        return False

    def precheck(self, size: int, seq_no: int | None) -> None:
        """Refuse now a message that the limit known so far refuses: too big without
        chunking, or to be chunked yet given a seq_no (chunks need automatic ones)."""
        if size <= self.limit.bytes or self.limit.must_wait(size):
            return
        if not self.settings.chunking:
            self.limit.check(size)
        elif seq_no is not None:
            raise BadRequestError(
                f"a message of {size} bytes is over the limit of {self.limit.bytes} and would be "
                "chunked; chunked messages need automatic seq_nos (give none)"
            )

    def _pieces(
        self, d: bytes, k: bytes, headers: Mapping[str, str] | None, seq_no: int | None, size: int
    ) -> list[tuple[bytes, Mapping[str, str] | None, int]]:
        """The message as it is, or (chunking on, over the limit) its chunks: (data, headers, size)."""
        self.precheck(size, seq_no)
        if size <= self.limit.bytes:
            return [(d, headers, size)]
        room = self.limit.bytes - len(k)
        if room <= 0:
            self.limit.check(size)  # the key alone is too big: refused
        return [(c, h, len(c) + len(k)) for c, h in split_chunks(d, room, headers)]

    def _append_pieces(
        self,
        pieces: list[tuple[bytes, Mapping[str, str] | None, int]],
        k: bytes,
        seq_no: int | None,
        ms: int,
        fut: AnyFuture | None,
    ) -> bool:
        """Append a message or all its chunks (consecutive: one seq_no each) under the lock;
        the future goes with the last chunk. True when the sender must be woken."""
        if len(pieces) == 1:
            d, h, size = pieces[0]
            return self._append(d, k, h, seq_no, ms, size, fut)
        wake = False
        last = len(pieces) - 1
        for i, (d, h, size) in enumerate(pieces):
            wake = self._append(d, k, h, None, ms, size, fut if i == last else None) or wake
        return wake

    def _full(self) -> bool:
        s = self.settings
        return self._unacked > 0 and (
            self._unacked >= s.max_buffer_messages or self._unacked_bytes >= s.max_buffer_bytes
        )

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
        """Buffer one message from any thread but the loop's; blocks while the buffer is full."""
        if (
            type(data) is bytes
            and key is None
            and headers is None
            and seq_no is None
            and created_at is None
            and fut is None
            and len(data) <= self.limit.bytes
        ):
            # The common call, inlined: a lock and three appends.
            ms = int(_time() * 1000)
            size = len(data)
            with self._lock:
                ok = (
                    self._error is None
                    and not self._closing
                    and not self._closed
                    and self._manual_seq is not True
                    and not self._full()
                )
                if ok:
                    self._manual_seq = False
                    b = self._buf
                    b.data.append(data)
                    b.created.append(ms)
                    self._buf_bytes += size
                    self._unacked += 1
                    self._unacked_bytes += size
                    self._written += 1
                    wake = self._sender_idle
                    self._sender_idle = False
            if ok:
                self._wrote_threadsafe(wake)
                return
        d, k, size, ms = self._prepare(data, key, headers, seq_no, created_at)
        if self.limit.must_wait(size):
            self._await_limit_threadsafe(size, timeout)
        pieces = self._pieces(d, k, headers, seq_no, size)
        with self._lock:
            self._check_usable()
            if self._full():
                deadline = None if timeout is None else time.monotonic() + timeout
                while self._full():
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise WeirTimeoutError(
                            f"writer buffer full ({self._unacked} messages, {self._unacked_bytes} bytes) "
                            f"for {timeout} s"
                        )
                    self._wait_space_locked(remaining)
                    self._check_usable()
            wake = self._append_pieces(pieces, k, seq_no, ms, fut)
        self._wrote_threadsafe(wake)

    def _prepare_many(
        self,
        values: Sequence[Any],
        keys: Sequence[Any] | None,
        headers: Sequence[Mapping[str, str] | None] | None,
        seq_nos: Sequence[int] | None,
        created_at: Sequence[int] | int | None,
    ) -> tuple[list[bytes], list[bytes] | None, list[int], list[int]]:
        n = len(values)
        for name, col in (("keys", keys), ("headers", headers), ("seq_nos", seq_nos)):
            if col is not None and len(col) != n:
                raise BadRequestError(f"{name} has {len(col)} entries for {n} values")
        data = [v if type(v) is bytes else as_bytes(v, "data") for v in values]
        ks = (
            [k if type(k) is bytes else b"" if k is None else as_bytes(k, "key") for k in keys]
            if keys is not None
            else None
        )
        sizes = list(map(len, data))
        if ks is not None:
            sizes = [a + len(b) for a, b in zip(sizes, ks, strict=True)]
        if created_at is None:
            created = [int(_time() * 1000)] * n
        elif isinstance(created_at, int):
            created = [created_at] * n
        else:
            if len(created_at) != n:
                raise BadRequestError(f"created_at has {len(created_at)} entries for {n} values")
            created = [int(c) for c in created_at]
        if headers is not None:
            for h in headers:
                if h is not None and not isinstance(h, Mapping):
                    raise BadRequestError(
                        f"headers must be mappings of str to str, got {type(h).__name__}"
                    )
        if seq_nos is not None:
            # by column, in C (map/all over the list): a Python test per row was a third
            # of a keyed Spark sink's client CPU
            if (not _INT_TYPES.issuperset(map(type, seq_nos)) or seq_nos[0] < 0) and any(
                not isinstance(s, int) or s < 0 for s in seq_nos
            ):
                raise BadRequestError("seq_nos must be non-negative ints")
            if not all(map(lt, seq_nos, islice(seq_nos, 1, None))):
                raise BadRequestError("seq_nos must be strictly increasing")
        return data, ks, sizes, created

    def _append_many(
        self,
        data: list[bytes],
        ks: list[bytes] | None,
        headers: Sequence[Mapping[str, str] | None] | None,
        seq_nos: Sequence[int] | None,
        created: list[int],
        sizes: list[int],
    ) -> bool:
        """Append a column of messages under the lock; True when the sender must be woken."""
        manual = seq_nos is not None
        if self._manual_seq is None:
            self._manual_seq = manual
        elif self._manual_seq != manual:
            raise BadRequestError(
                "either give every message a seq_no or none (automatic numbering)"
            )
        b = self._buf
        if manual:
            assert seq_nos is not None
            if seq_nos[0] <= self._last_manual_seq:
                raise BadRequestError(
                    f"seq_no {seq_nos[0]} is not above the previous {self._last_manual_seq}"
                )
            self._last_manual_seq = seq_nos[-1]
            b.seqs.extend(seq_nos)
        base = len(b.data)
        b.data.extend(data)
        b.created.extend(created)
        if ks is not None:
            b.keys.update(compress(zip(count(base), ks), ks))  # the non-empty ones, in C
        if headers is not None:
            b.headers.update(compress(zip(count(base), headers), headers))  # type: ignore[arg-type]  # (no None left)
        total = sum(sizes)
        self._buf_bytes += total
        self._unacked += len(data)
        self._unacked_bytes += total
        self._written += len(data)
        wake = self._sender_idle
        self._sender_idle = False
        return wake

    def write_many_threadsafe(
        self,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        headers: Sequence[Mapping[str, str] | None] | None = None,
        seq_nos: Sequence[int] | IntColumn | None = None,
        created_at: Sequence[int] | IntColumn | int | None = None,
        timeout: float | None = None,
    ) -> None:
        """Buffer a column of messages at once (may overshoot the bound, like one write)."""
        if is_arrow(values):
            block = self._block(values, keys, headers, seq_nos, created_at)
            if block is not None:
                if block.count and self.limit.must_wait(block.largest):
                    self._await_limit_threadsafe(block.largest, timeout)
                if self._block_fits(block):
                    with self._lock:
                        self._wait_room_locked(timeout)
                        done = self._append_block(block)
                    if done is not None:
                        self._wrote_threadsafe(done)
                        return
            values, keys = to_list(values), to_list(keys)
        # numpy columns (with lists) as lists for the per-message path
        seq_nos, created_at = to_list(seq_nos), to_list(created_at)
        assert not is_numpy(seq_nos) and not is_numpy(created_at)
        if not values:
            return
        data, ks, sizes, created = self._prepare_many(values, keys, headers, seq_nos, created_at)
        biggest = max(sizes)
        if self.limit.must_wait(biggest):
            self._await_limit_threadsafe(biggest, timeout)
        if self.settings.chunking and biggest > self.limit.bytes:
            for i, v in enumerate(data):  # one by one: the big ones are chunked
                self.write_threadsafe(v, *_row(i, ks, headers, seq_nos, created), timeout)
            return
        self.limit.check(biggest)
        with self._lock:
            self._wait_room_locked(timeout)
            wake = self._append_many(data, ks, headers, seq_nos, created, sizes)
        self._wrote_threadsafe(wake)

    def _wait_room_locked(self, timeout: float | None) -> None:
        """Under the lock: wait (driving or awaiting acks) while the buffer is full."""
        self._check_usable()
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._full():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise WeirTimeoutError(f"writer buffer full for {timeout} s")
            self._wait_space_locked(remaining)
            self._check_usable()

    def _block(
        self,
        values: Any,
        keys: Any,
        headers: Any,
        seq_nos: Any,
        created_at: Any,
    ) -> Block | None:
        """Arrow columns checked and held as a `Block`; None when the per-message path
        must take them (headers, keys not in Arrow)."""
        if headers is not None or (keys is not None and not is_arrow(keys)):
            return None
        return make_block(values, keys, seq_nos, created_at, int(_time() * 1000))

    def _block_fits(self, block: Block) -> bool:
        """No message of the block needs chunking or a refusal (those go one by one)."""
        if not block.count:
            return False
        biggest = block.largest
        if biggest <= self.limit.bytes:
            return True
        if not self.settings.chunking:
            self.limit.check(biggest)
        return False

    def _append_block(self, block: Block) -> bool | None:
        """Under the lock: hold the block (after the blocks before it) and return whether
        the sender must be woken; None when messages already buffered one by one must go
        first (the block then takes the per-message path behind them)."""
        if self._buf.data:
            return None
        manual = block.seqs is not None
        if self._manual_seq is None:
            self._manual_seq = manual
        elif self._manual_seq != manual:
            raise BadRequestError(
                "either give every message a seq_no or none (automatic numbering)"
            )
        if block.seqs is not None:
            first = int(block.seqs[0])
            if first <= self._last_manual_seq:
                raise BadRequestError(
                    f"seq_no {first} is not above the previous {self._last_manual_seq}"
                )
            self._last_manual_seq = int(block.seqs[-1])
        self._blocks.append(block)
        n, total = block.count, block.nbytes
        self._buf_bytes += total
        self._unacked += n
        self._unacked_bytes += total
        self._written += n
        wake = self._sender_idle
        self._sender_idle = False
        return wake

    async def write_many_async(
        self,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        headers: Sequence[Mapping[str, str] | None] | None = None,
        seq_nos: Sequence[int] | IntColumn | None = None,
        created_at: Sequence[int] | IntColumn | int | None = None,
        timeout: float | None = None,
    ) -> None:
        if is_arrow(values):
            block = self._block(values, keys, headers, seq_nos, created_at)
            if block is not None:
                if block.count and self.limit.must_wait(block.largest):
                    await self._await_limit_async(block.largest, timeout)
                if self._block_fits(block) and await self._append_block_async(block, timeout):
                    return
            values, keys = to_list(values), to_list(keys)
        # numpy columns (with lists) as lists for the per-message path
        seq_nos, created_at = to_list(seq_nos), to_list(created_at)
        assert not is_numpy(seq_nos) and not is_numpy(created_at)
        if not values:
            return
        data, ks, sizes, created = self._prepare_many(values, keys, headers, seq_nos, created_at)
        biggest = max(sizes)
        if self.limit.must_wait(biggest):
            await self._await_limit_async(biggest, timeout)
        if self.settings.chunking and biggest > self.limit.bytes:
            for i, v in enumerate(data):  # one by one: the big ones are chunked
                await self.write_async(v, *_row(i, ks, headers, seq_nos, created), timeout)
            return
        self.limit.check(biggest)
        deadline = None if timeout is None else self.loop.time() + timeout
        while True:
            with self._lock:
                self._check_usable()
                if not self._full():
                    wake = self._append_many(data, ks, headers, seq_nos, created, sizes)
                    break
                self._space_event.clear()
            remaining = None if deadline is None else deadline - self.loop.time()
            if remaining is not None and remaining <= 0:
                raise WeirTimeoutError(f"writer buffer full for {timeout} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._space_event.wait(), remaining)
        if wake:
            self._wake.set()

    async def _append_block_async(self, block: Block, timeout: float | None) -> bool:
        """Hold the block once the buffer has room; False when it must take the
        per-message path (see `_append_block`)."""
        deadline = None if timeout is None else self.loop.time() + timeout
        while True:
            with self._lock:
                self._check_usable()
                if not self._full():
                    wake = self._append_block(block)
                    break
                self._space_event.clear()
            remaining = None if deadline is None else deadline - self.loop.time()
            if remaining is not None and remaining <= 0:
                raise WeirTimeoutError(f"writer buffer full for {timeout} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._space_event.wait(), remaining)
        if wake is None:
            return False
        if wake:
            self._wake.set()
        return True

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
        """Buffer one message from the loop thread; waits while the buffer is full."""
        d, k, size, ms = self._prepare(data, key, headers, seq_no, created_at)
        if self.limit.must_wait(size):
            await self._await_limit_async(size, timeout)
        pieces = self._pieces(d, k, headers, seq_no, size)
        deadline = None if timeout is None else self.loop.time() + timeout
        while True:
            with self._lock:
                self._check_usable()
                if not self._full():
                    wake = self._append_pieces(pieces, k, seq_no, ms, fut)
                    break
                self._space_event.clear()
            remaining = None if deadline is None else deadline - self.loop.time()
            if remaining is not None and remaining <= 0:
                raise WeirTimeoutError(f"writer buffer full for {timeout} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._space_event.wait(), remaining)
        if wake:
            self._wake.set()

    def _take(self) -> list[Sent]:
        """Encode what is buffered into batches for one request (called in the loop thread)."""
        s = self.settings
        if self._blocks:
            return self._take_block()
        with self._lock:
            b = self._buf
            if not b.data:
                return []
            cum = list(accumulate(b.sizes()))
            n = max(1, bisect_right(cum, s.max_request_bytes))  # how many fit one request
            if n == len(b.data):
                taken, self._buf = b, Buffer()
            else:
                taken = b.split(n)
                cum = cum[:n]
            self._buf_bytes -= cum[-1]
            manual = bool(self._manual_seq)
            first_auto = self._next_seq
            if not manual:
                self._next_seq += n
        out: list[Sent] = []
        start = 0
        base = 0
        while start < n:
            # one batch: up to max_batch_bytes and max_batch_messages, at least one message
            end = bisect_right(cum, base + s.max_batch_bytes, lo=start)
            end = min(max(end, start + 1), start + s.max_batch_messages, n)
            whole = start == 0 and end == n
            seqs = taken.seqs[start:end] if manual else None
            first_seq = seqs[0] if seqs else first_auto + start
            idx = range(start, end)
            encoded = encode_batch(
                taken.data if whole else taken.data[start:end],
                producer_id=self.producer_id,
                first_seq_no=first_seq,
                seq_nos=seqs,
                created_at=taken.created if whole else taken.created[start:end],
                keys=[taken.keys.get(i, b"") for i in idx] if taken.keys else None,
                headers=[taken.headers.get(i) for i in idx] if taken.headers else None,
                codec=s.codec,
                view=True,
            )
            futures = [taken.futures.get(i) for i in idx] if taken.futures else None
            out.append(Sent(encoded, end - start, cum[end - 1] - base, first_seq, seqs, futures))
            base = cum[end - 1]
            start = end
        return out

    def _take_block(self) -> list[Sent]:
        """One request's worth of the oldest blocks (and so of the buffer: blocks are
        older than what it holds), encoded from their columns."""
        s = self.settings
        parts: list[Block] = []
        with self._lock:
            room = s.max_request_bytes
            taken = 0
            while self._blocks:
                block = self._blocks[0]
                start, end, nbytes = block.take(room, not parts)
                if end > start:
                    parts.append(block.part(start, end))
                    room -= nbytes
                    taken += nbytes
                if block.pos < block.count:
                    break  # the request is full
                self._blocks.popleft()
            first_auto = self._next_seq
            if parts and parts[0].seqs is None:
                self._next_seq += sum(p.count for p in parts)
            self._buf_bytes -= taken
        if not parts:
            return []
        return joined(parts, first_auto).encode(
            self.producer_id, s.max_batch_bytes, s.max_batch_messages, s.codec
        )


def _row(
    i: int,
    keys: list[bytes] | None,
    headers: Sequence[Mapping[str, str] | None] | None,
    seq_nos: Sequence[int] | None,
    created: list[int],
) -> tuple[Any, Any, Any, Any]:
    """Message ``i`` of write_many's columns as write()'s key, headers, seq_no, created_at."""
    return (
        keys[i] if keys is not None and keys[i] else None,
        headers[i] if headers is not None else None,
        seq_nos[i] if seq_nos is not None else None,
        created[i],
    )
