"""Encode a batch from columns (numpy lengths, contiguous blobs) instead of one bytes
object per record: the same bytes `weir.storage.batch_encoding.encode_batch` makes from lists.

A bulk producer whose records already sit in contiguous buffers (the Spark sink's
Arrow batches: a binary column is one data buffer and an offsets array) so encodes
a batch with numpy over the columns and one copy of the blobs, no Python per record.
Headers are not taken here (they are rare; the per-record path has them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from weir.errors import BadRequestError
from weir.storage.batch import (
    FLAG_CREATED,
    FLAG_CREATED64,
    FLAG_KEYS,
    FLAG_SEQ64,
    FLAG_SEQ_SPARSE,
    I64_MAX,
    I64_MIN,
    U64_MAX,
)
from weir.storage.batch_encoding import assemble
from weir.storage.codecs import Codec

Blob = bytes | memoryview
if TYPE_CHECKING:
    import numpy as np

    NDArray = np.ndarray[Any, Any]
else:
    NDArray = Any  # numpy arrays; numpy is not imported here (`import weir` stays quick)


def encode_batch_columns(
    data: Blob,
    data_lens: NDArray,
    *,
    producer_id: str = "",
    seq_nos: NDArray,
    created_at: int | NDArray = 0,
    keys: Blob | None = None,
    key_lens: NDArray | None = None,
    codec: Codec = Codec.RAW,
) -> bytes:
    """One batch of ``len(data_lens)`` records: record i's data is the next
    ``data_lens[i]`` bytes of ``data`` (and its key the next ``key_lens[i]`` of ``keys``).
    ``seq_nos`` (int64, strictly increasing, the caller checked) and ``created_at`` (ms,
    one for all or int64 per record) as `encode_batch` takes them; the result is
    byte-identical to `encode_batch` of the same records as lists."""
    count = len(data_lens)
    if count == 0:
        raise BadRequestError("a batch needs at least one record")
    if len(seq_nos) != count:
        raise BadRequestError("seq_nos and data differ in length")
    flags = 0
    cols: list[bytes] = []
    first_seq = int(seq_nos[0])
    last_seq = int(seq_nos[-1])
    if first_seq < 0 or last_seq > U64_MAX:
        raise BadRequestError("seq_no out of range 0..2**64-1")
    if last_seq - first_seq != count - 1:
        flags |= FLAG_SEQ_SPARSE
        deltas = seq_nos - first_seq
        if int(deltas[-1]) > 0xFFFF_FFFF:
            flags |= FLAG_SEQ64
            cols.append(deltas.astype("<u8").tobytes())
        else:
            cols.append(deltas.astype("<u4").tobytes())
    if isinstance(created_at, int):
        created_base = created_at
    else:
        if len(created_at) != count:
            raise BadRequestError("created_at and data differ in length")
        created_base = int(created_at[0])
        cdeltas = created_at - created_base
        if cdeltas.any():
            flags |= FLAG_CREATED
            if int(cdeltas.min()) < -(1 << 31) or int(cdeltas.max()) >= (1 << 31):
                flags |= FLAG_CREATED64
                cols.append(cdeltas.astype("<i8").tobytes())
            else:
                cols.append(cdeltas.astype("<i4").tobytes())
    if not I64_MIN <= created_base <= I64_MAX:
        raise BadRequestError("created_at out of range")
    blobs: list[Blob] = []
    if keys is not None and key_lens is not None and key_lens.any():
        if len(key_lens) != count:
            raise BadRequestError("keys and data differ in length")
        flags |= FLAG_KEYS
        cols.append(key_lens.astype("<u4").tobytes())
        blobs.append(keys)
    cols.append(data_lens.astype("<u4").tobytes())
    raw = b"".join([*cols, *blobs, data])
    return assemble(
        raw, flags, count, first_seq, last_seq, created_base, producer_id, codec, int(Codec.RAW)
    )
