"""`write_many` of Arrow columns: messages held as columns until they are encoded.

A bulk producer with its messages in Arrow arrays (the Spark sink) would otherwise
make a bytes object per value and per key, and `write_many` would check, store and
later join them one by one. Here a binary column stays what Arrow has, one data
buffer and an offsets array: it is checked once per column (no nulls, the seq_nos
non-negative and increasing, by numpy), held in the writer as a `Block`, and cut
into batches encoded straight from the buffers (`encode_batch_columns`), byte for
byte the batches the per-message path makes of the same messages.

pyarrow is imported only when a caller hands Arrow arrays in, and numpy when columns are
written at all (`import weir` stays quick: every `weir` command pays for it).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from typing_extensions import TypeIs

from weir.client.write_buffer import Sent
from weir.errors import BadRequestError
from weir.storage.batch_columns import encode_batch_columns
from weir.storage.codecs import Codec

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    NDArray = np.ndarray[Any, Any]
else:
    NDArray = Any  # numpy is imported where a column is handled: the `weir` command never does
ArrowColumn = Any  # a pyarrow Array or ChunkedArray (pyarrow has no type stubs)
IntColumn = NDArray  # a numpy array of ints


def is_arrow(col: Any) -> bool:
    """Is ``col`` a pyarrow Array or ChunkedArray (without importing pyarrow)?"""
    t = type(col)
    return t.__module__.startswith("pyarrow") and hasattr(col, "to_pylist")


def is_numpy(col: object) -> TypeIs[NDArray]:
    """Is ``col`` a numpy array (without importing numpy: if it is not imported, none is)?"""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(col, np.ndarray)


def to_list(col: Any) -> Any:
    """A column as `write_many`'s per-message path takes it (Arrow and numpy arrays to
    lists of Python objects)."""
    if is_numpy(col):
        return col.tolist()
    return col.to_pylist() if is_arrow(col) else col


@dataclass
class Block:
    """Messages from one `write_many` of Arrow columns, not yet encoded; `take` consumes
    them from the front, one request's worth at a time."""

    data: memoryview
    data_ends: NDArray  # int64, n + 1: message i's data is data[ends[i]:ends[i + 1]]
    keys: memoryview | None
    key_ends: NDArray | None
    seqs: NDArray | None  # int64; None: automatic seq_nos, given when taken
    created: int | NDArray
    cum: NDArray  # int64, n + 1: the sizes (data + key) of the first i messages
    pos: int = 0

    @property
    def count(self) -> int:
        return len(self.cum) - 1

    @property
    def nbytes(self) -> int:
        return int(self.cum[-1])

    @property
    def largest(self) -> int:
        """The largest message's size (data + key) of a block that holds some."""
        import numpy as np

        return int(np.diff(self.cum).max())

    def take(self, room: int, at_least_one: bool) -> tuple[int, int, int]:
        """Consume the messages from ``pos`` that fit ``room`` bytes (one at least when
        ``at_least_one``): (start, end, their bytes). The cut `WriteBatching._take`
        makes of buffered messages."""
        import numpy as np

        cum = self.cum
        start = self.pos
        end = int(np.searchsorted(cum, cum[start] + room, side="right")) - 1
        end = min(max(end, start + 1 if at_least_one else start), self.count)
        self.pos = end
        return start, end, int(cum[end] - cum[start])

    def part(self, start: int, end: int) -> Block:
        """Messages ``[start, end)`` as a block of their own (views, no copy)."""
        d = self.data_ends[start : end + 1]
        k = None if self.key_ends is None else self.key_ends[start : end + 1]
        return Block(
            self.data[int(d[0]) : int(d[-1])],
            d - d[0],
            None if self.keys is None or k is None else self.keys[int(k[0]) : int(k[-1])],
            None if k is None else k - k[0],
            None if self.seqs is None else self.seqs[start:end],
            self.created if isinstance(self.created, int) else self.created[start:end],
            self.cum[start : end + 1] - self.cum[start],
        )

    def encode(
        self, producer_id: str, max_batch_bytes: int, max_batch_messages: int, codec: Codec
    ) -> list[Sent]:
        """The whole block as batches (up to max_batch_bytes and max_batch_messages
        each, at least one message), encoded from the columns; ``seqs`` must be set."""
        import numpy as np

        assert self.seqs is not None
        cum = self.cum
        out: list[Sent] = []
        s, end = 0, self.count
        while s < end:
            e = int(np.searchsorted(cum, cum[s] + max_batch_bytes, side="right")) - 1
            e = min(max(e, s + 1), s + max_batch_messages, end)
            d0, d1 = int(self.data_ends[s]), int(self.data_ends[e])
            keys = key_lens = None
            if self.keys is not None and self.key_ends is not None:
                k0, k1 = int(self.key_ends[s]), int(self.key_ends[e])
                keys = self.keys[k0:k1]
                key_lens = np.diff(self.key_ends[s : e + 1])
            created = self.created if isinstance(self.created, int) else self.created[s:e]
            sq = self.seqs[s:e]
            encoded = encode_batch_columns(
                self.data[d0:d1],
                np.diff(self.data_ends[s : e + 1]),
                producer_id=producer_id,
                seq_nos=sq,
                created_at=created,
                keys=keys,
                key_lens=key_lens,
                codec=codec,
            )
            out.append(Sent(encoded, e - s, int(cum[e] - cum[s]), int(sq[0]), None, None))
            s = e
        return out


def joined(parts: list[Block], first_auto: int) -> Block:
    """Consecutive parts of blocks as one (a request's messages, so a batch may span two
    `write_many` calls as it does for lists); automatic seq_nos from ``first_auto``."""
    import numpy as np

    if len(parts) == 1:
        b = parts[0]
    else:

        def ends(lens: list[NDArray]) -> NDArray:
            out = np.zeros(sum(map(len, lens)) + 1, dtype=np.int64)
            np.cumsum(np.concatenate(lens), out=out[1:])
            return out

        any_keys = any(p.keys is not None for p in parts)
        created: int | NDArray
        if all(isinstance(p.created, int) for p in parts) and len({p.created for p in parts}) == 1:
            created = parts[0].created
        else:
            created = np.concatenate(
                [
                    np.full(p.count, p.created, dtype=np.int64)
                    if isinstance(p.created, int)
                    else p.created
                    for p in parts
                ]
            )
        b = Block(
            memoryview(b"".join(p.data for p in parts)),
            ends([np.diff(p.data_ends) for p in parts]),
            memoryview(b"".join(p.keys for p in parts if p.keys is not None)) if any_keys else None,
            ends(
                [
                    np.diff(p.key_ends) if p.key_ends is not None else np.zeros(p.count, np.int64)
                    for p in parts
                ]
            )
            if any_keys
            else None,
            None if parts[0].seqs is None else np.concatenate([p.seqs for p in parts]),
            created,
            ends([np.diff(p.cum) for p in parts]),
        )
    if b.seqs is None:
        b.seqs = np.arange(first_auto, first_auto + b.count, dtype=np.int64)
    return b


def _as_binary(col: Any, what: str) -> Any:
    """A binary, large binary or string Arrow column as one binary array."""
    import pyarrow as pa

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    t = col.type
    if pa.types.is_string(t):
        return col.cast(pa.binary())
    if pa.types.is_large_string(t):
        return col.cast(pa.large_binary())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return col
    raise BadRequestError(f"message {what} must be bytes or str, got Arrow {t}")


def _buffers(col: Any) -> tuple[memoryview, NDArray]:
    """A binary column's data buffer and its offsets (int64, from 0)."""
    import numpy as np
    import pyarrow as pa

    dtype: Any = np.int64 if pa.types.is_large_binary(col.type) else np.int32
    n = len(col)
    bufs = col.buffers()
    size = np.dtype(dtype).itemsize
    offs = np.frombuffer(bufs[1], dtype=dtype, count=n + 1, offset=col.offset * size)
    ends = offs.astype(np.int64)
    data = memoryview(bufs[2]) if bufs[2] is not None else memoryview(b"")
    data = data[int(ends[0]) : int(ends[-1])]
    ends -= ends[0]
    return data, ends


def _seq_column(seq_nos: Any, n: int) -> NDArray:
    """seq_nos as int64, checked by column with `write_many`'s errors."""
    import numpy as np

    if isinstance(seq_nos, range):
        arr = np.arange(seq_nos.start, seq_nos.stop, seq_nos.step, dtype=np.int64)
    elif is_arrow(seq_nos):
        if seq_nos.null_count:
            raise BadRequestError("seq_nos must be non-negative ints")
        arr = np.asarray(seq_nos.to_numpy(zero_copy_only=False))
    else:
        arr = np.asarray(seq_nos)
    if len(arr) != n:
        raise BadRequestError(f"seq_nos has {len(arr)} entries for {n} values")
    if arr.dtype.kind not in "iu" or (n and int(arr.min()) < 0):
        raise BadRequestError("seq_nos must be non-negative ints")
    arr = arr.astype(np.int64, copy=False)
    if n > 1 and not bool((arr[1:] > arr[:-1]).all()):
        raise BadRequestError("seq_nos must be strictly increasing")
    return arr


def make_block(
    values: pa.Array | pa.ChunkedArray,
    keys: Any,
    seq_nos: Sequence[int] | NDArray | None,
    created_at: Any,
    now_ms: int,
) -> Block:
    """Check Arrow columns as `write_many` checks lists (the same errors) and hold them."""
    import numpy as np

    n = len(values)
    vals = _as_binary(values, "data")
    if vals.null_count:
        raise BadRequestError("message data must be bytes or str, got NoneType")
    data, data_ends = _buffers(vals)
    sizes = np.diff(data_ends)
    kview = kends = None
    if keys is not None:
        if len(keys) != n:
            raise BadRequestError(f"keys has {len(keys)} entries for {n} values")
        ks = _as_binary(keys, "key")
        if ks.null_count:  # a null key is an empty one (Arrow leaves a null's bytes open)
            import pyarrow as pa
            import pyarrow.compute as pc

            ks = pc.fill_null(ks, pa.scalar(b"", ks.type))
        kview, kends = _buffers(ks)
        sizes = sizes + np.diff(kends)
    cum = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=cum[1:])
    seqs = None if seq_nos is None else _seq_column(seq_nos, n)
    created: int | NDArray
    if created_at is None:
        created = now_ms
    elif isinstance(created_at, int):
        created = created_at
    else:
        if len(created_at) != n:
            raise BadRequestError(f"created_at has {len(created_at)} entries for {n} values")
        created = np.asarray(to_list(created_at), dtype=np.int64)
    return Block(data, data_ends, kview, kends, seqs, created, cum)
