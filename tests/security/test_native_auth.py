"""Authentication on both fronts of one server with anonymous access off.

The weir SDK, the `weir` CLI, raw native calls (every method of weir.proto) and the
`ydb` SDK are refused without credentials, with a wrong password and with a forged
or garbage token, and served with the right user and password.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
import ydb

import weir
import weir.aio
from tests.cli.conftest import Weir, one_line_error
from tests.conftest import ServerProcess
from tests.security.conftest import AUTH_ENV, PASSWORD, USER
from tests.ydb.conftest import connect as ydb_connect
from tests.ydb.conftest import path as ydb_path
from weir.errors import UnauthorizedError
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.status import CODE_KEY

ANONYMOUS_REFUSED = "authentication required"
CREDS = (USER, PASSWORD)


@pytest.fixture
def topic(auth_server: ServerProcess, topic_name: str) -> Iterator[str]:
    """A topic with one message and a consumer, made with credentials."""
    with weir.Client(auth_server.endpoint, credentials=CREDS) as c:
        c.create_topic(topic_name, partitions=2, consumers=["c"])
        with c.writer(topic_name, partition=0) as w:
            w.write(b"stored")
    yield topic_name


def calls(c: weir.Client, topic: str) -> dict[str, Callable[[], object]]:
    """Every SDK call a user makes, by name."""

    def write() -> None:
        with c.writer(topic, producer_id="anon") as w:
            w.write(b"x")
            w.flush(timeout=10)

    def read() -> None:
        with c.reader(topic, consumer="c") as r:
            r.receive_batch(timeout=10)

    return {
        "create_topic": lambda: c.create_topic(topic + "-new"),
        "describe_topic": lambda: c.describe_topic(topic),
        "alter_topic": lambda: c.alter_topic(topic, retention=dt.timedelta(hours=1)),
        "list_topics": c.list_topics,
        "describe_consumer": lambda: c.describe_consumer(topic, "c"),
        "commit_offset": lambda: c.commit_offset(topic, 0, "c", 1),
        "offsets_for_time": lambda: c.offsets_for_time(topic, 0),
        "read_range": lambda: list(c.read_range(topic, 0, 0, 1)),
        "write": write,
        "read": read,
        "drop_topic": lambda: c.drop_topic(topic),
    }


def test_the_sdk_without_credentials_is_refused_on_every_call(
    auth_server: ServerProcess, topic: str
) -> None:
    with weir.Client(auth_server.endpoint) as c:
        for name, call in calls(c, topic).items():
            with pytest.raises(UnauthorizedError, match=ANONYMOUS_REFUSED):
                call()
            print("refused:", name)
    with weir.Client(auth_server.endpoint, credentials=CREDS) as c:
        info = c.describe_topic(topic)  # nothing was changed, dropped or written
        assert [p.end_offset for p in info.partition_info] == [1, 0]
        assert c.describe_consumer(topic, "c").partitions[0].committed_offset == 0


def test_the_sdk_with_credentials_does_everything(auth_server: ServerProcess, topic: str) -> None:
    with weir.Client(auth_server.endpoint, credentials=weir.UserPassword(USER, PASSWORD)) as c:
        for name, call in calls(c, topic).items():
            call()
            print("served:", name)
        assert c.list_topics(prefix=topic) == [c.describe_topic(topic + "-new")]
        c.drop_topic(topic + "-new")


def test_the_asyncio_sdk_logs_in_once_and_reuses_its_token(
    auth_server: ServerProcess, topic: str
) -> None:
    async def run() -> int:
        creds = weir.aio.UserPassword(USER, PASSWORD)
        async with weir.aio.Client(auth_server.endpoint, credentials=creds) as c:
            await c.describe_topic(topic)
            w = c.writer(topic, producer_id="aio")
            await w.write(b"a")
            await w.close()
            chunks = [ch async for ch in c.read_range(topic, 0, 0, 1)]
            assert chunks[0].messages()[0].data == b"stored"
            assert c.conn.tokens is not None
            return c.conn.tokens.logins

    assert asyncio.run(run()) == 1


def test_a_wrong_password_is_refused_with_a_clear_error(
    auth_server: ServerProcess, topic: str
) -> None:
    for creds in ((USER, "wrong"), ("mallory", PASSWORD)):
        with weir.Client(auth_server.endpoint, credentials=creds) as c:
            with pytest.raises(UnauthorizedError) as err:
                c.describe_topic(topic)
            assert err.value.message == (f"login as {creds[0]!r} refused: Invalid user or password")
            assert not err.value.retryable
            w = c.writer(topic, producer_id="bad")
            # The writer's session logs in on its own: the refusal may reach it before
            # this write (then the write raises) or after (then flush raises).
            with pytest.raises(UnauthorizedError, match="Invalid user or password"):
                w.write(b"x")
                w.flush(timeout=10)


def raw_refusal(
    endpoint: str, metadata: tuple[tuple[str, str], ...] = ()
) -> dict[str, tuple[grpc.StatusCode, str, str]]:
    """Every method of weir.proto called raw: (status, details, weir code) per method."""
    service = pb.DESCRIPTOR.services_by_name["Weir"]
    out = {}
    with grpc.insecure_channel(endpoint) as channel:
        for m in service.methods:
            if m.name == "Login":
                continue
            request = getattr(pb, m.input_type.name)()
            name = f"/{service.full_name}/{m.name}"
            ser = type(request).SerializeToString
            de = getattr(pb, m.output_type.name).FromString
            try:
                if m.client_streaming:
                    responses = channel.stream_stream(name, ser, de)(
                        iter([request]), metadata=metadata, timeout=10
                    )
                    list(responses)
                elif m.server_streaming:
                    list(
                        channel.unary_stream(name, ser, de)(request, metadata=metadata, timeout=10)
                    )
                else:
                    channel.unary_unary(name, ser, de)(request, metadata=metadata, timeout=10)
            except grpc.RpcError as exc:
                code = dict(exc.trailing_metadata() or ()).get(CODE_KEY, "")
                out[m.name] = (exc.code(), exc.details(), code)
            else:
                out[m.name] = (grpc.StatusCode.OK, "", "")
    return out


def test_every_native_method_refuses_anonymous_forged_and_garbage_tokens(
    auth_server: ServerProcess,
) -> None:
    methods = {m.name for m in pb.DESCRIPTOR.services_by_name["Weir"].methods} - {"Login"}
    anonymous = raw_refusal(auth_server.endpoint)
    assert set(anonymous) == methods
    for name, (status, details, code) in anonymous.items():
        assert status == grpc.StatusCode.UNAUTHENTICATED, name
        assert ANONYMOUS_REFUSED in details and code == "UNAUTHORIZED", name
    forged = "YWxpY2U.99999999999999.c2lnbmVkIGJ5IG5vYm9keQ"  # "alice", far future, bad signature
    for token, message, weir_code in (
        (forged, "invalid auth token", "TOKEN_REJECTED"),
        ("garbage", "malformed auth token", "UNAUTHORIZED"),
    ):
        refused = raw_refusal(auth_server.endpoint, (("authorization", f"Bearer {token}"),))
        for name, (status, details, code) in refused.items():
            assert (status, details, code) == (
                grpc.StatusCode.UNAUTHENTICATED,
                message,
                weir_code,
            ), name
    other = raw_refusal(auth_server.endpoint, (("authorization", "Basic YWxpY2U6c2VjcmV0"),))
    assert all("must be 'Bearer <token>'" in d for _, d, _ in other.values())


def test_the_ydb_sdk_is_refused_too_and_served_with_the_same_user(
    auth_server: ServerProcess, topic: str
) -> None:
    with pytest.raises(ydb.issues.ConnectionFailure, match=ANONYMOUS_REFUSED):
        ydb_connect(auth_server)
    driver = ydb_connect(
        auth_server, credentials=ydb.StaticCredentials.from_user_password(USER, PASSWORD)
    )
    try:
        info = driver.topic_client.describe_topic(ydb_path(topic))
        assert info.partitions[0].partition_stats.partition_end == 1
    finally:
        driver.stop(timeout=5)


def test_a_token_the_server_no_longer_accepts_makes_the_sdk_log_in_again(
    tmp_path: Path, topic_name: str
) -> None:
    """A server that comes back with another secret (another data directory) refuses the
    cached token: a writer's reconnect and unary calls log in again and go on."""
    other = ServerProcess(tmp_path / "b", env=AUTH_ENV).start()
    try:
        with weir.Client(other.endpoint, credentials=CREDS) as c:
            c.create_topic(topic_name)
    finally:
        other.stop()
    srv = ServerProcess(tmp_path / "a", env=AUTH_ENV).start()
    try:
        with weir.Client(srv.endpoint, credentials=CREDS) as c:
            tokens = c._aio.conn.tokens
            assert tokens is not None
            c.create_topic(topic_name)
            w = c.writer(topic_name, producer_id="p")
            w.write(b"one")
            w.flush(timeout=30)
            srv.restart()  # same data, same secret: the token is still good
            c.describe_topic(topic_name)
            assert tokens.logins == 1
            srv.stop()
            other.port = srv.port
            other.start()  # another secret on the same port
            w.write(b"two")
            w.flush(timeout=30)  # the writer's stream was refused once, then logged in again
            assert tokens.logins == 2
            w.close()
            chunks = c.read_range(topic_name, 0, 0)
            assert [m.data for ch in chunks for m in ch.messages()] == [b"two"]
    finally:
        srv.kill()
        other.kill()


def test_the_cli_needs_credentials_for_every_client_command(
    auth_server: ServerProcess, topic: str
) -> None:
    cli = Weir(auth_server.endpoint)
    commands = [
        ["topic", "create", topic + "-cli"],
        ["topic", "describe", topic],
        ["topic", "alter", topic, "--retention", "1h"],
        ["topic", "list"],
        ["consumer", "describe", topic, "c"],
        ["consumer", "commit", topic, "c", "0", "1"],
        ["read", topic],
    ]
    # without credentials: refused, all of them (run at once: they are independent)
    for args, res in zip(commands, cli.many(*commands), strict=True):
        assert res.code == 1, (args, res.err)
        assert ANONYMOUS_REFUSED in one_line_error(res), args
    for args in (["write", topic], ["topic", "drop", topic]):
        res = cli(*args, input="x\n")
        assert res.code == 1 and ANONYMOUS_REFUSED in one_line_error(res), args
    wrong = cli("topic", "describe", topic, "--user", USER, "--password", "wrong")
    assert wrong.code == 1
    assert "login as 'alice' refused: Invalid user or password" in one_line_error(wrong)
    missing = cli("topic", "describe", topic, "--user", USER)
    assert missing.code == 2 and "needs --password or WEIR_PASSWORD" in one_line_error(missing)

    # with them: --user/--password, or WEIR_USER/WEIR_PASSWORD
    flags = ["--user", USER, "--password", PASSWORD]
    for args, res in zip(commands, cli.many(*(c + flags for c in commands)), strict=True):
        assert res.code == 0, (args, res.err)
    env = {"WEIR_USER": USER, "WEIR_PASSWORD": PASSWORD}
    assert cli("write", topic, "--partition", "0", input="y\n", env=env).code == 0
    assert cli("read", topic, "--partition", "0", env=env).text.split() == ["stored", "y"]
    for name in (topic, topic + "-cli"):
        assert cli("topic", "drop", name, env=env).code == 0


async def test_a_refused_stream_always_ends_with_its_status_not_a_write_error(
    auth_server: ServerProcess,
) -> None:
    """A client opens a stream and writes at once. Ended before that write landed, gRPC's
    client saw "Internal error from Core" instead of UNAUTHENTICATED (about 1 in 12), and
    the SDK took it for an outage to retry. The server reads first, then refuses."""
    async with grpc.aio.insecure_channel(auth_server.endpoint) as channel:
        open_stream = channel.stream_stream(
            "/weir.v1.Weir/StreamWrite",
            request_serializer=pb.WriteRequest.SerializeToString,
            response_deserializer=pb.WriteResponse.FromString,
        )
        codes = []
        for _ in range(100):
            call = open_stream()
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call.write(pb.WriteRequest(init=pb.WriteInit(topic="t", producer_id="p")))
                await call.read()
            codes.append(caught.value.code())
        assert set(codes) == {grpc.StatusCode.UNAUTHENTICATED}, codes
