"""Stored weir batches as the Batches of a YDB ReadResponse.

One stored batch has one producer and one codec, so it becomes one YDB Batch
(the SDK decodes per Batch and must never see codecs mixed). Messages whose data
were stored compressed by a YDB writer (``data_codec`` != RAW) go out untouched
with that codec, custom ones (10000-19999) and LZOP included; batches whose whole
payload is compressed (the native SDK's zstd or lz4) are decompressed by
`decode_payload`, so their messages go out RAW. The headers a write session's meta
became go back into the Batch's ``write_session_meta``.

Each message is charged an estimate that is never below its serialized size,
so a response built within a budget never exceeds it; the caller then charges
the response's real size.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from weir.protocols.ydb.conversions import SESSION_META, set_ts, split_session_meta
from weir.protocols.ydb.protos import ydb_topic_pb2
from weir.storage.batch import decode_headers, decode_payload, iter_batches
from weir.storage.codecs import Codec

# Upper bounds of the protobuf framing around one message / batch / partition's data.
MESSAGE_OVERHEAD = 72
METADATA_OVERHEAD = 12
BATCH_OVERHEAD = 48
PARTITION_OVERHEAD = 24

_MetadataItem = ydb_topic_pb2.MetadataItem
_SESSION_META = SESSION_META.encode()


def _gzip_size(data: bytes) -> int:
    """The uncompressed size a gzip member records in its trailer (ISIZE)."""
    if len(data) >= 18 and data[:2] == b"\x1f\x8b":
        return int.from_bytes(data[-4:], "little")
    return len(data)


def add_messages(
    partition_data: Any,
    chunks: list[bytes | memoryview],
    from_offset: int,
    budget: int,
    *,
    first_limit: int = 0,
) -> tuple[int, int]:
    """Append the messages at and after ``from_offset`` in ``chunks`` (concatenated stored
    batches of one partition) to ``partition_data`` while their estimated size fits in
    ``budget``; the first message goes in if it fits in ``first_limit`` instead (a message
    bigger than one response's budget still has to go somewhere).

    Returns (the offset after the last message added, the estimated bytes added).
    """
    first_limit = max(first_limit, budget)
    used = PARTITION_OVERHEAD
    pos_offset = from_offset
    batches = partition_data.batches
    ts_cache: dict[int, Timestamp] = {}
    for chunk in chunks:
        for pos, h in iter_batches(chunk, verify=False):
            if h.next_offset <= pos_offset:
                continue
            base = h.base_offset
            first = max(0, pos_offset - base)
            n = h.record_count
            pid = h.producer_id
            used += BATCH_OVERHEAD + len(pid)
            if used > (first_limit if pos_offset == from_offset else budget):
                return pos_offset, used - BATCH_OVERHEAD - len(pid)
            p = decode_payload(chunk, pos, h)
            raw = p.raw if isinstance(p.raw, bytes) else bytes(p.raw)
            doffs = list(accumulate(p.data_lens, initial=p.data_start))
            if p.key_lens is not None:
                koffs = list(accumulate(p.key_lens, initial=p.keys_start))
                groups = [
                    raw[koffs[i] : koffs[i + 1]].decode("utf-8", "replace") or pid for i in range(n)
                ]
            else:
                groups = [pid] * n
            header_offs = (
                list(accumulate(p.header_lens, initial=p.headers_start))
                if p.header_lens is not None
                else None
            )
            # one scan of the headers blob in C spares a check per message in most batches
            session_meta = header_offs is not None and raw.find(_SESSION_META, p.headers_start) >= 0
            seqs = p.seq_list()
            created = p.created_list()
            if h.data_codec != Codec.RAW:
                codec = h.data_codec
                size_of = _gzip_size if codec == Codec.GZIP else len
            else:
                codec = Codec.RAW
                size_of = len
            batch = batches.add(producer_id=pid, codec=codec)
            set_ts(batch.written_at, h.written_at)
            mds = batch.message_data
            for i in range(first, n):
                data = raw[doffs[i] : doffs[i + 1]]
                group = groups[i]
                cost = MESSAGE_OVERHEAD + len(data) + len(group)
                metadata = None
                if header_offs is not None and header_offs[i + 1] > header_offs[i]:
                    headers = decode_headers(memoryview(raw)[header_offs[i] : header_offs[i + 1]])
                    if session_meta and any(k.startswith(SESSION_META) for k in headers):
                        meta, headers = split_session_meta(headers)
                        if not batch.write_session_meta:
                            batch.write_session_meta.update(meta)
                            cost += sum(
                                METADATA_OVERHEAD + len(k) + len(v) for k, v in meta.items()
                            )
                    metadata = [
                        _MetadataItem(key=k, value=v.encode("utf-8", "surrogateescape"))
                        for k, v in headers.items()
                    ]
                    cost += sum(METADATA_OVERHEAD + len(m.key) + len(m.value) for m in metadata)
                if used + cost > (first_limit if pos_offset == from_offset else budget):
                    if not mds:
                        del batches[-1]
                    return pos_offset, used
                ms = created[i]
                ts = ts_cache.get(ms)
                if ts is None:
                    ts = ts_cache[ms] = Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)
                md = mds.add(
                    offset=base + i,
                    seq_no=seqs[i],
                    created_at=ts,
                    data=data,
                    uncompressed_size=size_of(data),
                    message_group_id=group,
                )
                if metadata:
                    md.metadata_items.extend(metadata)
                used += cost
                pos_offset = base + i + 1
    return pos_offset, used
