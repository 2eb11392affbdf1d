#!/usr/bin/env python
"""A "null" Kafka server: it acknowledges produce requests without storing anything.

It speaks just enough of the Kafka protocol (weir's own codec) for confluent-kafka's
producer: ApiVersions, Metadata (any topic: ``--partitions`` partitions, this server
the leader), InitProducerId, CreateTopics, DeleteTopics, and Produce, answered at once
with per-partition increasing offsets (only each batch's header is read, for its record
count). Fetch returns no records. Requests are read as the Kafka front reads them
(`weir.protocols.kafka.framing`: straight into a buffer of their own). It is the
benchmark baseline: confluent-kafka's producer against it is the ceiling for any server
on this machine.

With ``--fsync FILE`` it is the *durable floor* instead (``kafka-null-fsync``): each
Produce's record bytes are appended to FILE and the answer waits for an fdatasync that
covers them, nothing else (no index, no checksum, no format). A worker thread appends
and fdatasyncs everything that arrived since its last round (group commit) while
requests keep arriving. It is the least a server that keeps what it acks must do, so
weir / null-fsync is the share of what this disk allows that weir delivers.
Answers leave each connection in request order, as Kafka requires.

Usage::

    python bench/kafka_null_server.py --listen 127.0.0.1:0 [--partitions N] [--fsync FILE]

The first stdout line is ``LISTENING <host>:<port>``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import struct
import sys
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from weir.protocols.kafka import messages as m
from weir.protocols.kafka import txn_messages as tm
from weir.protocols.kafka.codec import KafkaCodecError, decode_request, encode_response
from weir.protocols.kafka.framing import FrameReader, FrameSizeError

_COUNT = struct.Struct(">i")  # record count at byte 57 of a batch
_LEN = struct.Struct(">i")  # batch length at byte 8


def _records_in(records: bytes | memoryview | None) -> int:
    n, pos = 0, 0
    while records and pos + 61 <= len(records):
        n += _COUNT.unpack_from(records, pos + 57)[0]
        pos += 12 + _LEN.unpack_from(records, pos + 8)[0]
    return n


WRAP = 1 << 30  # the floor's file starts again from empty past this size


class Syncer:
    """The floor's whole durability. Records wait in ``pending``; one worker at a time
    appends everything pending to the file and fdatasyncs (group commit), while the
    event loop keeps receiving. The file grows as a log that keeps its data does (new
    blocks, the file size in every flush); past ``WRAP`` bytes it is cut back to empty.
    `synced` is the number of appends the last finished fdatasync covers."""

    def __init__(self, path: Path, wrap: int = WRAP) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self.wrap = wrap
        self.size = 0  # bytes in the file; only the worker touches it
        self.pending: list[memoryview] = []
        self.written = 0  # appends made
        self.synced = 0  # appends made durable
        self.running = False
        self.connections: set[NullConnection] = set()

    def append(self, data: memoryview) -> int:
        """Queue ``data``; the number ``synced`` must reach before it is durable."""
        self.pending.append(data)
        self.written += 1
        return self.written

    def kick(self) -> None:
        if self.running or not self.pending:
            return
        bufs, self.pending = self.pending, []
        self.running = True
        target = self.written
        fut = asyncio.get_running_loop().run_in_executor(None, self._store, bufs)
        fut.add_done_callback(lambda f: self._done(f, target))

    def _store(self, bufs: list[memoryview]) -> None:
        if self.size > self.wrap:
            os.ftruncate(self.fd, 0)
            self.size = 0
        for buf in bufs:
            view = memoryview(buf)
            while view:
                n = os.write(self.fd, view)
                self.size += n
                view = view[n:]
        os.fdatasync(self.fd)

    def _done(self, fut: asyncio.Future[None], target: int) -> None:
        self.running = False
        fut.result()  # a failed write or fdatasync must not be acknowledged: let it raise
        self.synced = target
        for conn in list(self.connections):
            conn.flush()
        self.kick()


class NullServer:
    def __init__(self, host: str, port: int, partitions: int, syncer: Syncer | None = None) -> None:
        self.host, self.port, self.partitions = host, port, partitions
        self.offsets: dict[tuple[str, int], int] = defaultdict(int)
        self.pids = itertools.count(1)
        self.syncer = syncer
        self.need = 0  # the append count the current request's answer waits for

    def answer(self, api: Any, version: int, body: dict[str, Any]) -> dict[str, Any] | None:
        k = api.key
        if k == m.API_VERSIONS.key:
            return {
                "api_keys": [
                    {"api_key": a.key, "min_version": a.min_version, "max_version": a.max_version}
                    for a in m.ALL
                ]
            }
        if k == m.METADATA.key:
            names = [t["name"] for t in body["topics"] or []]
            return {
                "brokers": [{"node_id": 0, "host": self.host, "port": self.port}],
                "cluster_id": "null",
                "controller_id": 0,
                "topics": [
                    {
                        "name": n,
                        "topic_id": bytes(16),
                        "partitions": [
                            {
                                "partition_index": p,
                                "leader_id": 0,
                                "replica_nodes": [0],
                                "isr_nodes": [0],
                            }
                            for p in range(self.partitions)
                        ],
                    }
                    for n in names
                ],
            }
        if k == tm.INIT_PRODUCER_ID.key:
            return {"producer_id": next(self.pids), "producer_epoch": 0}
        if k == m.CREATE_TOPICS.key:
            return {"topics": [{"name": t["name"]} for t in body["topics"]]}
        if k == m.DELETE_TOPICS.key:
            names = body["topic_names"] if version < 6 else [t["name"] for t in body["topics"]]
            return {"responses": [{"name": n} for n in names]}
        if k == m.PRODUCE.key:
            out = []
            for t in body["topic_data"]:
                parts = []
                for p in t["partition_data"]:
                    key = (t["name"], p["index"])
                    base = self.offsets[key]
                    self.offsets[key] += _records_in(p["records"])
                    if self.syncer is not None and p["records"]:
                        self.need = self.syncer.append(p["records"])
                    parts.append(
                        {"index": p["index"], "base_offset": base, "log_append_time_ms": -1}
                    )
                out.append({"name": t["name"], "partition_responses": parts})
            return None if body["acks"] == 0 else {"responses": out}
        if k == m.FETCH.key:
            return {"responses": []}
        raise KafkaCodecError(f"{api.name} is not served by the null server")


class NullConnection(asyncio.BufferedProtocol):
    """One client: requests are read with weir's `FrameReader` (straight into their own
    buffers, as the Kafka front reads them), so the ceiling is not lowered by reading."""

    def __init__(self, null: NullServer) -> None:
        self.null = null
        self.frames = FrameReader(100 << 20, self.frame)
        self.transport: asyncio.Transport | None = None
        # answers waiting for an fdatasync (the floor): (appends it needs, bytes or None)
        self.pending: deque[tuple[int, bytes | None]] = deque()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.null.syncer is not None:
            self.null.syncer.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.null.syncer is not None:
            self.null.syncer.connections.discard(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.frames.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        try:
            self.frames.buffer_updated(nbytes)
        except (FrameSizeError, KafkaCodecError):
            assert self.transport is not None
            self.transport.close()

    def frame(self, frame: memoryview) -> None:
        header, api, body = decode_request(m.BY_KEY, frame)
        self.null.need = 0
        reply = self.null.answer(api, header.api_version, body)
        out = (
            None
            if reply is None
            else encode_response(api, header.api_version, header.correlation_id, reply)
        )
        syncer = self.null.syncer
        if syncer is None:
            if out is not None and self.transport is not None:
                self.transport.write(out)
            return
        self.pending.append((self.null.need, out))
        self.flush()
        syncer.kick()

    def flush(self) -> None:
        """Send, in request order, every answer whose appends are durable."""
        syncer = self.null.syncer
        assert syncer is not None
        while self.pending and self.pending[0][0] <= syncer.synced:
            _, out = self.pending.popleft()
            if out is not None and self.transport is not None:
                self.transport.write(out)


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--fsync", type=Path, help="the durable floor: append here, fdatasync")
    args = ap.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    syncer = None if args.fsync is None else Syncer(args.fsync)
    null = NullServer(host, int(port), args.partitions, syncer)
    server = await asyncio.get_running_loop().create_server(
        lambda: NullConnection(null), host, int(port)
    )
    null.port = server.sockets[0].getsockname()[1]
    print(f"LISTENING {host}:{null.port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
