"""The native TCP port's frame reader (`FrameConnection`) over real loopback sockets, plain
and TLS: any mix of frame sizes (in the connection's buffer, received into their own, in
parts), cut into the socket's writes anywhere, comes out frame for frame; a length over
the limit, an end inside a frame and a wrong magic are the errors the front reports."""

from __future__ import annotations

import asyncio
import ssl
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security.certs import Authority
from weir.errors import MessageTooLargeError
from weir.protocols.native import frame_connection as fc
from weir.protocols.native.framing import MAGIC, FrameError, frame
from weir.protocols.native.tcp_front import start_frame_listener
from weir.security.tls import ServerTls, TlsFiles

LIMIT = 8 << 20


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[ServerTls, ssl.SSLContext]:
    """The server's TLS (as `weir serve` loads it) and a client's context, of a test CA."""
    ca = Authority(tmp_path_factory.mktemp("ca"))
    cert = ca.issue("weir-server", stem="server")
    server = ServerTls(TlsFiles(Path(cert.cert), Path(cert.key)))
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(Path(ca.path))
    return server, client


async def _through(
    data: bytes,
    cuts: list[int],
    limit: int = LIMIT,
    tls: tuple[ServerTls, ssl.SSLContext] | None = None,
    frames: int | None = None,
) -> list[Any]:
    """Send ``data`` to a FrameConnection in pieces cut at ``cuts``, then end the input;
    what its reader got: each frame's bytes, then None at the end, or the error it raised.
    With ``frames``, the input is ended only once that many frames came (a client that
    waits for its answers: nothing may wait for an end of input)."""
    got: list[Any] = []
    served = asyncio.get_running_loop().create_future()
    all_in = asyncio.get_running_loop().create_future()

    async def serve(conn: fc.FrameConnection, writer: asyncio.StreamWriter) -> None:
        try:
            await conn.read_magic()
            while True:
                payload = await conn.read_frame(limit)
                got.append(None if payload is None else bytes(payload))
                if payload is None:
                    break
                if frames is not None and len(got) == frames and not all_in.done():
                    all_in.set_result(None)
        except Exception as exc:
            got.append(exc)
        finally:
            writer.close()
            served.set_result(None)

    server_tls, client_ctx = tls if tls is not None else (None, None)
    server = await start_frame_listener(serve, "127.0.0.1", 0, server_tls, "tests")
    try:
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
        pos = 0
        for cut in [*sorted(cuts), len(data)]:
            if cut > pos:
                writer.write(data[pos:cut])
                await writer.drain()
                await asyncio.sleep(0)  # let the server read what came so far
                pos = cut
        if frames is not None:
            await asyncio.wait_for(all_in, 30)
        if tls is None:
            writer.write_eof()
        else:
            writer.close()  # TLS has no half-close: close_notify ends the input
        await asyncio.wait_for(served, 30)
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    return got


SIZES = st.one_of(
    st.integers(0, 300),
    st.integers(fc.DIRECT_FRAME_BYTES - 2, fc.DIRECT_FRAME_BYTES + 2),
    st.integers(100_000, 400_000),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(sizes=st.lists(SIZES, min_size=1, max_size=6), data=st.data(), use_tls=st.booleans())
def test_frames_come_out_whole_whatever_the_cuts(
    sizes: list[int],
    data: st.DataObject,
    use_tls: bool,
    tls: tuple[ServerTls, ssl.SSLContext],
) -> None:
    payloads = [bytes([i + 1]) * n for i, n in enumerate(sizes)]
    stream = MAGIC + b"".join(frame(p) for p in payloads)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=8))
    got = asyncio.run(_through(stream, cuts, tls=tls if use_tls else None))
    assert got == [*payloads, None]


@pytest.mark.parametrize("use_tls", [False, True], ids=["tcp", "tls"])
def test_a_frame_in_parts_comes_out_whole_before_the_input_ends(
    monkeypatch: pytest.MonkeyPatch, use_tls: bool, tls: tuple[ServerTls, ssl.SSLContext]
) -> None:
    """Over DIRECT_PART_BYTES a frame is received in parts (memory taken as it comes). Over
    TLS the transport asks for a buffer again before the reader runs: the next part's
    bytes must go to that part, not to the connection's buffer (they did, and the frame
    never completed)."""
    monkeypatch.setattr(fc, "CHUNK_BYTES", 32 << 10)
    monkeypatch.setattr(fc, "DIRECT_PART_BYTES", 100_000)
    payload = bytes(range(256)) * 1200  # 307,200 bytes: 4 parts
    data = MAGIC + frame(payload) + frame(b"next")
    got = asyncio.run(_through(data, [70_000, 250_000], tls=tls if use_tls else None, frames=2))
    assert got == [payload, b"next", None]


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        (MAGIC + struct.pack(">I", LIMIT + 1), MessageTooLargeError, "exceeds the limit"),
        (MAGIC + frame(b"x" * 100)[:-1], FrameError, "inside a frame (99 of 100 bytes)"),
        (MAGIC + frame(b"x" * 200_000)[:-7], FrameError, "(199993 of 200000 bytes)"),
        (MAGIC + b"\x00\x00", FrameError, "inside a frame header (2 of 4 bytes)"),
        (b"GET / HTTP/1.1\r\n", FrameError, "not the weir native TCP protocol"),
    ],
    ids=["over-limit", "cut-small", "cut-large", "cut-header", "wrong-magic"],
)
def test_bad_input_is_the_error_the_front_reports(
    data: bytes, error: type[Exception], message: str
) -> None:
    *frames, last = asyncio.run(_through(data, []))
    assert frames == [] and isinstance(last, error) and message in str(last), last
