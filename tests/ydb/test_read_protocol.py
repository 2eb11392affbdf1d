"""StreamRead at the message level, as the SDK cannot show it: credit, commits, rebalancing."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import ydb
from ydb._grpc.common import ydb_topic_v1_pb2_grpc
from ydb._grpc.common.protos import ydb_topic_pb2
from ydb._grpc.common.protos.ydb_status_codes_pb2 import StatusIds

from tests.conftest import ServerProcess
from tests.ydb.conftest import path

R = ydb_topic_pb2.StreamReadMessage
_END = object()


class RawReadStream:
    """A StreamRead call driven message by message (sync gRPC, a thread collects answers)."""

    def __init__(self, channel: grpc.Channel, topic: str, consumer: str) -> None:
        self._requests: queue.Queue[Any] = queue.Queue()
        self.answers: queue.Queue[Any] = queue.Queue()
        stub = ydb_topic_v1_pb2_grpc.TopicServiceStub(channel)
        self.call = stub.StreamRead(self._iter(), metadata=[("x-ydb-database", "/local")])
        threading.Thread(target=self._collect, daemon=True).start()
        self.send(
            init_request=R.InitRequest(
                topics_read_settings=[R.InitRequest.TopicReadSettings(path=topic)],
                consumer=consumer,
            )
        )
        assert self.next("init_response").status == StatusIds.SUCCESS

    def _iter(self) -> Iterator[Any]:
        while (msg := self._requests.get()) is not _END:
            yield msg

    def _collect(self) -> None:
        try:
            for msg in self.call:
                self.answers.put(msg)
        except grpc.RpcError:
            pass

    def send(self, **kwargs: Any) -> None:
        self._requests.put(R.FromClient(**kwargs))

    def next(self, kind: str, timeout: float = 10) -> Any:
        msg = self.answers.get(timeout=timeout)
        assert msg.status == StatusIds.SUCCESS, msg
        assert msg.WhichOneof("server_message") == kind, msg
        return msg

    def close(self) -> None:
        self._requests.put(_END)
        self.call.cancel()


def test_credit_commits_and_a_graceful_rebalance(
    shared_server: ServerProcess, driver: ydb.Driver, topic_name: str
) -> None:
    topic = path(topic_name)
    tc = driver.topic_client
    tc.create_topic(topic, min_active_partitions=2, consumers=["raw"])
    for p in (0, 1):
        with tc.writer(topic, producer_id=f"p{p}", partition_id=p) as w:
            w.write([ydb.TopicWriterMessage(b"%d:%03d" % (p, i) + b"." * 90) for i in range(300)])

    with grpc.insecure_channel(shared_server.endpoint) as channel:
        first = RawReadStream(channel, topic, "raw")
        starts = [first.next("start_partition_session_request") for _ in range(2)]
        assert sorted(
            s.start_partition_session_request.partition_session.partition_id for s in starts
        ) == [0, 1]
        for s in starts:
            req = s.start_partition_session_request
            assert req.committed_offset == 0
            assert (req.partition_offsets.start, req.partition_offsets.end) == (0, 300)
        ps = {
            s.start_partition_session_request.partition_session.partition_id: s.start_partition_session_request.partition_session.partition_session_id
            for s in starts
        }
        # Credit first, then the answers to the starts: data flows only for started sessions.
        first.send(read_request=R.ReadRequest(bytes_size=5000))
        first.send(
            start_partition_session_response=R.StartPartitionSessionResponse(
                partition_session_id=ps[0]
            )
        )
        charged = 0
        offsets: list[int] = []
        while charged < 5000 - 200:
            rr = first.next("read_response").read_response
            assert rr.bytes_size <= rr.ByteSize() <= rr.bytes_size + 11, "bytes_size is honest"
            charged += rr.bytes_size
            for pd in rr.partition_data:
                assert pd.partition_session_id == ps[0]
                offsets += [m.offset for b in pd.batches for m in b.message_data]
        assert charged <= 5000, "never more than the credit granted"
        assert offsets == list(range(len(offsets))) and 20 <= len(offsets) < 50

        # Commits out of order: the committed offset waits for the gap, every commit is answered.
        def commit(start: int, end: int) -> int:
            first.send(
                commit_offset_request=R.CommitOffsetRequest(
                    commit_offsets=[
                        R.CommitOffsetRequest.PartitionCommitOffset(
                            partition_session_id=ps[0],
                            offsets=[ydb_topic_pb2.OffsetsRange(start=start, end=end)],
                        )
                    ]
                )
            )
            ans = first.next("commit_offset_response").commit_offset_response
            (c,) = ans.partitions_committed_offsets
            assert c.partition_session_id == ps[0]
            return int(c.committed_offset)

        assert commit(10, 20) == 0
        assert commit(0, 10) == 20
        assert commit(0, 10) == 20  # a repeat is fine
        assert (
            tc.describe_consumer(topic, "raw")
            .partitions[0]
            .partition_consumer_stats.committed_offset
            == 20
        )

        # A second reader of the consumer: the first gives one partition up, gracefully.
        second = RawReadStream(channel, topic, "raw")
        stop = first.next("stop_partition_session_request").stop_partition_session_request
        assert stop.graceful
        moved = 0 if stop.partition_session_id == ps[0] else 1
        first.send(
            stop_partition_session_response=R.StopPartitionSessionResponse(
                partition_session_id=stop.partition_session_id
            )
        )
        start = second.next("start_partition_session_request").start_partition_session_request
        assert start.partition_session.partition_id == moved
        assert start.committed_offset == (20 if moved == 0 else 0)
        first.close()
        second.close()
