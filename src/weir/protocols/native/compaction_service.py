"""The native front's compaction calls (a mixin of `NativeService`): start a run, describe
a topic's compacted views; each translates one message into one broker call."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

from weir.broker.compaction import CompactionStatus
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.stream import Allow
from weir.protocols.native.unary import unary
from weir.security.grants import Permission

if TYPE_CHECKING:
    from weir.broker.broker import Broker


def describe_compaction(st: CompactionStatus) -> pb.CompactionDescription:
    return pb.CompactionDescription(
        topic=st.topic,
        running=st.running,
        started_ms=st.started_ms,
        last_error=st.last_error,
        partitions=[
            pb.PartitionCompaction(
                partition=p.partition,
                position=p.position,
                keys=p.keys,
                tombstones=p.tombstones,
                keyless=p.keyless,
                messages_before=p.messages_before,
                bytes_before=p.bytes_before,
                messages_after=p.messages_after,
                bytes_after=p.bytes_after,
                finished_ms=p.finished_ms,
                duration_ms=p.duration_ms,
                phase=p.phase,
                messages_scanned=p.messages_scanned,
            )
            for p in st.partitions
        ],
    )


class CompactionCalls:
    """CompactTopic needs the admin permission on the topic, DescribeCompaction consume."""

    broker: Broker
    _allow: Allow

    @unary
    async def CompactTopic(
        self, request: pb.CompactTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.CompactionDescription:
        self._allow(Permission.ADMIN, request.topic, "compact")
        return describe_compaction(await self.broker.compact(request.topic, wait=request.wait))

    @unary
    async def DescribeCompaction(
        self, request: pb.DescribeCompactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.CompactionDescription:
        self._allow(Permission.CONSUME, request.topic, "describe the compaction of")
        return describe_compaction(self.broker.compaction_status(request.topic))
