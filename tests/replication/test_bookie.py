"""The bookie: entries durable before the ack, fencing, replay, clear errors for bad requests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kazoo.client import KazooClient

from weir.errors import BadRequestError
from weir.replication import protocol as p
from weir.replication.bookie.ledger_storage import LmdbLedgerStorage
from weir.replication.bookie.service import Bookie, BookieLimits
from weir.replication.errors import LedgerFencedError, NoSuchEntryError, NoSuchLedgerError
from weir.replication.ledger.bookie_client import BookieClient
from weir.replication.local_cluster import BookieProcess
from weir.replication.registry import available_bookies


class InProcessBookie:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.storage: LmdbLedgerStorage | None = None
        self.bookie: Bookie | None = None
        self.port = 0

    async def start(self, limits: BookieLimits | None = None) -> BookieClient:
        self.storage = LmdbLedgerStorage(self.path)
        self.bookie = Bookie(self.storage, limits)
        _, self.port = await self.bookie.serve("127.0.0.1", self.port)
        return BookieClient(f"127.0.0.1:{self.port}")

    async def stop(self) -> None:
        assert self.bookie is not None and self.storage is not None
        await self.bookie.close()
        self.storage.close()


@pytest.fixture
async def bookie(tmp_path: Path) -> AsyncIterator[tuple[InProcessBookie, BookieClient]]:
    b = InProcessBookie(tmp_path / "bookie")
    client = await b.start()
    yield b, client
    await client.close()
    await b.stop()


async def test_add_read_and_lac(bookie: tuple[InProcessBookie, BookieClient]) -> None:
    _, c = bookie
    await asyncio.gather(*(c.add(7, e, e - 1, f"entry {e}".encode()) for e in range(10)))
    assert (await c.read(7, 3)).payload == b"entry 3"
    assert (await c.read(7, 9)).lac == 8  # the highest LAC piggybacked on an add
    assert await c.read_lac(7) == 8
    with pytest.raises(NoSuchEntryError, match="no entry 10 of ledger 7"):
        await c.read(7, 10)
    with pytest.raises(NoSuchLedgerError, match="no ledger 8"):
        await c.read_lac(8)


async def test_fence_refuses_the_writer_but_not_a_recoverer(
    bookie: tuple[InProcessBookie, BookieClient],
) -> None:
    _, c = bookie
    await c.add(1, 0, -1, b"a")
    assert await c.read_lac(1, fence=True) == -1
    with pytest.raises(LedgerFencedError, match="ledger 1 is fenced"):
        await c.add(1, 1, 0, b"b")
    await c.add(1, 1, 0, b"b", recovery=True)  # re-replication by the recoverer passes
    assert (await c.read(1, 1)).payload == b"b"
    # fencing a ledger this bookie never saw fences it too: a late add is refused
    with pytest.raises(NoSuchEntryError):
        await c.read(2, 0, fence=True)
    with pytest.raises(LedgerFencedError):
        await c.add(2, 0, -1, b"late")


async def test_replay_restores_entries_fence_and_lac(tmp_path: Path) -> None:
    b = InProcessBookie(tmp_path / "bookie")
    c = await b.start()
    await asyncio.gather(*(c.add(5, e, e - 1, b"x%d" % e) for e in range(4)))
    await c.read_lac(5, fence=True)
    await c.close()
    await b.stop()
    c = await b.start()
    assert await c.read_lac(5) == 2
    assert [(await c.read(5, e)).payload for e in range(4)] == [b"x0", b"x1", b"x2", b"x3"]
    with pytest.raises(LedgerFencedError):
        await c.add(5, 4, 3, b"after restart")
    await c.close()
    await b.stop()


async def test_malformed_requests_get_bad_request_and_change_nothing(
    bookie: tuple[InProcessBookie, BookieClient],
) -> None:
    b, c = bookie
    await c.add(3, 0, -1, b"kept")
    reader, writer = await asyncio.open_connection("127.0.0.1", b.port)
    for body in (
        bytes([p.Op.READ]) + (9).to_bytes(8, "big") + b"\x00" * 3,  # too short
        bytes([99]) + (10).to_bytes(8, "big") + b"junk",  # unknown op
        bytes([p.Op.ADD]) + (11).to_bytes(8, "big") + b"\x00" * 10,  # short ADD
    ):
        writer.write(p.frame(body))
        resp = p.decode_response(
            await reader.readexactly(p.frame_length(await reader.readexactly(4)))
        )
        assert isinstance(resp, p.ErrorResponse)
        assert resp.status == p.Status.BAD_REQUEST
    # a frame announcing more than the limit closes the connection
    writer.write((p.MAX_FRAME + 1).to_bytes(4, "big"))
    assert await reader.read() == b""
    writer.close()
    assert (await c.read(3, 0)).payload == b"kept"
    with pytest.raises(NoSuchEntryError):
        await c.read(3, 1)


def test_codec_round_trip_and_truncation() -> None:
    reqs: list[p.Request] = [
        p.AddRequest(1, 2, 3, -1, p.FLAG_RECOVERY, b"payload"),
        p.ReadRequest(4, 5, 6, p.FLAG_FENCE),
        p.ReadLacRequest(7, 8, 0),
        p.ReadLacRequest(8, 9, p.FLAG_LONG_POLL, previous=41, timeout_ms=5000),
    ]
    for req in reqs:
        frame = p.encode_request(req)
        assert p.frame_length(frame[:4]) == len(frame) - 4
        assert p.decode_request(frame[4:]) == req
        for cut in range(9, len(frame) - 4):
            if isinstance(req, p.AddRequest) and cut >= 9 + 25:
                continue  # a shorter payload is still a valid ADD
            with pytest.raises(BadRequestError):
                p.decode_request(frame[4 : 4 + cut])
    resps: list[p.Response] = [
        p.AddResponse(1, 2, 3),
        p.ReadResponse(4, 5, 6, 7, b"data"),
        p.ReadLacResponse(8, 9, -1),
        p.ErrorResponse(p.Op.READ, 10, p.Status.FENCED, "fenced"),
    ]
    for resp in resps:
        assert p.decode_response(p.encode_response(resp)[4:]) == resp


async def test_bookie_process_registers_and_replays(
    zookeeper: object, kazoo: KazooClient, zk_root: str, tmp_path: Path
) -> None:
    hosts = zookeeper.hosts  # type: ignore[attr-defined]
    proc = BookieProcess(tmp_path / "b", hosts, zk_root).start()
    try:
        assert list(available_bookies(kazoo, zk_root)) == [proc.address]
        c = BookieClient(proc.address)
        await asyncio.gather(*(c.add(9, e, e - 1, b"e%d" % e) for e in range(50)))
        await c.close()
        proc.kill()  # SIGKILL: every acknowledged add must be there after the restart
        proc.start()
        # the dead process's node was replaced by the new one's
        assert list(available_bookies(kazoo, zk_root)) == [proc.address]
        c = BookieClient(proc.address)
        assert [(await c.read(9, e)).payload for e in range(50)] == [b"e%d" % e for e in range(50)]
        await c.close()
        proc.stop()
        assert available_bookies(kazoo, zk_root) == {}  # a clean stop unregisters
    finally:
        proc.kill()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_decoding_any_bytes_gives_a_request_or_a_protocol_error(body: bytes) -> None:
    with contextlib.suppress(p.ProtocolError):
        p.decode_request(body)
    with contextlib.suppress(p.ProtocolError):
        p.decode_response(body)


_PROTECTED = 0xFFFF_FFFF_FFFF_FFF0  # a ledger id random requests will not name


def _is_long_poll(body: bytes) -> bool:
    try:
        req = p.decode_request(body)
    except p.ProtocolError:
        return False
    return isinstance(req, p.ReadLacRequest) and bool(req.flags & p.FLAG_LONG_POLL)


def _mutations() -> st.SearchStrategy[bytes]:
    valid = st.sampled_from(
        [
            p.encode_request(p.AddRequest(1, 5, 0, -1, 0, b"abc"))[4:],
            p.encode_request(p.ReadRequest(2, 5, 0, 0))[4:],
            p.encode_request(p.ReadLacRequest(3, 5, 0))[4:],
        ]
    )
    truncated = st.tuples(valid, st.integers(0, 40)).map(lambda t: t[0][: t[1]])
    flipped = st.tuples(valid, st.integers(0, 40), st.integers(1, 255)).map(
        lambda t: (
            t[0][: t[1]] + bytes([t[0][t[1]] ^ t[2]]) + t[0][t[1] + 1 :]
            if t[1] < len(t[0])
            else t[0]
        )
    )
    return st.one_of(st.binary(min_size=9, max_size=60), truncated, flipped)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_mutations(), min_size=1, max_size=40))
def test_fuzzed_requests_get_an_answer_and_leave_stored_entries_intact(
    tmp_path_factory: pytest.TempPathFactory, bodies: list[bytes]
) -> None:
    async def run() -> None:
        b = InProcessBookie(tmp_path_factory.mktemp("fuzz"))
        c = await b.start()
        try:
            await asyncio.gather(*(c.add(_PROTECTED, e, e - 1, b"keep %d" % e) for e in range(3)))
            reader, writer = await asyncio.open_connection("127.0.0.1", b.port)
            for body in bodies:
                if _is_long_poll(body):
                    continue  # a valid request the bookie may hold for its timeout
                writer.write(p.frame(body))
                if len(body) < 9:
                    assert await reader.read() == b""  # no request id to answer: closed
                    break
                n = p.frame_length(await reader.readexactly(4))
                resp = p.decode_response(await reader.readexactly(n))
                assert resp.request_id == p.request_head(body)[1]
            writer.close()
            assert [(await c.read(_PROTECTED, e)).payload for e in range(3)] == [
                b"keep 0",
                b"keep 1",
                b"keep 2",
            ]
            assert await c.read_lac(_PROTECTED) == 1
        finally:
            await c.close()
            await b.stop()

    asyncio.run(run())


async def test_long_poll_lac_waits_for_an_add_that_moves_it(
    bookie: tuple[InProcessBookie, BookieClient],
) -> None:
    _, c = bookie
    await c.add(4, 0, -1, b"a")
    await c.add(4, 1, 0, b"b")
    assert await c.wait_lac(4, previous=-1, timeout=30) == 0  # already past: at once
    poll = asyncio.ensure_future(c.wait_lac(4, previous=0, timeout=30))
    assert await c.read_lac(4) == 0  # answered after the poll was taken: it is waiting
    assert not poll.done()
    await c.add(4, 2, 1, b"c")  # carries LAC 1
    assert await poll == 1
    # a poll that times out answers the LAC as it is; an unknown ledger says so
    assert await c.wait_lac(4, previous=1, timeout=0.05) == 1
    with pytest.raises(NoSuchLedgerError):
        await c.wait_lac(404, previous=-1, timeout=0.05)


async def test_long_poll_lac_learns_of_a_fence_and_of_a_new_ledger(
    bookie: tuple[InProcessBookie, BookieClient],
) -> None:
    _, c = bookie
    fresh = asyncio.ensure_future(c.wait_lac(6, previous=-1, timeout=30))
    await c.add(5, 0, -1, b"x")
    polled = asyncio.ensure_future(c.wait_lac(5, previous=-1, timeout=30))
    await c.read_lac(5)
    assert not fresh.done() and not polled.done()
    await c.add(6, 0, -1, b"y")
    await c.add(6, 1, 0, b"z")
    assert await fresh == 0
    await c.read_lac(5, fence=True)
    assert await polled == -1  # fenced: nothing more will come from the writer


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (BookieLimits(max_requests_per_conn=1), "on this connection"),
        (BookieLimits(max_bytes_per_conn=150), "on this connection"),
        (BookieLimits(max_requests=1), "on this bookie"),
    ],
)
async def test_requests_past_the_in_flight_limits_are_refused_at_once(
    tmp_path: Path, limits: BookieLimits, message: str
) -> None:
    """Ten adds arrive in one segment: the bookie takes the first and refuses the others
    with OVERLOADED before the first commit is done; what it took is stored."""
    b = InProcessBookie(tmp_path / "bookie")
    c = await b.start(limits)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", b.port)
        writer.write(
            b"".join(
                p.encode_request(p.AddRequest(i, 1, i, i - 1, 0, b"x" * 100)) for i in range(10)
            )
        )
        resps = []
        for _ in range(10):
            n = p.frame_length(await reader.readexactly(4))
            resps.append(p.decode_response(await reader.readexactly(n)))
        writer.close()
        ok = [r for r in resps if isinstance(r, p.AddResponse)]
        refused = [r for r in resps if isinstance(r, p.ErrorResponse)]
        assert [r.request_id for r in ok] == [0]
        assert len(refused) == 9
        assert all(r.status == p.Status.OVERLOADED and message in r.message for r in refused)
        assert (await c.read(1, 0)).payload == b"x" * 100
        with pytest.raises(NoSuchEntryError):
            await c.read(1, 1)
    finally:
        await c.close()
        await b.stop()
