"""The connector's planning and task code, called directly against a real server.

Spark runs this code in its Python workers; here each option, offset form and failure path
is one quick call instead of one Spark job (test_read, test_stream and test_write run the
same code through Spark). Nothing is mocked: a real weir server, real topics.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
import pickle
import time
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import StringType, StructField, StructType

import weir
from tests.conftest import ServerProcess
from tests.spark.topics import Rec, produce, read_topic
from weir.errors import BadRequestError, DataLossError, UnknownTopicError
from weir.spark.batch_reader import WeirBatchReader, WeirFilteringBatchReader
from weir.spark.offsets import Bounds, cap, resolve, split
from weir.spark.options import ReaderOptions, WriterOptions
from weir.spark.scan import ScanSettings, TopicRange, read_range
from weir.spark.schema import SCHEMA
from weir.spark.source import WeirDataSource
from weir.spark.stream_reader import WeirStreamReader
from weir.spark.writer import (
    Layout,
    WeirBatchWriter,
    WeirStreamWriter,
    WrittenMessage,
    write_task,
)

# ------------------------------------------------------------------ options


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({}, False, "option topic is required"),
        ({"topic": " , "}, False, "option topic is required"),
        ({"topic": "a,a"}, False, "names a topic twice"),
        ({"topic": "t", "minPartitions": "0"}, False, "minPartitions: must be at least 1"),
        ({"topic": "t", "minPartitions": "two"}, False, "expected an integer"),
        ({"topic": "t", "maxBytesPerFetch": "10"}, False, "at least 1024"),
        ({"topic": "t", "failOnDataLoss": "maybe"}, False, "expected true or false"),
        ({"topic": "t", "pushFilters": "2"}, False, "expected true or false"),
        ({"topic": "t", "startingOffsets": "{oops"}, False, "expected earliest, latest or JSON"),
        ({"topic": "t", "startingOffsets": "[1]"}, False, "expected a JSON object"),
        ({"topic": "t", "startingOffsets": '{"u": {"0": 1}}'}, False, "not one of the topics"),
        ({"topic": "t", "startingOffsets": '{"t": 5}'}, False, "must map partitions to offsets"),
        ({"topic": "t", "startingOffsets": '{"t": {"x": 5}}'}, False, "'x' is not a number"),
        ({"topic": "t", "startingOffsets": '{"t": {"-1": 5}}'}, False, "offset >= -2"),
        ({"topic": "t", "startingOffsets": '{"t": {"0": -3}}'}, False, "offset >= -2"),
        ({"topic": "t", "startingOffsets": '{"t": {"0": true}}'}, False, "offset >= -2"),
        ({"topic": "t", "startingOffsets": '{"t": {"0": 1.5}}'}, False, "offset >= -2"),
        ({"topic": "t", "endingOffsets": '{"t": {"0": -2}}'}, False, "offset >= -1"),
        ({"topic": "t", "endingOffsets": "earliest"}, False, "earliest is not a valid end"),
        (
            {"topic": "t", "startingTimestamp": "5", "startingOffsets": "earliest"},
            False,
            "either startingOffsets or startingTimestamp",
        ),
        ({"topic": "t", "startingTimestamp": "-1"}, False, "must be at least 0"),
        ({"topic": "t", "maxOffsetsPerTrigger": "5"}, False, "is for streaming reads"),
        ({"topic": "t", "consumer": "c"}, False, "consumer is for streaming reads"),
        ({"topic": "t", "endingOffsets": "latest"}, True, "are for batch reads"),
        ({"topic": "t", "endingTimestamp": "5"}, True, "are for batch reads"),
        ({"topic": "t", "maxOffsetsPerTrigger": "0"}, True, "must be at least 1"),
        ({"topic": "t", "offsetRanges": "{oops"}, False, "offsetRanges: expected JSON"),
        ({"topic": "t", "offsetRanges": '{"t": 1}'}, False, r"\[topic, partition, start, end\]"),
        ({"topic": "t", "offsetRanges": '[["u", 0, 1, 2]]'}, False, "with a topic read"),
        ({"topic": "t", "offsetRanges": '[["t", 0, 5, 2]]'}, False, "0 <= start <= end"),
        ({"topic": "t", "offsetRanges": '[["t", -1, 0, 2]]'}, False, "got \\['t', -1"),
        ({"topic": "t", "offsetRanges": '[["t", 0, true, 2]]'}, False, "got \\['t', 0, True"),
        (
            {"topic": "t", "offsetRanges": "[]", "startingOffsets": "earliest"},
            False,
            "either offsetRanges or startingOffsets",
        ),
        ({"topic": "t", "offsetRanges": "[]"}, True, "offsetRanges is for batch reads"),
    ],
)
def test_every_bad_reader_option_is_refused_naming_it(
    options: dict[str, str], streaming: bool, message: str
) -> None:
    lower = {k.lower(): v for k, v in options.items()}  # as Spark hands them over
    with pytest.raises(BadRequestError, match=message):
        ReaderOptions.parse(lower, streaming=streaming)


def test_reader_options_are_parsed_with_their_defaults() -> None:
    o = ReaderOptions.parse({"topic": "t"}, streaming=False)
    assert (o.endpoint, o.topics, o.starting, o.ending) == (
        "127.0.0.1:2136",
        ["t"],
        "earliest",
        "latest",
    )
    assert o.fail_on_data_loss and not o.push_filters and o.consumer is None
    assert (o.max_bytes_per_fetch, o.min_partitions, o.max_offsets_per_trigger) == (
        4 << 20,
        None,
        None,
    )
    assert ReaderOptions.parse({"topic": "t"}, streaming=True).starting == "latest"
    o = ReaderOptions.parse(
        {
            "endpoint": " h:1 ",
            "topic": " a , b ",
            "startingoffsets": " EARLIEST ",
            "failondataloss": "No",
            "minpartitions": "3",
            "maxbytesperfetch": "2048",
            "maxoffsetspertrigger": "7",
            "consumer": " lag ",
        },
        streaming=True,
    )
    assert (o.endpoint, o.topics, o.starting, o.fail_on_data_loss) == (
        "h:1",
        ["a", "b"],
        "earliest",
        False,
    )
    assert (o.min_partitions, o.max_bytes_per_fetch, o.max_offsets_per_trigger) == (3, 2048, 7)
    assert o.consumer == "lag"


def test_writer_options() -> None:
    o = WriterOptions.parse({"topic": " t ", "writeid": " nightly "})
    assert (o.endpoint, o.topic, o.write_id) == ("127.0.0.1:2136", "t", "nightly")
    assert WriterOptions.parse({"topic": "t"}).write_id is None
    with pytest.raises(BadRequestError, match="writes to one topic"):
        WriterOptions.parse({"topic": "a,b"})


def test_a_schema_given_to_the_source_is_refused() -> None:
    source = WeirDataSource({"topic": "t"})
    assert source.name() == "weir" and source.schema() == SCHEMA
    other = StructType([StructField("value", StringType())])
    with pytest.raises(BadRequestError, match="fixed schema"):
        source.reader(other)
    with pytest.raises(BadRequestError, match="fixed schema"):
        source.streamReader(other)


# ------------------------------------------------------------------ offsets


def test_json_offsets_resolve_against_the_partitions_of_the_topic() -> None:
    bounds = {("t", 0): Bounds(5, 50), ("t", 1): Bounds(0, 9), ("u", 0): Bounds(2, 3)}
    spec = {"t": {0: 7, 1: -1}, "u": {0: -2}}
    assert resolve(spec, bounds, "startingOffsets", True) == {("t", 0): 7, ("t", 1): 9, ("u", 0): 2}
    assert resolve({"t": {1: 4}}, bounds, "endingOffsets", False) == {
        ("t", 0): 50,  # left out: latest, for an end
        ("t", 1): 4,
        ("u", 0): 3,
    }
    assert resolve("earliest", bounds, "startingOffsets", True)[("t", 0)] == 5
    with pytest.raises(BadRequestError, match="has no partition 2"):
        resolve({"t": {2: 0}}, bounds, "startingOffsets", True)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 7)),
        st.tuples(st.integers(0, 10**6), st.integers(0, 10**4)),
        min_size=1,
    ),
    st.integers(1, 50_000),
)
def test_cap_spends_the_whole_budget_in_proportion_and_never_passes_an_end(
    parts: dict[tuple[str, int], tuple[int, int]], max_rows: int
) -> None:
    start = {tp: s for tp, (s, _) in parts.items()}
    end = {tp: s + n for tp, (s, n) in parts.items()}
    out = cap(start, end, max_rows)
    total = sum(end[tp] - start[tp] for tp in end)
    assert all(start[tp] <= out[tp] <= end[tp] for tp in end)
    assert sum(out[tp] - start[tp] for tp in end) == min(max_rows, total)
    if total > max_rows:  # each share within one record of its exact proportion
        for tp in end:
            exact = (end[tp] - start[tp]) * max_rows / total
            assert abs((out[tp] - start[tp]) - exact) < 1


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 500)), min_size=1, max_size=6),
    st.one_of(st.none(), st.integers(1, 40)),
)
def test_split_cuts_ranges_into_contiguous_pieces_covering_them(
    spans: list[tuple[int, int]], min_partitions: int | None
) -> None:
    ranges = [(("t", i), s, s + n) for i, (s, n) in enumerate(spans)]
    out = split(ranges, min_partitions)
    assert out == split(ranges, min_partitions)  # deterministic: a replay plans the same
    for tp, s, e in ranges:
        pieces = [(a, b) for t, a, b in out if t == tp]
        if e == s:
            assert pieces == []  # empty ranges make no task
            continue
        assert pieces[0][0] == s and pieces[-1][1] == e
        assert all(a < b for a, b in pieces)
        assert all(b == a2 for (_, b), (a2, _) in itertools.pairwise(pieces))
    records = sum(n for _, n in spans)
    if min_partitions is not None:
        assert len(out) >= min(min_partitions, records)


# ------------------------------------------------------------------ batch planning


def _batch_reader(server: ServerProcess, topic: str, **options: str) -> WeirBatchReader:
    opts = {"endpoint": server.endpoint, "topic": topic}
    opts.update({k.lower(): v for k, v in options.items()})
    return WeirDataSource(opts).reader(SCHEMA)


def _ranges(parts: Any) -> list[tuple[int, int, int]]:
    return [(r.partition, r.start, r.end) for r in parts]


def _after_clock_passes(ms: int) -> None:
    while time.time() * 1000 < ms:  # the next write lands in a later millisecond
        time.sleep(0.001)


@pytest.fixture
def two_times(client: weir.Client, topic_name: str) -> tuple[str, int]:
    """A 2-partition topic: 3 + 2 records, then (from the returned ms on) 1 + 2 more."""
    client.create_topic(topic_name, partitions=2)
    produce(
        client, topic_name, {0: [Rec(b"a0"), Rec(b"a1"), Rec(b"a2")], 1: [Rec(b"b0"), Rec(b"b1")]}
    )
    cut = max(p.last_write_ms for p in client.describe_topic(topic_name).partition_info) + 1
    _after_clock_passes(cut)
    produce(client, topic_name, {0: [Rec(b"a3")], 1: [Rec(b"b2"), Rec(b"b3")]})
    return topic_name, cut


def test_batch_ranges_from_timestamps(
    weir_server: ServerProcess, two_times: tuple[str, int]
) -> None:
    topic, cut = two_times
    since = _batch_reader(weir_server, topic, startingTimestamp=str(cut))
    assert _ranges(since.partitions()) == [(0, 3, 4), (1, 2, 4)]
    until = _batch_reader(weir_server, topic, endingTimestamp=str(cut))
    assert _ranges(until.partitions()) == [(0, 0, 3), (1, 0, 2)]
    none = _batch_reader(weir_server, topic, startingTimestamp=str(cut), endingTimestamp=str(cut))
    assert none.partitions() == []  # empty ranges make no task
    json_start = json.dumps({topic: {"0": 1, "1": -1}})
    assert _ranges(_batch_reader(weir_server, topic, startingOffsets=json_start).partitions()) == [
        (0, 1, 4)
    ]
    split_up = _batch_reader(weir_server, topic, minPartitions="4").partitions()
    assert _ranges(split_up) == [(0, 0, 2), (0, 2, 4), (1, 0, 2), (1, 2, 4)]


def test_pushed_filters_narrow_the_ranges_and_come_back_when_they_cannot(
    weir_server: ServerProcess, two_times: tuple[str, int]
) -> None:
    topic, cut = two_times

    def plan(*filters: Any) -> tuple[list[Any], list[tuple[int, int, int]]]:
        r = _batch_reader(weir_server, topic, pushFilters="true")
        assert isinstance(r, WeirFilteringBatchReader)
        left = list(r.pushFilters(list(filters)))
        return left, _ranges(r.partitions())

    p, o, w = ("partition",), ("offset",), ("written_at",)
    assert plan(EqualTo(p, 1)) == ([], [(1, 0, 4)])
    assert plan(EqualNullSafe(p, 0), IsNotNull(p)) == ([], [(0, 0, 4)])
    assert plan(In(p, (0, 1)), EqualTo(p, 1)) == ([], [(1, 0, 4)])  # both hold: intersected
    assert plan(Not(EqualTo(p, 0))) == ([], [(1, 0, 4)])
    assert plan(GreaterThan(o, 0), LessThan(o, 3), IsNotNull(o)) == ([], [(0, 1, 3), (1, 1, 3)])
    assert plan(GreaterThanOrEqual(o, 2), LessThanOrEqual(o, 2)) == ([], [(0, 2, 3), (1, 2, 3)])
    assert plan(EqualTo(o, 3)) == ([], [(0, 3, 4), (1, 3, 4)])
    assert plan(EqualNullSafe(o, 0)) == ([], [(0, 0, 1), (1, 0, 1)])
    # what the ranges cannot express exactly goes back to Spark
    kept = [
        EqualTo(p, "1"),
        In(p, (0, "x")),
        Not(GreaterThan(o, 1)),
        Not(EqualTo(o, 1)),
        EqualTo(o, True),
        In(o, (1, 2)),
        EqualTo(("key",), b"k"),
    ]
    left, ranges = plan(*kept)
    assert left == kept and ranges == [(0, 0, 4), (1, 0, 4)]
    # written_at: narrowed through the time index, and still checked by Spark
    at = dt.datetime.fromtimestamp(cut / 1000, dt.UTC)
    assert plan(GreaterThanOrEqual(w, at)) == ([GreaterThanOrEqual(w, at)], [(0, 3, 4), (1, 2, 4)])
    assert plan(LessThan(w, at)) == ([LessThan(w, at)], [(0, 0, 3), (1, 0, 2)])
    just_before = at - dt.timedelta(microseconds=500)  # within the millisecond before the cut
    assert plan(GreaterThan(w, just_before))[1] == [(0, 3, 4), (1, 2, 4)]
    assert plan(LessThanOrEqual(w, just_before))[1] == [(0, 0, 3), (1, 0, 2)]
    first_at = {0: 3, 1: 2}  # the first offsets written at or after the cut
    assert all(s >= first_at[p] for p, s, _ in plan(EqualTo(w, at))[1])
    naive = dt.datetime(2020, 1, 1)  # no time zone: not pushed
    assert plan(GreaterThan(w, naive)) == ([GreaterThan(w, naive)], [(0, 0, 4), (1, 0, 4)])


def test_a_batch_task_reads_exactly_its_range(
    weir_server: ServerProcess, two_times: tuple[str, int]
) -> None:
    topic, _ = two_times
    r = _batch_reader(weir_server, topic)
    r2 = pickle.loads(pickle.dumps(r))  # as Spark ships it to an executor
    (batch,) = list(r2.read(TopicRange(topic, 1, 1, 3)))
    assert batch.column("value").to_pylist() == [b"b1", b"b2"]
    assert list(r2.read(InputPartition(0))) == []  # Spark's placeholder when nothing is read


# ------------------------------------------------------------------ data loss in a task


@pytest.fixture
def trimmed(client: weir.Client, topic_name: str) -> str:
    """A 1-partition topic whose first 20 offsets retention removed (it now starts at >= 20)."""
    client.create_topic(topic_name, partitions=1, retention_bytes=2000)
    produce(client, topic_name, {0: [Rec(b"old-%d" % i) for i in range(20)]})
    produce(client, topic_name, {0: [Rec(b"n" * 90) for _ in range(30)]})
    deadline = time.monotonic() + 30
    while client.describe_topic(topic_name).partition_info[0].start_offset < 20:
        assert time.monotonic() < deadline, "retention did not run"
        time.sleep(0.05)
    return topic_name


def test_a_range_retention_removed_fails_the_task_or_is_skipped_with_a_warning(
    weir_server: ServerProcess,
    client: weir.Client,
    trimmed: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    info = client.describe_topic(trimmed).partition_info[0]
    start, end = info.start_offset, info.end_offset
    with pytest.raises(DataLossError, match=f"offsets 0..{start - 1} of topic") as err:
        list(
            read_range(
                ScanSettings(weir_server.endpoint, True, 4 << 20), TopicRange(trimmed, 0, 0, end)
            )
        )
    assert f"{start} records lost" in str(err.value) and "failOnDataLoss=false" in str(err.value)
    with caplog.at_level(logging.WARNING, logger="weir.spark"):
        got = list(
            read_range(
                ScanSettings(weir_server.endpoint, False, 4 << 20), TopicRange(trimmed, 0, 0, end)
            )
        )
    assert pa.Table.from_batches(got).column("offset").to_pylist() == list(range(start, end))
    assert "Skipping them (failOnDataLoss=false)" in caplog.text
    # a range past the partition's end (the topic was dropped and made again, shorter)
    with pytest.raises(DataLossError, match=f"now ends at offset {end}"):
        list(
            read_range(
                ScanSettings(weir_server.endpoint, True, 4 << 20),
                TopicRange(trimmed, 0, start, end + 5),
            )
        )
    assert (
        list(
            read_range(
                ScanSettings(weir_server.endpoint, True, 4 << 20), TopicRange(trimmed, 0, 5, 5)
            )
        )
        == []
    )


# ------------------------------------------------------------------ stream planning


def _stream_reader(server: ServerProcess, topic: str, **options: str) -> WeirStreamReader:
    opts = {"endpoint": server.endpoint, "topic": topic}
    opts.update({k.lower(): v for k, v in options.items()})
    return WeirDataSource(opts).streamReader(SCHEMA)


def test_stream_start_positions(weir_server: ServerProcess, two_times: tuple[str, int]) -> None:
    topic, cut = two_times
    latest = _stream_reader(weir_server, topic)
    assert latest.initialOffset() == {topic: {"0": 4, "1": 4}}
    earliest = _stream_reader(weir_server, topic, startingOffsets="earliest")
    assert earliest.initialOffset() == {topic: {"0": 0, "1": 0}}
    by_json = _stream_reader(weir_server, topic, startingOffsets=json.dumps({topic: {"1": 3}}))
    assert by_json.initialOffset() == {topic: {"0": 0, "1": 3}}
    by_time = _stream_reader(weir_server, topic, startingTimestamp=str(cut))
    assert by_time.initialOffset() == {topic: {"0": 3, "1": 2}}
    for r in (latest, earliest, by_json, by_time):
        r.stop()


def test_micro_batches_are_capped_and_available_now_stops_at_the_start_time_end(
    weir_server: ServerProcess, client: weir.Client, two_times: tuple[str, int]
) -> None:
    topic, _ = two_times
    r = _stream_reader(weir_server, topic, startingOffsets="earliest", maxOffsetsPerTrigger="3")
    assert isinstance(r.getDefaultReadLimit(), ReadMaxRows)
    assert r.reportLatestOffset() is None
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()  # the target: today's ends, 4 and 4
    produce(client, topic, {0: [Rec(b"late")]})  # after the start: not for this run
    ends = []
    for _ in range(4):
        end = r.latestOffset(start, r.getDefaultReadLimit())
        ends.append(end)
        start = end
    assert ends == [
        {topic: {"0": 2, "1": 1}},
        {topic: {"0": 3, "1": 3}},
        {topic: {"0": 4, "1": 4}},
        {topic: {"0": 4, "1": 4}},  # reached: no new batch
    ]
    assert r.reportLatestOffset() == {topic: {"0": 5, "1": 4}}
    everything = _stream_reader(weir_server, topic, startingOffsets="earliest")
    assert isinstance(everything.getDefaultReadLimit(), ReadAllAvailable)
    first = everything.initialOffset()
    assert everything.latestOffset(first, ReadAllAvailable()) == {topic: {"0": 5, "1": 4}}
    ranges = everything.partitions({topic: {"0": 1, "1": 4}}, {topic: {"0": 5, "1": 4}})
    assert _ranges(ranges) == [(0, 1, 5)]
    shipped = pickle.loads(pickle.dumps(everything))  # the live connection stays on the driver
    assert shipped._client is None
    (batch,) = list(shipped.read(ranges[0]))
    assert batch.column("value").to_pylist() == [b"a1", b"a2", b"a3", b"late"]
    assert list(shipped.read(InputPartition(0))) == []
    r.stop()
    everything.stop()


def test_a_partition_added_to_the_topic_is_read_from_its_first_offset(
    weir_server: ServerProcess, client: weir.Client, topic_name: str
) -> None:
    client.create_topic(topic_name, partitions=1)
    produce(client, topic_name, {0: [Rec(b"x")]})
    r = _stream_reader(weir_server, topic_name, startingOffsets="earliest")
    start = r.initialOffset()
    assert start == {topic_name: {"0": 0}}
    client.alter_topic(topic_name, partitions=2)
    produce(client, topic_name, {1: [Rec(b"y"), Rec(b"z")]})
    first = r.latestOffset(start, ReadAllAvailable())
    assert first == {topic_name: {"0": 1, "1": 0}}  # only notes where the new one starts
    assert _ranges(r.partitions(start, first)) == [(0, 0, 1)]
    second = r.latestOffset(first, ReadAllAvailable())
    assert _ranges(r.partitions(first, second)) == [(1, 0, 2)]
    r.stop()


def test_data_loss_seen_when_planning_fails_the_query_or_is_skipped(
    weir_server: ServerProcess, client: weir.Client, trimmed: str, caplog: pytest.LogCaptureFixture
) -> None:
    start = client.describe_topic(trimmed).partition_info[0].start_offset
    strict = _stream_reader(weir_server, trimmed)
    with pytest.raises(DataLossError, match=f"offsets 5..{start - 1} of topic"):
        strict.latestOffset({trimmed: {"0": 5}}, ReadAllAvailable())
    lenient = _stream_reader(weir_server, trimmed, failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="weir.spark"):
        end = lenient.latestOffset({trimmed: {"0": 5}}, ReadMaxRows(4))
    assert end == {trimmed: {"0": start + 4}}  # on from the first record still there
    assert "failOnDataLoss=false: going on" in caplog.text
    strict.stop()
    lenient.stop()


def test_a_topic_made_again_shorter_fails_the_query_or_goes_on_from_its_end(
    weir_server: ServerProcess,
    client: weir.Client,
    topic_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client.create_topic(topic_name, partitions=1)
    produce(client, topic_name, {0: [Rec(b"x")] * 2})
    ahead = {topic_name: {"0": 9}}  # a checkpoint from before the topic was dropped
    strict = _stream_reader(weir_server, topic_name)
    with pytest.raises(DataLossError, match="now ends at offset 2, before offset 9"):
        strict.latestOffset(ahead, ReadAllAvailable())
    lenient = _stream_reader(weir_server, topic_name, failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="weir.spark"):
        assert lenient.latestOffset(ahead, ReadAllAvailable()) == {topic_name: {"0": 2}}
    assert "dropped and created again" in caplog.text
    # a partition the broker no longer lists stays where it was
    gone = {topic_name: {"0": 2, "7": 3}}
    assert lenient.latestOffset(gone, ReadAllAvailable()) == gone
    strict.stop()
    lenient.stop()


def test_the_consumer_option_commits_what_each_batch_read_and_survives_a_failed_commit(
    weir_server: ServerProcess,
    client: weir.Client,
    topic_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client.create_topic(topic_name, partitions=2)
    produce(client, topic_name, {0: [Rec(b"a")] * 3, 1: [Rec(b"b")] * 2})
    r = _stream_reader(weir_server, topic_name, startingOffsets="earliest", consumer="lag")
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    r.commit(end)
    info = client.describe_consumer(topic_name, "lag")
    assert [p.committed_offset for p in info.partitions] == [3, 2] and info.lag == 0
    r.commit(end)  # the same again: nothing to send
    with caplog.at_level(logging.WARNING, logger="weir.spark"):
        r.commit({topic_name: {"0": 99, "1": 2}})  # past the end: the broker refuses
    assert "committing" in caplog.text and "failed" in caplog.text
    assert [p.committed_offset for p in client.describe_consumer(topic_name, "lag").partitions] == [
        3,
        2,
    ]
    # latestOffset commits the start of the next batch: Spark finished everything before it
    r.latestOffset(end, ReadAllAvailable())
    r.stop()
    r.stop()  # twice is fine


# ------------------------------------------------------------------ writing, in a task


def _rows(**columns: list[Any]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(columns)


def test_a_task_writes_its_rows_with_stable_producers_and_seq_nos(
    weir_server: ServerProcess, client: weir.Client, topic_name: str
) -> None:
    client.create_topic(topic_name, partitions=3)
    options = WriterOptions.parse({"endpoint": weir_server.endpoint, "topic": topic_name})
    schema = StructType([StructField("value", StringType()), StructField("key", StringType())])
    layout = Layout.of(schema)
    created = dt.datetime(2024, 1, 2, tzinfo=dt.UTC)
    batch = pa.RecordBatch.from_pydict(
        {
            "value": ["k-1", "k-2", "plain"],
            "key": ["same", "same", None],
        }
    )
    msg = write_task(options, layout, 3, "job", 5, iter([batch, batch.slice(0, 0)]))
    assert (msg.spark_partition, msg.rows) == (0, 3)  # outside Spark: partition 0
    stored = {m.data: m for msgs in read_topic(client, topic_name).values() for m in msgs}
    assert stored[b"k-1"].partition == stored[b"k-2"].partition
    assert stored[b"k-1"].producer_id == f"spark-job-0-p{stored[b'k-1'].partition}"
    assert [stored[v].seq_no for v in (b"k-1", b"k-2", b"plain")] == [
        5 << 32,
        (5 << 32) + 1,
        (5 << 32) + 2,
    ]
    # the same task again (a retry) writes nothing more
    write_task(options, layout, 3, "job", 5, iter([batch]))
    assert client.describe_topic(topic_name).messages == 3
    # created_at and headers columns
    timed = Layout.of(
        StructType([StructField("value", StringType()), SCHEMA["headers"], SCHEMA["created_at"]])
    )
    with_time = pa.RecordBatch.from_pydict(
        {
            "value": ["t1", "t2"],
            "headers": pa.array([[("h", "1")], None], pa.map_(pa.string(), pa.string())),
            "created_at": pa.array([created, None], pa.timestamp("us", tz="UTC")),
        }
    )
    write_task(options, timed, 3, "job2", 0, iter([with_time]))
    got = {m.data: m for msgs in read_topic(client, topic_name).values() for m in msgs}
    assert got[b"t1"].created_at == created and got[b"t1"].headers == {"h": "1"}
    assert got[b"t2"].headers == {} and got[b"t2"].created_at_ms > 0


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"value": ["a", None]}, "'value' is null in some rows"),
        ({"value": ["a", "b"], "partition": [0, 7]}, "row 2: partition 7 is not one of 0..1"),
    ],
)
def test_a_bad_row_fails_the_task_and_its_writers_are_closed(
    weir_server: ServerProcess,
    client: weir.Client,
    topic_name: str,
    columns: dict[str, list[Any]],
    message: str,
) -> None:
    client.create_topic(topic_name, partitions=2)
    options = WriterOptions.parse({"endpoint": weir_server.endpoint, "topic": topic_name})
    fields = [StructField("value", StringType())]
    if "partition" in columns:
        fields.append(SCHEMA["partition"])
    good = _rows(value=["first"], **({"partition": [1]} if "partition" in columns else {}))
    with pytest.raises(BadRequestError, match=message):
        write_task(
            options, Layout.of(StructType(fields)), 2, "bad", 0, iter([good, _rows(**columns)])
        )


def test_batch_and_stream_writers_on_the_driver(
    weir_server: ServerProcess,
    client: weir.Client,
    topic_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client.create_topic(topic_name, partitions=1)
    opts = {"endpoint": weir_server.endpoint, "topic": topic_name}
    schema = StructType([StructField("value", StringType())])
    source = WeirDataSource(opts)
    with pytest.raises(BadRequestError, match=r'use mode\("append"\)'):
        source.writer(schema, True)
    w = source.writer(schema, False)
    assert isinstance(w, WeirBatchWriter) and len(w.stable_id) == 32
    assert WeirDataSource({**opts, "writeid": "x"}).writer(schema, False).stable_id == "x"
    done = [WrittenMessage(0, 3, 1), None, WrittenMessage(1, 2, 1)]
    with caplog.at_level(logging.INFO, logger="weir.spark"):
        w.commit(done)
        w.abort(done)
    assert "wrote 5 rows" in caplog.text and "rows already written stay" in caplog.text
    sw = source.streamWriter(schema, False)
    assert isinstance(sw, WeirStreamWriter)
    with pytest.raises(BadRequestError, match="no query or batch id"):
        sw.write(iter([]))
    with caplog.at_level(logging.DEBUG, logger="weir.spark"):
        sw.commit(done, 4)
        sw.abort(done, 4)
    assert "batch 4 wrote 5 rows" in caplog.text and "Spark replays it" in caplog.text
    with pytest.raises(UnknownTopicError):
        WeirDataSource({**opts, "topic": topic_name + "_missing"}).writer(schema, False)
