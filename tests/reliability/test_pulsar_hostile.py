"""Hostile bytes at the Pulsar front and the admin REST: clear errors, the server lives on,
stored data is untouched.

The decoders are fuzzed in process (hypothesis, mutations of valid frames: hostile sizes,
truncations, wrong magic and checksums, unknown commands, protobuf garbage); the live
server then gets the same kinds of frames on real connections, and must still serve a
real pulsar-client and return what was stored before.
"""

from __future__ import annotations

import json
import random
import socket
import struct
import urllib.error
import urllib.request
from pathlib import Path

import pulsar
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ServerProcess
from weir.errors import BadRequestError
from weir.protocols.pulsar import pulsar_api_pb2 as pb
from weir.protocols.pulsar.codec import FrameDecoder, encode_command, encode_message
from weir.protocols.pulsar.records import send_to_batch

T = pb.BaseCommand


def _valid_frames() -> list[bytes]:
    connect = encode_command(
        T(type=T.CONNECT, connect=pb.CommandConnect(client_version="x", protocol_version=19))
    )
    md = pb.MessageMetadata(
        producer_name="p", sequence_id=1, publish_time=1, num_messages_in_batch=2
    )
    smm = pb.SingleMessageMetadata(payload_size=3, partition_key="k").SerializeToString()
    payload = (struct.pack(">I", len(smm)) + smm + b"abc") * 2
    send = encode_message(
        T(type=T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=1, num_messages=2)),
        md.SerializeToString(),
        payload,
    )
    ping = encode_command(T(type=T.PING, ping=pb.CommandPing()))
    return [connect, send, ping]


VALID = _valid_frames()


def _mutate(data: bytes, rnd: random.Random) -> bytes:
    b = bytearray(data)
    kind = rnd.randrange(6)
    if kind == 0 and len(b) > 4:  # truncate
        return bytes(b[: rnd.randrange(len(b))])
    if kind == 1:  # hostile total size
        struct.pack_into(">I", b, 0, rnd.choice([0, 1, 3, 0x7FFFFFFF, 0xFFFFFFFF, len(b) * 7]))
    elif kind == 2 and len(b) > 8:  # hostile command size
        struct.pack_into(">I", b, 4, rnd.choice([0, 0xFFFFFFFF, len(b) + 100]))
    elif kind == 3:  # flip bytes (magic, checksum, protobuf)
        for _ in range(rnd.randrange(1, 6)):
            i = rnd.randrange(len(b))
            b[i] ^= 1 << rnd.randrange(8)
    elif kind == 4:  # an unknown command type
        return encode_command_raw(rnd.randrange(69, 1000))
    else:  # protobuf garbage inside a well-sized frame
        junk = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 64)))
        return struct.pack(">II", len(junk) + 4, len(junk)) + junk
    return bytes(b)


def encode_command_raw(type_: int) -> bytes:
    body = b"\x08" + _varint(type_)
    return struct.pack(">II", len(body) + 4, len(body)) + body


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), st.integers(1, 40))
def test_decoder_refuses_mutations_with_a_typed_error(seed: int, chunk: int) -> None:
    rnd = random.Random(seed)
    data = _mutate(rnd.choice(VALID), rnd)
    dec = FrameDecoder(5 << 20)
    try:
        for i in range(0, len(data), chunk):  # in pieces, as a socket delivers them
            for frame in dec.feed(data[i : i + chunk]):
                if frame.metadata is not None and frame.payload is not None:
                    send_to_batch(frame.metadata, frame.payload, "p")
    except BadRequestError:
        pass  # ProtocolError is one: the only way a bad frame may fail
    assert dec.buffered <= len(data)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> ServerProcess:
    srv = ServerProcess(Path(tmp_path_factory.mktemp("pulsar-hostile")))
    srv.start()
    yield srv  # type: ignore[misc]
    srv.stop()


def _blast(url: str, frames: list[bytes]) -> None:
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    for frame in frames:
        with socket.create_connection((host, int(port)), timeout=5) as s:
            try:
                s.sendall(VALID[0] + frame)
                s.settimeout(0.5)
                while s.recv(65536):
                    pass
            except OSError:
                pass


def test_live_server_survives_hostile_frames_and_keeps_its_data(server: ServerProcess) -> None:
    client = pulsar.Client(server.pulsar_url, operation_timeout_seconds=5)
    producer = client.create_producer("kept")
    ids = [producer.send(b"%d" % i) for i in range(5)]
    rnd = random.Random(7)
    _blast(server.pulsar_url, [_mutate(rnd.choice(VALID), rnd) for _ in range(60)])
    assert server.proc is not None and server.proc.poll() is None
    reader = client.create_reader("kept", pulsar.MessageId.earliest)
    seen = []
    while reader.has_message_available():
        m = reader.read_next(5000)
        seen.append((m.message_id(), m.data()))
    assert seen == [(ids[i], b"%d" % i) for i in range(5)]
    client.close()


def test_admin_rest_refuses_garbage_without_touching_data(server: ServerProcess) -> None:
    base = server.http_url + "/admin/v2"
    topic = base + "/persistent/public/default/kept-rest"
    urllib.request.urlopen(urllib.request.Request(topic, method="PUT"), timeout=10)
    client = pulsar.Client(server.pulsar_url, operation_timeout_seconds=5)
    client.create_producer("kept-rest").send(b"one")
    client.close()
    rnd = random.Random(3)
    paths = [
        "/persistent/public/default/kept-rest/partitions",
        "/namespaces/public/default/retention",
        "/namespaces/public/default/messageTTL",
        "/persistent/public/default/kept-rest/subscription/x/resetcursor",
        "/persistent/public/default/kept-rest/subscription/x/skip/-5",
        "/tenants/" + "a" * 300,
        "/persistent/public/default/%00%ff/stats",
        "/schemas/public/default/kept-rest/schema",
        "/non-persistent/public/default/kept-rest/partitions",  # the other kind's name
        "/non-persistent/public/default/kept-live",
        "/non-persistent/public/default/kept-live/partitions",
        "/non-persistent/public/default/kept-live/subscription/x/skip/3",
    ]
    bodies = [b"", b"{", b"null", b'"x"', b"-1", b"1e999", b"[" * 5000, bytes(range(256))]
    for _ in range(80):
        req = urllib.request.Request(
            base + rnd.choice(paths), data=rnd.choice(bodies), method=rnd.choice(["POST", "PUT"])
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                status = resp.status
        except urllib.error.HTTPError as err:
            status = err.code
            body = err.read()
            assert status < 500, body
            if body:
                assert "reason" in json.loads(body)
        assert status < 500
    stats = json.loads(urllib.request.urlopen(topic + "/stats", timeout=10).read())
    assert stats["msgInCounter"] == 1
    partitions = urllib.request.urlopen(topic + "/partitions", timeout=10).read()
    assert json.loads(partitions) == {"partitions": 0}
