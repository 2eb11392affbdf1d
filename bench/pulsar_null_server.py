#!/usr/bin/env python
"""A "null" Pulsar server: weir's Pulsar codec with nothing behind it (bench only).

It answers what ``pulsar-client`` needs to produce and consume, and nothing more:
Connect, Ping, lookups (itself), partition metadata (not partitioned), Producer,
Send (a SendReceipt at once, entry ids counting up; nothing is kept), Subscribe,
Flow (pre-built entries from memory, as many as the permits ask for), Ack (ignored),
the closes. Frames are cut and checked by `weir.protocols.pulsar.codec`, as the real
front does, so the difference to weir is the broker, storage and the front's own work.

The client's speed against it is the ceiling any server can give ``pulsar-client``;
``weir-pulsar / pulsar-null`` is the share of it weir delivers (goal: at least 80 %).

A consumer of topic ``...-s<size>`` is sent entries of ``min(1000, 128 KiB // size)``
messages of ``size`` bytes each (what a batching producer's entries hold).

    python bench/pulsar_null_server.py --listen 127.0.0.1:0   # prints LISTENING host:port
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import re
import signal
import struct
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `weir` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from weir.protocols.pulsar import pulsar_api_pb2 as pb
from weir.protocols.pulsar.codec import (
    FrameDecoder,
    ProtocolError,
    encode_command,
    encode_message_with,
    message_part,
)

T = pb.BaseCommand
_SIZE = re.compile(r"-s(\d+)$")
_U32 = struct.Struct(">I")


def entry_part(size: int) -> tuple[bytes, int]:
    """(message part, message count) of one entry for consumers of ``size``-byte messages."""
    n = max(1, min(1000, (128 << 10) // max(1, size)))
    smm = pb.SingleMessageMetadata(payload_size=size)
    head = smm.SerializeToString()
    one = _U32.pack(len(head)) + head + b"x" * size
    md = pb.MessageMetadata(
        producer_name="null", sequence_id=0, publish_time=1, num_messages_in_batch=n
    )
    return message_part(md.SerializeToString(), one * n), n


class NullConnection:
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, url: str
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.url = url
        self.decoder = FrameDecoder(6 << 20)
        self.entries = itertools.count()
        self.consumers: dict[int, tuple[int, bytes, int]] = {}  # id -> (permits, part, count)
        self.names = itertools.count()

    def send(self, cmd: pb.BaseCommand) -> None:
        self.writer.write(encode_command(cmd))

    async def run(self) -> None:
        try:
            while True:
                data = await self.reader.read(1 << 16)
                if not data:
                    return
                for frame in self.decoder.feed(data):
                    self.handle(frame.command)
                if self.writer.transport.get_write_buffer_size() > (4 << 20):
                    await self.writer.drain()
        except (ConnectionError, ProtocolError):
            return
        finally:
            self.writer.close()

    def handle(self, cmd: pb.BaseCommand) -> None:
        t = cmd.type
        if t == T.SEND:
            s = cmd.send
            self.send(
                T(
                    type=T.SEND_RECEIPT,
                    send_receipt=pb.CommandSendReceipt(
                        producer_id=s.producer_id,
                        sequence_id=s.sequence_id,
                        message_id=pb.MessageIdData(ledgerId=0, entryId=next(self.entries)),
                        highest_sequence_id=s.highest_sequence_id,
                    ),
                )
            )
        elif t == T.FLOW:
            self.flow(cmd.flow.consumer_id, cmd.flow.messagePermits)
        elif t == T.ACK or t == T.PONG:
            pass
        elif t == T.CONNECT:
            self.send(
                T(
                    type=T.CONNECTED,
                    connected=pb.CommandConnected(
                        server_version="pulsar-null",
                        protocol_version=min(cmd.connect.protocol_version, 19),
                        max_message_size=5 << 20,
                    ),
                )
            )
        elif t == T.PING:
            self.send(T(type=T.PONG, pong=pb.CommandPong()))
        elif t == T.LOOKUP:
            self.send(
                T(
                    type=T.LOOKUP_RESPONSE,
                    lookupTopicResponse=pb.CommandLookupTopicResponse(
                        request_id=cmd.lookupTopic.request_id,
                        response=pb.CommandLookupTopicResponse.Connect,
                        brokerServiceUrl=self.url,
                        authoritative=True,
                        proxy_through_service_url=True,
                    ),
                )
            )
        elif t == T.PARTITIONED_METADATA:
            self.send(
                T(
                    type=T.PARTITIONED_METADATA_RESPONSE,
                    partitionMetadataResponse=pb.CommandPartitionedTopicMetadataResponse(
                        request_id=cmd.partitionMetadata.request_id,
                        response=pb.CommandPartitionedTopicMetadataResponse.Success,
                        partitions=0,
                    ),
                )
            )
        elif t == T.PRODUCER:
            p = cmd.producer
            self.send(
                T(
                    type=T.PRODUCER_SUCCESS,
                    producer_success=pb.CommandProducerSuccess(
                        request_id=p.request_id,
                        producer_name=p.producer_name or f"null-{next(self.names)}",
                        last_sequence_id=-1,
                        producer_ready=True,
                    ),
                )
            )
        elif t == T.SUBSCRIBE:
            s = cmd.subscribe
            m = _SIZE.search(s.topic)
            part, count = entry_part(int(m.group(1)) if m else 100)
            self.consumers[s.consumer_id] = (0, part, count)
            self.success(s.request_id)
        elif t == T.CLOSE_PRODUCER:
            self.success(cmd.close_producer.request_id)
        elif t == T.CLOSE_CONSUMER:
            self.consumers.pop(cmd.close_consumer.consumer_id, None)
            self.success(cmd.close_consumer.request_id)
        elif t == T.UNSUBSCRIBE:
            self.success(cmd.unsubscribe.request_id)
        else:
            raise ProtocolError(f"{T.Type.Name(t)} is not served by the null server")

    def success(self, request_id: int) -> None:
        self.send(T(type=T.SUCCESS, success=pb.CommandSuccess(request_id=request_id)))

    def flow(self, consumer_id: int, permits: int) -> None:
        got = self.consumers.get(consumer_id)
        if got is None:
            return
        left, part, count = got
        left += permits
        out = []
        while left > 0:
            cmd = T(
                type=T.MESSAGE,
                message=pb.CommandMessage(
                    consumer_id=consumer_id,
                    message_id=pb.MessageIdData(ledgerId=0, entryId=next(self.entries)),
                ),
            )
            out.append(encode_message_with(cmd.SerializeToString(), part))
            left -= count
        self.consumers[consumer_id] = (left, part, count)
        if out:
            self.writer.write(b"".join(out))


async def serve(host: str, port: int) -> None:
    url = ""

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await NullConnection(reader, writer, url).run()

    server = await asyncio.start_server(accept, host, port, limit=1 << 20)
    bound = server.sockets[0].getsockname()[1]
    url = f"pulsar://{host}:{bound}"
    print(f"LISTENING {host}:{bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--listen", default="127.0.0.1:0")
    args = ap.parse_args()
    host, _, port = args.listen.rpartition(":")
    asyncio.run(serve(host, int(port)))


if __name__ == "__main__":
    main()
