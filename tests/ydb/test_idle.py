"""Idle streams stay up: clients ping while nothing flows, and the server must let them.

The ydb SDK sends a keepalive ping every 10 s on its streams, even when no message moves.
The server has no idle timeout of its own; what ends idle streams is gRPC's ping policy.
With gRPC's default (pings without data at most every 5 minutes, two strikes) the server
answers the third ping with GOAWAY too_many_pings, about 30 s in, and the SDK reconnects
forever. server.py permits such pings.

Waiting 30 s for the SDK's third ping is slow, and the SDK cannot be made to ping sooner, so
this test holds an idle stream on a plain gRPC channel that pings every second: six pings
in six seconds meet the same policy (the policy is the server's, for every stream and
front alike), and the same stream must then still deliver.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc

import weir
from tests.conftest import ServerProcess
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native import weir_pb2_grpc as pb_grpc
from weir.storage.batch import decode_records

PING_MS = 1000  # gRPC's shortest keepalive interval (the ydb SDK uses 10 s)
IDLE_S = 6  # six pings; gRPC's default policy sends GOAWAY at the third


def test_an_idle_stream_outlives_the_clients_keepalive_pings(
    shared_server: ServerProcess, topic_name: str
) -> None:
    with weir.Client(shared_server.endpoint) as c:
        c.create_topic(topic_name)
    channel = grpc.insecure_channel(
        shared_server.endpoint,
        options=[
            ("grpc.keepalive_time_ms", PING_MS),
            ("grpc.keepalive_timeout_ms", 20_000),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.keepalive_permit_without_calls", 1),
        ],
    )
    done = threading.Event()

    def requests() -> Iterator[pb.ReadRequest]:
        yield pb.ReadRequest(
            init=pb.ReadInit(topics=[topic_name], consumer="idle", credit_bytes=1 << 20)
        )
        done.wait(60)  # the stream stays open, with nothing to say

    call = pb_grpc.WeirStub(channel).StreamRead(requests(), timeout=60)
    try:
        assert [next(call).WhichOneof("kind") for _ in range(2)] == ["init", "assigned"]

        time.sleep(IDLE_S)  # idle is the point: nothing to wait for, only pings flow

        with weir.Client(shared_server.endpoint) as c, c.writer(topic_name) as w:
            w.write(b"after")
        resp = next(call)  # a GOAWAY would have ended the stream with UNAVAILABLE
        assert resp.WhichOneof("kind") == "data"
        assert [r.data for ch in resp.data.chunks for r in decode_records(ch)] == [b"after"]
    finally:
        done.set()
        call.cancel()
        channel.close()
