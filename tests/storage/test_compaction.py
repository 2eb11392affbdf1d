"""Compaction of one partition against a dict: the view plus the log's tail folds into
exactly what every write folds into, offsets are kept, a run publishes atomically."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weir.chunk_headers import CHUNK_COUNT, CHUNK_ID, CHUNK_UUID
from weir.errors import ClosedError
from weir.storage import compaction
from weir.storage.batch import decode_records, iter_batches
from weir.storage.batch_encoding import encode_batch
from weir.storage.compaction import (
    CompactedView,
    CompactionSettings,
    compact_partition,
    load_view,
    partition_reader,
)
from weir.storage.incoming import validate_incoming
from weir.storage.partition import PartitionLog
from weir.storage.store import Store

Write = tuple[bytes, bytes, dict[str, str] | None]  # key, data (b"": tombstone), headers


def write(log: PartitionLog, msgs: list[Write]) -> None:
    log.write(
        validate_incoming(
            [
                encode_batch(
                    [d for _, d, _ in msgs],
                    keys=[k for k, _, _ in msgs],
                    headers=[h for _, _, h in msgs],
                )
            ]
        )
    )


def records(
    chunks: list[bytes | memoryview], from_offset: int = 0
) -> Iterator[tuple[int, bytes, bytes, dict[str, str]]]:
    for c in chunks:
        for pos, _ in iter_batches(c):
            for r in decode_records(c, pos):
                if r.offset >= from_offset:
                    yield r.offset, r.key, r.data, r.headers


def compacted_read(
    store: Store, log: PartitionLog, v: CompactedView | None, budget: int = 700, floor: int = 0
) -> list[tuple[int, bytes, bytes, dict[str, str]]]:
    """What a compacted reader gets: the view from offset 0 (the trim floor) in small
    reads, then the log. Every record returned counts, even one below the offset asked."""
    out = []
    pos = floor
    if v is not None:
        while pos < v.position:
            with store.kv.snapshot() as view:
                chunks, _, nxt = v.read(view, pos, budget, floor)
                got = list(records([bytes(c) for c in chunks]))
            out.extend(got)
            assert nxt > pos or got, "a view read made no progress"
            pos = nxt
    pos = max(pos, log.start_offset)
    while pos < log.end_offset:
        res = log.read(pos, budget)
        out.extend(records(res.chunks))
        pos = res.next_offset
    return out


def fold(items: list[tuple[int, bytes, bytes, dict[str, str]]]) -> dict[bytes, bytes]:
    d: dict[bytes, bytes] = {}
    for _, k, data, _ in items:
        if not k:
            continue
        if data:
            d[k] = data
        else:
            d.pop(k, None)
    return d


def run(
    store: Store,
    log: PartitionLog,
    old: CompactedView | None,
    cfg: CompactionSettings,
    **kw: object,
) -> CompactedView:
    new = compact_partition(
        store.kv,
        store.committer,
        log.log_id,
        old,
        log.end_offset,
        cfg,
        read=partition_reader(log),
        **kw,  # type: ignore[arg-type]
    )
    if old is not None:
        store.committer.commit(old.drop_ops())
    return new


ops = st.lists(
    st.one_of(
        st.lists(
            st.tuples(st.sampled_from([b"", b"a", b"b", b"c", b"d", b"e"]), st.binary(max_size=6)),
            min_size=1,
            max_size=8,
        ),
        st.just("compact"),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops, st.booleans(), st.sampled_from([64, 300, 1 << 20]))
def test_a_compacted_read_folds_into_what_every_write_folds_into(
    steps: list[object], drop_tombstones: bool, blob_bytes: int
) -> None:
    cfg = CompactionSettings(
        delete_retention_ms=0 if drop_tombstones else None, blob_bytes=blob_bytes, commit_bytes=400
    )
    now = 1 << 62 if drop_tombstones else None  # far future: every tombstone is past retention
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "d")
        try:
            log = store.open_partition(7)
            truth: dict[bytes, bytes] = {}
            stored: dict[int, tuple[bytes, bytes]] = {}
            view: CompactedView | None = None
            for step in steps:
                if step == "compact":
                    view = run(store, log, view, cfg, now_ms=now)
                    continue
                assert isinstance(step, list)
                first = log.end_offset
                write(log, [(k, d, None) for k, d in step])
                for i, (k, d) in enumerate(step):
                    stored[first + i] = (k, d)
                    if k:
                        if d:
                            truth[k] = d
                        else:
                            truth.pop(k, None)
            got = compacted_read(store, log, view)
            assert fold(got) == truth
            offsets = [o for o, *_ in got]
            assert offsets == sorted(set(offsets)), "offsets repeat or go back"
            for o, k, d, _ in got:  # each record sits at the offset it was written at
                assert stored[o] == (k, d)
            if view is not None:
                inside = [r for r in got if r[0] < view.position]
                assert all(k for _, k, _, _ in inside), "a keyless message is in the view"
                live = {k for _, k, d, _ in inside if d}
                assert len(live) == view.meta.keys == len([r for r in inside if r[2]])
                if drop_tombstones:
                    assert view.meta.tombstones == 0 and all(d for _, _, d, _ in inside)
                # a restart finds the same view, and nothing else
                with store.kv.snapshot() as kv:
                    again, stray = load_view(kv, 7)
                assert again is not None and again.blobs == view.blobs and not stray
        finally:
            store.close()


def test_exactly_the_latest_of_each_of_1000_keys_stays(store: Store) -> None:
    log = store.open_partition(1)
    for b in range(100):  # 100,000 messages, each key written 100 times
        write(log, [(b"key-%d" % (i % 1000), b"v%d-%d" % (b, i), None) for i in range(1000)])
    view = run(store, log, None, CompactionSettings())
    with store.kv.snapshot() as kv:
        chunks, _, nxt = view.read(kv, 0, 1 << 30)
        got = list(records([bytes(c) for c in chunks]))
    assert nxt == view.position == 100_000
    assert len(got) == 1000 == view.meta.keys
    assert {k: d for _, k, d, _ in got} == {b"key-%d" % i: b"v99-%d" % i for i in range(1000)}
    assert [o for o, *_ in got] == list(range(99_000, 100_000))  # their own offsets
    assert view.meta.messages_before == 100_000 and view.meta.messages_after == 1000
    assert view.meta.bytes_after < view.meta.bytes_before / 50


def test_keyless_messages_are_left_out_unless_kept(store: Store) -> None:
    msgs: list[Write] = [(b"", b"x", None), (b"k", b"1", None), (b"", b"y", None)]
    log, other = store.open_partition(2), store.open_partition(12)
    write(log, msgs)
    write(other, msgs)
    dropped = run(store, log, None, CompactionSettings())
    kept = run(store, other, None, CompactionSettings(retain_keyless=True))
    with store.kv.snapshot() as kv:
        assert [r[2] for r in records(kept.read(kv, 0, 1 << 20)[0])] == [b"x", b"1", b"y"]
    assert (dropped.meta.keys, dropped.meta.keyless, kept.meta.keyless) == (1, 0, 2)


def test_tombstones_stay_for_the_delete_retention_then_go(store: Store) -> None:
    log = store.open_partition(3)
    write(log, [(b"a", b"1", None), (b"b", b"2", None), (b"a", b"", None)])
    written = log.blobs[-1].max_written
    hour = 3600_000
    kept = run(
        store, log, None, CompactionSettings(delete_retention_ms=hour), now_ms=written + hour - 1
    )
    with store.kv.snapshot() as kv:
        assert [(r[1], r[2]) for r in records(kept.read(kv, 0, 1 << 20)[0])] == [
            (b"b", b"2"),
            (b"a", b""),
        ]
    assert (kept.meta.keys, kept.meta.tombstones) == (1, 1)
    gone = run(
        store, log, kept, CompactionSettings(delete_retention_ms=hour), now_ms=written + hour + 1
    )
    with store.kv.snapshot() as kv:
        assert [(r[1], r[2]) for r in records(gone.read(kv, 0, 1 << 20)[0])] == [(b"b", b"2")]
    assert (gone.meta.keys, gone.meta.tombstones) == (1, 0)


def chunk(u: str, i: int, n: int) -> dict[str, str]:
    return {CHUNK_UUID: u, CHUNK_ID: str(i), CHUNK_COUNT: str(n)}


def test_a_chunked_message_is_kept_whole(store: Store) -> None:
    log = store.open_partition(4)
    write(log, [(b"k", b"old", None), (b"k", b"p0", chunk("u1", 0, 2)), (b"j", b"x", None)])
    write(log, [(b"k", b"p1", chunk("u1", 1, 2)), (b"m", b"q0", chunk("u2", 0, 3))])
    write(log, [(b"j", b"n0", chunk("u3", 0, 2)), (b"j", b"y", None)])  # u3: superseded, left
    view = run(store, log, None, CompactionSettings())
    with store.kv.snapshot() as kv:
        got = [(o, d) for o, _, d, _ in records(view.read(kv, 0, 1 << 20)[0])]
    # u1 whole (both chunks), u2 incomplete but its key's last (it may finish in the tail)
    assert got == [(1, b"p0"), (3, b"p1"), (4, b"q0"), (6, b"y")]
    write(log, [(b"m", b"q1", chunk("u2", 1, 3)), (b"m", b"q2", chunk("u2", 2, 3))])
    view2 = run(store, log, view, CompactionSettings())
    with store.kv.snapshot() as kv:
        got = [(o, d) for o, _, d, _ in records(view2.read(kv, 0, 1 << 20)[0])]
    assert got == [(1, b"p0"), (3, b"p1"), (4, b"q0"), (6, b"y"), (7, b"q1"), (8, b"q2")]


def test_a_run_cut_short_is_never_served_and_is_cleaned_up(store: Store) -> None:
    log = store.open_partition(5)
    write(log, [(b"k%d" % i, b"a", None) for i in range(50)])
    first = run(store, log, None, CompactionSettings())
    write(log, [(b"k%d" % i, b"b", None) for i in range(50)])
    stop = False

    def hook(step: str) -> None:
        nonlocal stop
        if step == "blob-batch":
            stop = True  # a crash after some blobs of the new generation are durable

    with pytest.raises(ClosedError):
        compact_partition(
            store.kv,
            store.committer,
            5,
            first,
            log.end_offset,
            CompactionSettings(blob_bytes=100, commit_bytes=100),
            read=partition_reader(log),
            hook=hook,
            cancelled=lambda: stop,
        )
    with store.kv.snapshot() as kv:
        again, stray = load_view(kv, 5)
        assert again is not None and again.generation == first.generation  # the old view
        assert again.blobs == first.blobs
        assert stray, "the new generation's blobs are found as strays"
    store.committer.commit(stray)
    with store.kv.snapshot() as kv:
        assert load_view(kv, 5)[1] == []
        assert len(list(kv.scan(compaction.COMPACTED, b""))) == len(first.blobs)


trim_ops = st.lists(
    st.one_of(
        st.lists(
            st.tuples(st.sampled_from([b"", b"a", b"b", b"c", b"d"]), st.binary(max_size=4)),
            min_size=1,
            max_size=8,
        ),
        st.tuples(st.just("trim"), st.floats(0, 1)),
        # a run, and a trim while it runs: after its first pass, or as it writes blobs
        st.tuples(
            st.just("compact"), st.sampled_from(["", "scanned", "blob-batch"]), st.floats(0, 1)
        ),
    ),
    max_size=20,
)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trim_ops)
def test_a_trim_deletes_from_the_view_too_even_during_a_run(steps: list[object]) -> None:
    """DeleteRecords semantics: after a trim to F, a compacted read is the latest of each
    key among the records at F and above, and never returns a record below F, whether
    the trim came before, after, or in the middle of a run."""
    cfg = CompactionSettings(blob_bytes=64, commit_bytes=100)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "d")
        try:
            log = store.open_partition(9)
            stored: dict[int, tuple[bytes, bytes]] = {}
            view: CompactedView | None = None
            floor = 0

            def trim(frac: float) -> None:
                nonlocal floor
                before = floor + int((log.end_offset - floor) * frac)
                start = log.trim(before)
                if start > floor:  # the broker commits the floor with the trim
                    store.committer.commit([compaction.trim_floor_op(9, start)])
                    floor = start

            for step in steps:
                if isinstance(step, list):
                    first = log.end_offset
                    write(log, [(k, d, None) for k, d in step])
                    stored.update({first + i: kd for i, kd in enumerate(step)})
                    continue
                assert isinstance(step, tuple)
                if step[0] == "trim":
                    trim(step[1])
                    continue
                _, at, frac = step
                done = False

                def hook(s: str, at: str = at, frac: float = frac) -> None:
                    nonlocal done
                    if s == at and not done:
                        done = True
                        trim(frac)

                view = run(store, log, view, cfg, hook=hook, floor=lambda: floor)
            got = compacted_read(store, log, view, floor=floor)
            assert all(o >= floor for o, *_ in got), "a trimmed record was served"
            truth = fold([(o, k, d, {}) for o, (k, d) in sorted(stored.items()) if o >= floor])
            assert fold(got) == truth
            offsets = [o for o, *_ in got]
            assert offsets == sorted(set(offsets))
            for o, k, d, _ in got:
                assert stored[o] == (k, d)
            with store.kv.snapshot() as kv:
                assert compaction.load_trim_floor(kv, 9) == floor  # a restart finds it
        finally:
            store.close()
