"""Raw bytes to the native TCP port (`weir.protocols.native.tcp_front`), for the tests that
must send what no SDK would: the framing spelled out with a plain socket."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable

from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.framing import METHOD_READ, METHOD_WRITE, VERSION


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def hello(authorization: str = "", method: str = METHOD_WRITE, version: int = VERSION) -> bytes:
    return frame(
        pb.TcpHello(version=version, method=method, authorization=authorization).SerializeToString()
    )


def init(topic: str, producer_id: str) -> bytes:
    return frame(
        pb.WriteRequest(init=pb.WriteInit(topic=topic, producer_id=producer_id)).SerializeToString()
    )


def batches(*bufs: bytes) -> bytes:
    return frame(pb.WriteRequest(batches=pb.WriteBatches(batches=list(bufs))).SerializeToString())


def read_hello() -> bytes:
    return hello(method=METHOD_READ)


def read_init(topic: str, consumer: str = "", credit: int = 1 << 20) -> bytes:
    return read_request(
        init=pb.ReadInit(
            topics=[topic], consumer=consumer, start=pb.START_EARLIEST, credit_bytes=credit
        )
    )


def read_request(**kind: object) -> bytes:
    return frame(pb.ReadRequest(**kind).SerializeToString())  # type: ignore[arg-type]


def exchange(endpoint: str, data: bytes, timeout: float = 20.0) -> tuple[list[bytes], bytes]:
    """Send ``data``, half-close, and read until the server closes: (whole frames, the bytes
    left over after them)."""
    host, _, port = endpoint.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may close first (it refused the start): read what it said
        got = b""
        try:
            while chunk := s.recv(1 << 16):
                got += chunk
        except ConnectionResetError:
            pass
    return split_frames(got)


def read_until(
    endpoint: str, data: bytes, enough: Callable[[list[bytes]], bool], timeout: float = 20.0
) -> list[bytes]:
    """Send ``data`` and read, the connection kept open, until ``enough(frames)`` (a read
    stream serves until its client goes); the whole frames."""
    host, _, port = endpoint.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(data)
        got = b""
        while True:
            frames, _ = split_frames(got)
            if enough(frames):
                return frames
            chunk = s.recv(1 << 16)
            if not chunk:
                raise AssertionError(f"the server closed the connection after {frames!r}")
            got += chunk


def split_frames(got: bytes) -> tuple[list[bytes], bytes]:
    """The whole frames in ``got``, and the bytes left over after them."""
    frames = []
    pos = 0
    while pos + 4 <= len(got):
        (n,) = struct.unpack_from(">I", got, pos)
        if pos + 4 + n > len(got):
            break
        frames.append(got[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return frames, got[pos:]


def answers(frames: list[bytes]) -> tuple[pb.TcpHelloResult | None, list[pb.WriteResponse]]:
    """The hello result and the write responses of a connection's frames."""
    if not frames:
        return None, []
    return pb.TcpHelloResult.FromString(frames[0]), [
        pb.WriteResponse.FromString(f) for f in frames[1:]
    ]


def read_answers(
    frames: list[bytes],
) -> tuple[pb.TcpHelloResult | None, list[pb.ReadResponse]]:
    """The hello result and the read responses of a read stream's frames."""
    if not frames:
        return None, []
    return pb.TcpHelloResult.FromString(frames[0]), [
        pb.ReadResponse.FromString(f) for f in frames[1:]
    ]


def error_code(frames: list[bytes], read: bool = False) -> str:
    """The code of the error that ended the connection ("" for none); ``read``: the
    frames of a read stream."""
    result, responses = read_answers(frames) if read else answers(frames)
    if result is not None and result.HasField("error"):
        return result.error.code
    errs = [r.error.code for r in responses if r.WhichOneof("kind") == "error"]
    return errs[0] if errs else ""
