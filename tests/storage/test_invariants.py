"""Property tests of the storage invariants (hypothesis state machine).

- offsets are dense and increasing;
- what was acknowledged is readable byte for byte;
- a duplicate seq_no is never stored twice;
- compaction, retention, trims (deleting records up to an offset, which may fall
  inside a batch) and recovery never change what a reader sees for offsets still
  retained;
- a byte is committed to the KV at most twice (once as a head piece, at most
  once more when compaction packs it into a big blob).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from weir.storage.batch import decode_records, iter_batches
from weir.storage.batch_encoding import encode_batch
from weir.storage.incoming import validate_incoming
from weir.storage.partition import PartitionConfig
from weir.storage.store import Store

TTL = 50  # producer state outlives its last message by this long after its last write
CFG = PartitionConfig(
    low_watermark=3000, max_blob_size=6000, head_merge_fanout=3, producer_ttl_ms=TTL
)
PRODUCERS = ["", "a", "b", "c"]


class PartitionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="weir-prop-"))
        self.store = Store(self.dir)
        self.log = self.store.open_partition(1, CFG)
        self.model: dict[int, bytes] = {}  # offset -> data, for retained offsets
        self.max_seq: dict[str, int] = {}
        self.epoch: dict[str, int] = {}  # first offset since the producer's state exists
        self.last_offset: dict[str, int] = {}
        self.last_write: dict[str, int] = {}
        self.start = 0
        self.now = 1_000_000
        self.stored = 0  # bytes the writes added
        self.committed_before = 0  # bytes committed by stores closed by reopen

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(
        producer=st.sampled_from(PRODUCERS),
        sizes=st.lists(st.integers(0, 400), min_size=1, max_size=25),
        back=st.integers(0, 30),
        gap=st.integers(1, 3),
        batches=st.integers(1, 3),
    )
    def write(self, producer: str, sizes: list[int], back: int, gap: int, batches: int) -> None:
        self.now += 7
        incoming = []
        expected = []
        base = max(0, self.max_seq.get(producer, 0) - back) + 1
        for bi in range(batches):
            seqs = [base + i * gap for i in range(len(sizes))]
            base = max(1, seqs[-1] + 1 - (back // 2 if bi % 2 else 0))
            data = [
                bytes([len(self.model) % 251]) * n + f"|{producer}|{s}".encode()
                for n, s in zip(sizes, seqs, strict=True)
            ]
            incoming.append(
                encode_batch(data, producer_id=producer, seq_nos=seqs, created_at=self.now)
            )
            expected.append((seqs, data))
        offset = self.start + len(self.model)
        size_before = self.log.size_bytes
        results = self.log.write(validate_incoming(incoming), now_ms=self.now)
        self.stored += self.log.size_bytes - size_before
        for (seqs, data), res in zip(expected, results, strict=True):
            mx = self.max_seq.get(producer, 0) if producer else -1
            skip = sum(1 for s in seqs if s <= mx) if producer else 0
            assert res.skipped == skip, (res, skip)
            assert res.written == len(seqs) - skip
            if res.written:
                assert res.offset == offset
            for _s, d in zip(seqs[skip:], data[skip:], strict=True):
                self.model[offset] = d
                offset += 1
                if producer and producer not in self.max_seq and producer not in self.epoch:
                    self.epoch[producer] = offset - 1
            if producer and res.written:
                self.max_seq[producer] = seqs[-1]
                self.last_offset[producer] = offset - 1
                self.last_write[producer] = self.now

    def forget_retained(self, new_start: int) -> None:
        """Drop retained offsets; a producer with no message left is forgotten once it has
        been idle for TTL (until then a resend is still a duplicate)."""
        for o in [o for o in self.model if o < new_start]:
            del self.model[o]
        gone = [
            p
            for p, o in self.last_offset.items()
            if o < new_start and self.last_write[p] < self.now - TTL
        ]
        for p in gone:
            del self.last_offset[p]
            del self.last_write[p]
            del self.max_seq[p]
            self.epoch.pop(p, None)
        self.start = new_start

    @rule(limit=st.integers(0, 20_000), protect=st.one_of(st.none(), st.integers(0, 400)))
    def retention_by_size(self, limit: int, protect: int | None) -> None:
        self.log.config = PartitionConfig(
            low_watermark=CFG.low_watermark,
            max_blob_size=CFG.max_blob_size,
            head_merge_fanout=CFG.head_merge_fanout,
            retention_bytes=limit,
            producer_ttl_ms=TTL,
        )
        before = self.log.start_offset
        self.log.apply_retention(now_ms=self.now, protect_from=protect)
        self.log.config = CFG
        new_start = self.log.start_offset
        assert new_start >= before
        if protect is not None:
            assert new_start <= max(protect, before)
        self.forget_retained(new_start)

    @rule(age=st.integers(1, 200))
    def retention_by_age(self, age: int) -> None:
        self.log.config = PartitionConfig(
            low_watermark=CFG.low_watermark,
            max_blob_size=CFG.max_blob_size,
            head_merge_fanout=CFG.head_merge_fanout,
            retention_ms=age,
            producer_ttl_ms=TTL,
        )
        self.log.apply_retention(now_ms=self.now)
        self.log.config = CFG
        self.forget_retained(self.log.start_offset)

    @rule(data=st.data())
    def trim(self, data: st.DataObject) -> None:
        """Delete records below an offset (Kafka's DeleteRecords), anywhere in the log."""
        log = self.log
        old = log.start_offset
        before = data.draw(st.integers(max(0, old - 5), log.end_offset + 5))
        new_start = log.trim(before, now_ms=self.now)
        assert new_start == log.start_offset == max(old, min(before, log.end_offset))
        assert not log.blobs or log.blobs[0].first_offset <= new_start < log.blobs[0].end_offset
        if new_start > old:  # a trim at or below the start changes nothing, producers included
            self.forget_retained(new_start)

    @rule()
    def reopen(self) -> None:
        self.committed_before += self.store.committer.stats.bytes
        self.store.close()
        self.store = Store(self.dir)
        self.log = self.store.open_partition(1, CFG, verify_all=True)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), budget=st.integers(1, 20_000))
    def read_some(self, data: st.DataObject, budget: int) -> None:
        lo, hi = min(self.model), max(self.model)
        frm = data.draw(st.integers(lo, hi))
        res = self.log.read(frm, budget)
        assert res.chunks and res.first_offset <= frm < res.next_offset
        expect = res.first_offset
        for chunk in res.chunks:
            for pos, _ in iter_batches(chunk):
                for r in decode_records(chunk, pos):
                    assert r.offset == expect
                    assert r.data == self.model[r.offset]  # never a deleted record
                    expect += 1
        assert expect == res.next_offset

    @invariant()
    def offsets_match_model(self) -> None:
        log = self.log
        assert log.start_offset == self.start
        assert log.end_offset - log.start_offset == len(self.model)
        if self.model:
            assert sorted(self.model) == list(range(log.start_offset, log.end_offset))

    @invariant()
    def bytes_committed_at_most_twice(self) -> None:
        assert self.committed_before + self.store.committer.stats.bytes <= 2 * self.stored

    @invariant()
    def no_seq_stored_twice(self) -> None:
        # read the real records: since a producer's state was created, its seq_nos only grow
        seen: dict[str, int] = {}
        pos = self.log.start_offset
        while pos < self.log.end_offset:
            res = self.log.read(pos, 1 << 20)
            for chunk in res.chunks:
                for bpos, _ in iter_batches(chunk):
                    for r in decode_records(chunk, bpos):
                        _, producer, seq = r.data.rsplit(b"|", 2)
                        p = producer.decode()
                        if p and r.offset >= self.epoch.get(p, 0):
                            assert int(seq) > seen.get(p, -1), f"{p} seq {int(seq)} stored twice"
                            seen[p] = int(seq)
            pos = res.next_offset

    @invariant()
    def everything_retained_reads_back(self) -> None:
        pos = self.log.start_offset
        while pos < self.log.end_offset:
            res = self.log.read(pos, 50_000)
            for chunk in res.chunks:
                for bpos, _ in iter_batches(chunk):
                    for r in decode_records(chunk, bpos):
                        if r.offset >= pos:
                            assert r.data == self.model[r.offset]
            assert res.next_offset > pos
            pos = res.next_offset


PartitionMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestPartitionInvariants = PartitionMachine.TestCase
