"""The writer and the reader over both transports: gRPC and the native TCP port
(``transport="tcp"``).

The same behaviours, one test each, parametrised over the transport: what is written
reads back with its results, seq_nos continue and resends are skipped, a consumer's
reader commits and the next one resumes after the commit, a restarted server loses and
duplicates nothing, errors are typed, TLS and authentication hold (a TCP client without
credentials is refused as a gRPC one is). And a TCP writer or reader to a server whose
TCP port is off fails at once, naming the setting. (Revocation on both transports:
tests/security/test_revocation.py.)
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import weir
import weir.aio
from tests import native_tcp_raw as raw
from tests.conftest import ServerProcess
from tests.reliability.test_hostile import good_batch
from tests.security.certs import Authority
from weir.client.direct_writer import DirectWriterCore
from weir.errors import (
    BadRequestError,
    TokenRejectedError,
    UnauthorizedError,
    UnavailableError,
    UnknownNamespaceError,
)
from weir.protocols.native.framing import MAGIC

TRANSPORTS = ["grpc", "tcp"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tcp_env(port: int = 0, **more: str) -> dict[str, str]:
    return {
        "WEIR_NATIVE_TCP_ENABLED": "true",
        "WEIR_NATIVE_TCP_LISTEN": f"127.0.0.1:{port}",
        **more,
    }


@pytest.fixture(scope="module")
def tcp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("tcp-server"), env=tcp_env())
    srv.start()
    yield srv
    srv.stop()


def client_of(srv: ServerProcess, transport: str, **kw: object) -> weir.Client:
    tcp = srv.native_tcp if transport == "tcp" else None
    return weir.Client(srv.endpoint, transport=transport, tcp_endpoint=tcp, **kw)


def read_stream(client: weir.Client, topic: str, n: int, **kw: object) -> list[weir.Message]:
    """``n`` messages through a reader (the client's transport), from the earliest."""
    out: list[weir.Message] = []
    with client.reader(topic, start="earliest", **kw) as r:  # type: ignore[arg-type]
        while len(out) < n:
            batch = r.receive_batch(timeout=30)
            assert batch is not None, f"{len(out)} of {n} messages read"
            out.extend(batch)
    return out


def read_all(client: weir.Client, topic: str) -> list[weir.Message]:
    out: list[weir.Message] = []
    for p in client.describe_topic(topic).partition_info:
        for chunk in client.read_range(topic, p.partition, p.start_offset, p.end_offset):
            out.extend(chunk.messages())
    return out


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_writes_read_back_with_results_and_dedup(
    tcp_server: ServerProcess, topic_name: str, transport: str
) -> None:
    with client_of(tcp_server, transport) as c:
        c.create_topic(topic_name, partitions=2)
        with c.writer(topic_name, producer_id="p", routing="pinned") as w:
            first = w.write_with_result(b"a", key="k", headers={"h": "1"})
            for i in range(3000):
                w.write(b"%d" % i)
            futs = [w.write_future(b"f") for _ in range(5)]
            w.flush()
            assert [f.result(10).offset for f in futs] == list(range(3001, 3006))
        assert first.offset == 0 and first.seq_no == 1 and not first.skipped
        # the next writer of the producer continues its seq_nos; resent ones are skipped
        w2 = c.writer(topic_name, producer_id="p").wait_init()
        assert w2.last_seq_no == 3006
        w2.close()
        w3 = c.writer(topic_name, producer_id="p")
        again = w3.write_with_result(b"again", seq_no=5)
        fresh = w3.write_with_result(b"new", seq_no=4000)
        w3.close()
        assert again.skipped and again.offset is None
        assert fresh.offset == 3006 and not fresh.skipped
        msgs = read_all(c, topic_name)
        assert len(msgs) == 3007
        assert msgs[0].key == b"k" and msgs[0].headers == {"h": "1"}
        assert [m.data for m in msgs[1:3001]] == [b"%d" % i for i in range(3000)]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_big_messages_arrive_intact(
    tcp_server: ServerProcess, topic_name: str, transport: str
) -> None:
    blobs = [bytes([i]) * (300_000 + i) for i in range(3)]
    # and one past the size the TCP port receives a frame in one piece (DIRECT_PART_BYTES)
    blobs.append(os.urandom(5 << 20))
    # and one past the parts a TCP reader receives read data in (READ_PART_BYTES)
    blobs.append(os.urandom(17 << 20))
    with client_of(tcp_server, transport) as c:
        c.create_topic(topic_name)
        with c.writer(topic_name, max_batch_bytes=24 << 20) as w:
            for b in blobs:
                w.write(b)
        assert [m.data for m in read_all(c, topic_name)] == blobs
        # and through a reader: read data frames past the TCP port's part size
        assert [m.data for m in read_stream(c, topic_name, len(blobs))] == blobs


def test_requests_sent_gathered_arrive_intact(
    tcp_server: ServerProcess, topic_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sync TCP writer (caller-driven) sends a request of 64 KiB or more as its pieces
    (framing, and each batch of 64 KiB or more as it is) in one sendmsg, and what the
    socket took in part goes on later: batches small and big side by side in a request,
    ~24 MB through a socket that fills, arrive byte for byte in order; so do requests of
    many small batches (their framing joined between the big pieces)."""
    pieces: list[int] = []  # what each request added to the socket's queue
    queue = DirectWriterCore._queue

    def counted(self: DirectWriterCore, req: Any) -> None:
        before = len(self._wq)
        queue(self, req)
        pieces.append(len(self._wq) - before)

    monkeypatch.setattr(DirectWriterCore, "_queue", counted)
    rnd = random.Random(26)
    sizes = [rnd.choice((1, 100, 10_240, 70_000, 300_000)) for _ in range(400)]
    blobs = [rnd.randbytes(n) for n in sizes]
    with client_of(tcp_server, "tcp") as c:
        c.create_topic(topic_name, partitions=2)
        # batches of at most 256 KiB: a request carries several, some under 64 KiB
        with c.writer(topic_name, partition=0, max_batch_bytes=256 << 10) as w:
            for b in blobs:
                w.write(b)
        assert max(pieces) > 1  # sent gathered, not joined
        # batches of at most 16 KiB: a big request of small batches
        small = [rnd.randbytes(rnd.choice((100, 5_000, 15_000))) for _ in range(600)]
        with c.writer(topic_name, partition=1, max_batch_bytes=16 << 10) as w:
            for b in small:
                w.write(b)
        got = read_all(c, topic_name)
        assert [m.data for m in got if m.partition == 0] == blobs
        assert [m.data for m in got if m.partition == 1] == small


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_consumer_commits_and_its_next_reader_resumes_after(
    tcp_server: ServerProcess, topic_name: str, transport: str
) -> None:
    n = 3000
    with client_of(tcp_server, transport) as c:
        c.create_topic(topic_name, partitions=2)
        with c.writer(topic_name, producer_id="p") as w:
            for i in range(n):
                w.write(b"%d" % i, key=b"k%d" % (i % 7), headers={"i": str(i)})
        first: list[weir.Message] = []
        with c.reader(topic_name, consumer="g", buffer_bytes=64 << 10) as r:
            while len(first) < n // 3:
                batch = r.receive_batch(timeout=30)
                assert batch is not None
                first.extend(batch)
                r.commit_with_ack(batch)
        rest: list[weir.Message] = []
        with c.reader(topic_name, consumer="g") as r:
            while len(first) + len(rest) < n:
                batch = r.receive_batch(timeout=30)
                assert batch is not None
                rest.extend(batch)
                r.commit_with_ack(batch)
        seen = first + rest
        # what the first reader committed is not delivered again, and nothing is lost
        assert sorted(int(m.data) for m in seen) == list(range(n))
        assert all(m.key == b"k%d" % (int(m.data) % 7) for m in seen)
        assert all(m.headers == {"i": m.data.decode()} for m in seen)
        assert c.describe_consumer(topic_name, "g").lag == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_asyncio_writer_and_reader(
    tcp_server: ServerProcess, topic_name: str, transport: str
) -> None:
    async def main() -> list[int | None]:
        tcp = tcp_server.native_tcp if transport == "tcp" else None
        async with weir.aio.Client(tcp_server.endpoint, transport=transport, tcp_endpoint=tcp) as c:
            await c.create_topic(topic_name)
            w = c.writer(topic_name, producer_id="aio")
            results = [await w.write_with_result(b"x%d" % i) for i in range(20)]
            await w.close()
            async with c.reader(topic_name, consumer="aio", start="earliest") as r:
                got: list[weir.aio.Message] = []
                while len(got) < 20:
                    batch = await r.receive_batch(timeout=30)
                    assert batch is not None
                    got.extend(batch)
                await r.commit_with_ack(got[-1])
            assert [m.data for m in got] == [b"x%d" % i for i in range(20)]
            assert (await c.describe_consumer(topic_name, "aio")).lag == 0
            return [r.offset for r in results]

    assert asyncio.run(main()) == list(range(20))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_errors_are_typed(tcp_server: ServerProcess, transport: str) -> None:
    with client_of(tcp_server, transport) as c:
        w = c.writer("no_such_namespace/topic", producer_id="x")
        with pytest.raises(UnknownNamespaceError, match="no_such_namespace does not exist"):
            w.wait_init()
        w.close()


# gRPC's twin: tests/client/test_writer.py::test_kill_9_mid_stream_loses_and_duplicates_nothing
# routing="pinned": the writer the caller's thread drives (weir.client.direct_writer)
@pytest.mark.parametrize("transport", ["tcp"])
@pytest.mark.parametrize("routing", [None, "pinned"])
def test_restart_mid_stream_loses_and_duplicates_nothing(
    tmp_path: Path, topic_name: str, transport: str, routing: str | None
) -> None:
    srv = ServerProcess(tmp_path / "data", env=tcp_env(free_port()))
    srv.start()
    try:
        with client_of(srv, transport) as c:
            c.create_topic(topic_name)
            w = c.writer(topic_name, producer_id="survivor", routing=routing).wait_init()
            n = 0
            for clean in (False, True):
                for _ in range(2000):
                    w.write(b"%d" % n)
                    n += 1
                # with messages in flight: kill -9, then a clean stop (its streams ack what
                # is in flight and end with UNAVAILABLE); the same ports again each time
                if clean:
                    srv.restart()
                else:
                    srv.kill()
                    srv.start()
            w.flush(timeout=60)
            assert w.reconnects >= 1
            w.close()
            assert [int(m.data) for m in read_all(c, topic_name)] == list(range(n))
    finally:
        srv.kill()


def test_a_tcp_reader_follows_a_restart_and_loses_nothing(tmp_path: Path, topic_name: str) -> None:
    """kill -9 under a consumer's reader on the TCP port: it reconnects by itself and goes on
    after its last acknowledged commit. Every message is delivered; none at or below a
    commit acknowledged before the kill is delivered again."""
    n = 3000
    srv = ServerProcess(tmp_path / "data", env=tcp_env(free_port()))
    srv.start()
    try:
        with client_of(srv, "grpc") as writing:
            writing.create_topic(topic_name)
            with writing.writer(topic_name) as w:
                for i in range(n):
                    w.write(b"%d" % i + b"." * 200)
                    if i % 100 == 99:
                        w.flush()  # stored batches of ~20 KB: the reader takes one or two
        # a client that only reads: its reader alone has been through on the TCP port
        with client_of(srv, "tcp") as c:
            before: list[int] = []
            after: list[int] = []
            with c.reader(topic_name, consumer="g", buffer_bytes=32 << 10) as r:
                while len(before) < n // 3:
                    batch = r.receive_batch(timeout=30)
                    assert batch is not None
                    before.extend(m.offset for m in batch)
                    r.commit_with_ack(batch)
                assert len(before) < n
                srv.kill()
                srv.start()
                while len(set(before) | set(after)) < n:
                    batch = r.receive_batch(timeout=60)
                    assert batch is not None, f"{len(set(before) | set(after))} of {n} read"
                    after.extend(m.offset for m in batch)
                    r.commit_with_ack(batch)
                assert r.reconnects >= 1
            assert sorted(set(before) | set(after)) == list(range(n))
            assert min(after) >= max(before) + 1  # nothing committed came again
            assert c.describe_consumer(topic_name, "g").lag == 0
    finally:
        srv.kill()


@pytest.mark.parametrize("routing", [None, "pinned"])
def test_tcp_writer_to_a_server_without_the_port_fails_at_once(
    shared_server: ServerProcess, topic_name: str, routing: str | None
) -> None:
    port = free_port()  # nothing listens there
    with weir.Client(
        shared_server.endpoint, transport="tcp", tcp_endpoint=f"127.0.0.1:{port}"
    ) as c:
        w = c.writer(topic_name, routing=routing)
        with pytest.raises(UnavailableError, match=r"connection refused.*native_tcp\.enabled"):
            w.wait_init(timeout=20)
        w.close()
        if routing is None:  # (a reader has no routing)
            r = c.reader(topic_name)
            with pytest.raises(UnavailableError, match=r"connection refused.*native_tcp\.enabled"):
                r.wait_connected(timeout=20)
            r.close()


@pytest.mark.parametrize("routing", [None, "pinned"])
def test_the_tcp_port_is_learned_from_the_server(
    tcp_server: ServerProcess, topic_name: str, routing: str | None
) -> None:
    """No tcp_endpoint: the client asks the server (DescribeServer) for its TCP port,
    here an ephemeral one, instead of assuming 2137."""
    with weir.Client(tcp_server.endpoint, transport="tcp") as c:
        c.create_topic(topic_name)
        with c.writer(topic_name, routing=routing) as w:
            assert w.write_with_result(b"found").offset == 0
        assert c._aio.conn.tcp_endpoint == tcp_server.native_tcp

    async def aio() -> int | None:
        async with weir.aio.Client(tcp_server.endpoint, transport="tcp") as ac:
            w = ac.writer(topic_name, routing=routing)
            offset = (await w.write_with_result(b"found too")).offset
            await w.close()
            return offset

    assert asyncio.run(aio()) == 1


@pytest.mark.parametrize("routing", [None, "pinned"])
def test_a_server_whose_tcp_port_is_off_says_so(
    shared_server: ServerProcess, topic_name: str, routing: str | None
) -> None:
    with weir.Client(shared_server.endpoint, transport="tcp") as c:
        w = c.writer(topic_name, routing=routing)
        with pytest.raises(UnavailableError, match=r"native_tcp\.enabled = false"):
            w.wait_init(timeout=20)
        w.close()
        if routing is None:  # (a reader has no routing)
            r = c.reader(topic_name)
            with pytest.raises(UnavailableError, match=r"native_tcp\.enabled = false"):
                r.wait_connected(timeout=20)
            r.close()


def test_unknown_transport_is_refused(shared_server: ServerProcess) -> None:
    with pytest.raises(BadRequestError, match="transport must be"):
        weir.Client(shared_server.endpoint, transport="udp")


# ---------------------------------------------------------------- authentication and TLS

USER, PASSWORD = "alice", "secret"


@pytest.fixture(scope="module")
def auth_tcp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(
        tmp_path_factory.mktemp("auth-tcp-server"),
        env=tcp_env(
            WEIR_AUTH_USERS=f"{USER}:{PASSWORD}",
            WEIR_AUTH_ALLOW_ANONYMOUS="false",
        ),
    )
    srv.start()
    yield srv
    srv.stop()


def test_tcp_writer_needs_credentials_when_auth_is_on(
    auth_tcp_server: ServerProcess, topic_name: str
) -> None:
    with client_of(auth_tcp_server, "tcp", credentials=(USER, PASSWORD)) as c:
        c.create_topic(topic_name)
        with c.writer(topic_name, producer_id="authed") as w:
            assert w.write_with_result(b"ok").offset == 0
        with c.writer(topic_name, producer_id="authed-pinned", routing="pinned") as w:
            assert w.write_with_result(b"ok too").offset == 1
        for routing in (None, "pinned"):
            # no credentials: refused with the fatal error, not an open door
            with client_of(auth_tcp_server, "tcp") as anon:
                w = anon.writer(topic_name, producer_id="anon", routing=routing)
                with pytest.raises(UnauthorizedError, match="authentication required"):
                    w.wait_init(timeout=20)
                w.close()
                r = anon.reader(topic_name)
                with pytest.raises(UnauthorizedError, match="authentication required"):
                    r.wait_connected(timeout=20)
                r.close()
            # a token the server never issued: refused too
            with client_of(auth_tcp_server, "tcp", credentials=weir.Token("forged")) as bad:
                w = bad.writer(
                    topic_name, producer_id="forged", delivery_timeout=2, routing=routing
                )
                with pytest.raises((UnauthorizedError, TokenRejectedError)):
                    w.write_with_result(b"no", timeout=10)
                w.close()
        # raw bytes: a hello without a token, an init and a batch pipelined behind it are
        # answered with the refusal alone, and the batch is not stored
        start = MAGIC + raw.hello() + raw.init(topic_name, "raw")
        frames, rest = raw.exchange(
            auth_tcp_server.native_tcp, start + raw.batches(good_batch(producer="raw"))
        )
        assert raw.error_code(frames) == "UNAUTHORIZED" and len(frames) == 1 and not rest
        assert [m.data for m in read_all(c, topic_name)] == [b"ok", b"ok too"]
        assert [m.data for m in read_stream(c, topic_name, 2)] == [b"ok", b"ok too"]


def test_tcp_writer_over_tls(tmp_path: Path, topic_name: str) -> None:
    ca = Authority(tmp_path / "ca")
    cert = ca.issue("weir-server", stem="server")
    srv = ServerProcess(
        tmp_path / "data",
        env=tcp_env(WEIR_TLS_CERT_FILE=str(cert.cert), WEIR_TLS_KEY_FILE=str(cert.key)),
    )
    srv.start()
    try:
        with client_of(srv, "tcp", tls=weir.Tls(ca=ca.path)) as c:
            c.create_topic(topic_name)
            with c.writer(topic_name) as w:
                assert w.write_with_result(b"secret").offset == 0
            with c.writer(topic_name, routing="pinned", max_batch_bytes=6 << 20) as w:
                assert w.write_with_result(b"secret too").offset == 1
                # requests past DIRECT_FRAME_BYTES and DIRECT_PART_BYTES, read off TLS
                # into buffers of their own; each answered before the next is sent
                assert w.write_with_result(b"s" * 300_000).offset == 2
                assert w.write_with_result(b"t" * (5 << 20)).offset == 3
                assert w.write_with_result(b"after").offset == 4
            # a reader over TLS, its frames past the part size too
            got = [m.data for m in read_stream(c, topic_name, 5)]
            assert got == [b"secret", b"secret too", b"s" * 300_000, b"t" * (5 << 20), b"after"]
        # a client that does not trust the server's CA is told why
        other = Authority(tmp_path / "other", "other CA")
        with weir.Client(
            srv.endpoint,
            transport="tcp",
            tcp_endpoint=srv.native_tcp,
            tls=weir.Tls(ca=other.path),
        ) as c:
            for routing in (None, "pinned"):
                w = c.writer(topic_name, routing=routing)
                with pytest.raises(UnavailableError, match="not signed by the trusted CA"):
                    w.wait_init(timeout=20)
                w.close()
            r = c.reader(topic_name)
            with pytest.raises(UnavailableError, match="not signed by the trusted CA"):
                r.wait_connected(timeout=20)
            r.close()
    finally:
        srv.stop()


def test_a_client_certificate_authenticates_a_tcp_writer(tmp_path: Path, topic_name: str) -> None:
    """mTLS with anonymous access off: the certificate is the credential on the TCP port too."""
    ca = Authority(tmp_path / "ca")
    cert = ca.issue("weir-server", stem="server")
    bob = ca.issue("bob", server=False)
    srv = ServerProcess(
        tmp_path / "data",
        env=tcp_env(
            WEIR_TLS_CERT_FILE=str(cert.cert),
            WEIR_TLS_KEY_FILE=str(cert.key),
            WEIR_TLS_CLIENT_CA_FILE=str(ca.path),
            WEIR_AUTH_ALLOW_ANONYMOUS="false",
        ),
    )
    srv.start()
    try:
        with client_of(srv, "tcp", tls=weir.Tls(ca=ca.path, cert=bob.cert, key=bob.key)) as c:
            c.create_topic(topic_name)
            with c.writer(topic_name) as w:
                assert w.write_with_result(b"from bob").offset == 0
            assert [m.data for m in read_stream(c, topic_name, 1)] == [b"from bob"]
        # (without a certificate the handshake is refused, after the 10 s a first contact
        # closed before any answer is given, as on gRPC: tests/security/test_tls.py)
    finally:
        srv.stop()
