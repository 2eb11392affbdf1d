"""`LogCursor`: a durable subscription's cursor kept in its partition's replicated log.

In embedded mode a cursor is a row of the broker's LMDB ``subscriptions`` table
(`weir.broker.subscriptions.cursor.StoredCursor`). A replicated partition moves
between brokers, so its cursors must move with it: each is a named position of the
partition's `ReplicatedPartitionLog`, ``sub:{name}`` -> `encode_sub_position`: the
subscription's metadata (name, type, initial position, created, dead-letter policy),
the mark-delete position, the acknowledged ranges above it and the redelivery counts.
A snapshot is one managed-log entry, appended in its turn among the partition's writes
(`PartitionActor.run_change`) and acknowledged by AQ bookies before the ack's answer;
the positions are folded into the log's snapshots, so the next owner (after an
unload, a kill -9, a lost session) serves the subscription from there.

As with `StoredCursor`, an ack changes the cursor in memory at once and `persist()`
resolves once a snapshot holding it is durable; at most one snapshot is in flight per
cursor and the acks arriving meanwhile share the next one.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from weir.broker.partition_actor import PartitionActor
from weir.broker.subscriptions.cursor import StoredCursor, decode_counts, encode_counts
from weir.broker.subscriptions.ranges import RangeSet
from weir.broker.subscriptions.settings import SubscriptionMeta
from weir.errors import CorruptDataError
from weir.replication.partition_log.log import ReplicatedChange, ReplicatedPartitionLog
from weir.storage.kv import Op

PREFIX = "sub:"
_VERSION = 1
_HEAD = struct.Struct("<BIQI")  # version, meta length, mark-delete, range count


def position_key(name: str) -> str:
    """The name of a subscription's cursor among a partition's positions."""
    return PREFIX + name


def encode_sub_position(
    meta: SubscriptionMeta, mark_delete: int, acked: RangeSet, counts: dict[int, int]
) -> bytes:
    """The cursor as stored: header, metadata JSON, the ranges above mark-delete, the
    redelivery counts of offsets not yet acknowledged (acknowledged ones are dropped)."""
    raw_meta = meta.to_json()
    kept = RangeSet(list(acked))
    kept.drop_below(mark_delete)
    live = {o: n for o, n in counts.items() if n > 0 and o not in kept}
    return (
        _HEAD.pack(_VERSION, len(raw_meta), mark_delete, len(kept))
        + raw_meta
        + kept.encode()
        + encode_counts(live, mark_delete)
    )


def decode_sub_position(
    raw: bytes | memoryview,
) -> tuple[SubscriptionMeta, int, RangeSet, dict[int, int]]:
    """(metadata, mark-delete, acked ranges, redelivery counts); CorruptDataError when the
    bytes are not a cursor of this version."""
    view = memoryview(raw)
    try:
        version, meta_len, mark, nranges = _HEAD.unpack_from(view)
        if version != _VERSION:
            raise ValueError(f"cursor version {version} is not {_VERSION}")
        at = _HEAD.size
        meta = SubscriptionMeta.from_json(view[at : at + meta_len])
        at += meta_len
        acked = RangeSet.decode(view[at : at + 16 * nranges])
        if len(acked) != nranges:
            raise ValueError("range list cut short")
        counts = decode_counts(view[at + 16 * nranges :])
    except (ValueError, KeyError, TypeError, AttributeError, struct.error) as exc:
        raise CorruptDataError(f"a stored subscription cursor does not decode: {exc}") from None
    return meta, mark, acked, counts


class LogCursor(StoredCursor):
    """A `Cursor` stored as a position of a replicated partition's log (see the module
    docstring); ``meta()`` is the subscription's metadata as it is now."""

    def __init__(
        self,
        actor: PartitionActor[Any],
        name: str,
        meta: Any,
        mark_delete: int,
        acked: RangeSet | None = None,
        counts: dict[int, int] | None = None,
    ) -> None:
        super().__init__(None, b"", mark_delete, acked, counts)  # type: ignore[arg-type]
        self.actor = actor
        self.position = position_key(name)
        self._meta = meta

    def encoded(self) -> bytes:
        return encode_sub_position(self._meta(), self._mark, self._acked, self.counts)

    def drop_ops(self) -> list[Op]:
        return []  # nothing in the broker's LMDB: `drop` clears the log's position

    async def drop(self) -> None:
        """Remove the cursor from the partition's log (the subscription was deleted)."""
        plog: ReplicatedPartitionLog = self.actor.log
        key = self.position

        def prepare() -> ReplicatedChange | None:
            return plog.prepare_positions({key: None}) if key in plog.positions else None

        await self.actor.run_change(prepare)

    async def _store(self) -> None:
        plog: ReplicatedPartitionLog = self.actor.log

        def prepare() -> ReplicatedChange:
            # the cursor as it is in this turn: every ack made before it is in
            return plog.prepare_positions({self.position: self.encoded()})

        await self.actor.run_change(prepare)

    def _write(self) -> None:
        fut, self._next = self._next, None
        assert fut is not None
        self._inflight = True
        done = asyncio.get_running_loop().create_task(self._store())

        done.add_done_callback(lambda d: self._written(fut, d))
