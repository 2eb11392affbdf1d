"""Transactional producers: a transactional id, its producer number and epoch (fencing).

Kafka's model: a transactional producer names itself with a transactional id; each
time an instance starts (`TxnCoordinator.init_producer`) the id's **epoch** grows,
durably, and the transaction an older instance left open is aborted. From then on
the older instance is *fenced*: a transaction it begins, a write in one it had, and
its commit fail with ProducerFencedError. The producer number (Kafka's producer id)
is fixed per transactional id, for fronts that need a number.

Stored in the ``txn_producers`` table: transactional id -> (producer number u64,
epoch u32); the key ``\\0`` holds the next producer number.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from weir.errors import BadRequestError
from weir.storage.kv import KV, Op, put

TXN_PRODUCERS = "txn_producers"
_RECORD = struct.Struct("<QI")
_NEXT_KEY = b"\0"
_U64 = struct.Struct("<Q")
MAX_EPOCH = 0xFFFF_FFFF
MAX_TRANSACTIONAL_ID = 255


@dataclass(slots=True)
class TxnProducer:
    transactional_id: str
    number: int
    epoch: int
    open_txn: int = 0  # the id of its open transaction, 0 for none


def check_transactional_id(tid: str) -> None:
    if not isinstance(tid, str) or not tid or "\0" in tid or len(tid) > MAX_TRANSACTIONAL_ID:
        raise BadRequestError(
            f"a transactional id is 1 to {MAX_TRANSACTIONAL_ID} characters without NUL, not {tid!r}"
        )


class TransactionalProducers:
    """Every transactional id seen, with its epoch; see the module docstring."""

    def __init__(self, kv: KV) -> None:
        self._by_id: dict[str, TxnProducer] = {}
        self._next = 1
        for k, v in kv.scan(TXN_PRODUCERS):
            if k == _NEXT_KEY:
                self._next = _U64.unpack(v)[0]
                continue
            number, epoch = _RECORD.unpack(v)
            tid = k.decode()
            self._by_id[tid] = TxnProducer(tid, number, epoch)

    def get(self, tid: str) -> TxnProducer | None:
        return self._by_id.get(tid)

    def get_or_add(self, tid: str) -> TxnProducer:
        """The producer ``tid`` (added at epoch 0, in memory, if new)."""
        check_transactional_id(tid)
        p = self._by_id.get(tid)
        if p is None:
            p = self._by_id[tid] = TxnProducer(tid, 0, 0)
        return p

    def next_epoch(self, tid: str) -> tuple[TxnProducer, list[Op]]:
        """The record ``tid`` gets with its next epoch, and the ops that persist it (the
        caller commits them, then calls `installed`)."""
        check_transactional_id(tid)
        p = self._by_id.get(tid)
        number = p.number if p is not None and p.number else self._next
        epoch = (p.epoch if p is not None else 0) + 1
        if epoch > MAX_EPOCH:
            raise BadRequestError(f"transactional id {tid!r} ran out of epochs")
        ops = [put(TXN_PRODUCERS, tid.encode(), _RECORD.pack(number, epoch))]
        if number == self._next:
            ops.append(put(TXN_PRODUCERS, _NEXT_KEY, _U64.pack(number + 1)))
        return TxnProducer(tid, number, epoch, p.open_txn if p is not None else 0), ops

    def installed(self, record: TxnProducer) -> None:
        """``record`` (from `next_epoch`) is durable: it is the producer's now."""
        self._next = max(self._next, record.number + 1)
        self._by_id[record.transactional_id] = record
