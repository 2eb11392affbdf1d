"""Property tests of a partition's transaction state (hypothesis state machine).

Plain writes and writes in up to three open transactions interleave; transactions
commit or abort; retention runs; the store is closed and opened again (recovery).
After every step:

- read uncommitted, every stored message is there, in offset order (markers are not);
- read committed, exactly the plain messages and those of committed transactions
  before the last stable offset are there, none of an aborted or open transaction;
- the last stable offset is the first offset of the oldest open transaction (else the end);
- retention never removes an offset at or past the last stable offset.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from weir.storage.batch import FLAG_CONTROL, decode_records, iter_batches
from weir.storage.batch_encoding import encode_batch
from weir.storage.incoming import validate_incoming
from weir.storage.partition import PartitionConfig
from weir.storage.store import Store

CFG = PartitionConfig(low_watermark=1500, max_blob_size=3000, head_merge_fanout=3)
TXNS = [1, 2, 3]


class TxnMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="weir-txn-prop-"))
        self.store = Store(self.dir)
        self.log = self.store.open_partition(1, CFG)
        self.n = 0
        self.stored: dict[int, tuple[bytes, int]] = {}  # offset -> (data, txn or 0)
        self.open: dict[int, int] = {}  # txn -> its first offset
        self.outcome: dict[int, bool] = {}  # ended txn id -> committed
        self.next_txn = {t: t for t in TXNS}  # slot -> the id of its current transaction
        self.markers: set[int] = set()

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _write(self, count: int, txn: int) -> None:
        data = []
        for _ in range(count):
            self.n += 1
            data.append(b"m%d" % self.n + b"." * 60)
        batch = validate_incoming([encode_batch(data, created_at=1)])
        (res,) = self.log.write(batch, now_ms=1, txn_ids=[txn] if txn else None)
        for i, d in enumerate(data):
            self.stored[res.offset + i] = (d, txn)
        if txn and txn not in self.open:
            self.open[txn] = res.offset

    @rule(count=st.integers(1, 6))
    def plain(self, count: int) -> None:
        self._write(count, 0)

    @rule(slot=st.sampled_from(TXNS), count=st.integers(1, 6))
    def in_txn(self, slot: int, count: int) -> None:
        self._write(count, self.next_txn[slot])

    @precondition(lambda self: bool(self.open))
    @rule(data=st.data(), commit=st.booleans())
    def end(self, data: st.DataObject, commit: bool) -> None:
        txn = data.draw(st.sampled_from(sorted(self.open)))
        change = self.log.prepare_marker(txn, commit)
        assert change is not None
        self.log._commit(change)
        self.markers.add(change.end_offset - 1)
        del self.open[txn]
        self.outcome[txn] = commit
        slot = next(s for s, t in self.next_txn.items() if t == txn)
        self.next_txn[slot] = txn + len(TXNS)

    @rule()
    def retention(self) -> None:
        lso = self.log.stable_offset
        cfg = PartitionConfig(
            low_watermark=1500, max_blob_size=3000, head_merge_fanout=3, retention_bytes=1
        )
        self.log.config = cfg
        try:
            self.log.apply_retention(now_ms=2)
        finally:
            self.log.config = CFG
        assert self.log.start_offset <= lso
        for o in [o for o in self.stored if o < self.log.start_offset]:
            del self.stored[o]
        self.markers = {m for m in self.markers if m >= self.log.start_offset}

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = Store(self.dir)
        self.log = self.store.open_partition(1, CFG)

    def _read(self, committed: bool) -> list[tuple[int, bytes]]:
        out = []
        pos = self.log.start_offset
        stop = self.log.stable_offset if committed else self.log.end_offset
        while pos < stop:
            res = self.log.read(pos, 700, committed=committed)
            assert res.next_offset > pos
            for chunk in res.chunks:
                for bpos, h in iter_batches(chunk):
                    assert not h.flags & FLAG_CONTROL, "a marker reached a reader"
                    out += [
                        (r.offset, r.data) for r in decode_records(chunk, bpos) if r.offset >= pos
                    ]
            pos = res.next_offset
        return out

    @invariant()
    def stable_offset_is_the_oldest_open_transaction(self) -> None:
        want = min(self.open.values(), default=self.log.end_offset)
        assert self.log.stable_offset == want

    @invariant()
    def readers_see_what_they_should(self) -> None:
        everything = sorted((o, d) for o, (d, _) in self.stored.items())
        assert self._read(committed=False) == everything
        lso = self.log.stable_offset
        visible = sorted(
            (o, d)
            for o, (d, t) in self.stored.items()
            if o < lso and (t == 0 or self.outcome.get(t) is True)
        )
        assert self._read(committed=True) == visible
        assert set(self.log.txns.markers) == self.markers


TxnMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestTxnInvariants = TxnMachine.TestCase
