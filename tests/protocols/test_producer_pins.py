"""Producer pins seen through the native protocol: two first sessions at once, then a restart."""

from __future__ import annotations

import asyncio
from typing import Any

import weir
from tests.conftest import ServerProcess
from weir.client.connection import Connection
from weir.protocols.native import weir_pb2 as pb


async def open_session(endpoint: str, topic: str, producer: str, partition: int | None) -> Any:
    """The first answer of a write session (init result or error); the session then ends."""
    conn = Connection(endpoint)
    try:
        call = conn.stream_write()
        init = pb.WriteInit(topic=topic, producer_id=producer)
        if partition is not None:
            init.partition = partition
        await call.write(pb.WriteRequest(init=init))
        resp = await call.read()
        await call.done_writing()
        return resp
    finally:
        await conn.close()


async def race(endpoint: str, topic: str) -> list[Any]:
    return list(
        await asyncio.gather(
            open_session(endpoint, topic, "p", 0), open_session(endpoint, topic, "p", 1)
        )
    )


def test_two_first_sessions_of_one_producer_get_one_pin_kept_across_a_restart(
    server: ServerProcess, topic_name: str
) -> None:
    with weir.Client(server.endpoint) as c:
        c.create_topic(topic_name, partitions=2)
    first = asyncio.run(race(server.endpoint, topic_name))
    won = [p for p, r in enumerate(first) if r.WhichOneof("kind") == "init"]
    lost = [r.error for r in first if r.WhichOneof("kind") == "error"]
    assert len(won) == 1 and len(lost) == 1, first
    pinned = won[0]
    assert first[pinned].init.partition == pinned
    assert lost[0].code == "BAD_REQUEST" and not lost[0].retryable
    assert f"pinned to partition {pinned} of {topic_name!r}, not {1 - pinned}" in lost[0].message

    with (
        weir.Client(server.endpoint) as c,
        c.writer(topic_name, producer_id="p", routing="pinned") as w,
    ):
        w.write(b"first")
        w.flush()
        assert w.partition == pinned
    server.restart()
    again = asyncio.run(race(server.endpoint, topic_name))
    assert again[pinned].init.partition == pinned
    assert again[pinned].init.last_seq_no == 1
    assert f"pinned to partition {pinned}" in again[1 - pinned].error.message
    anywhere = asyncio.run(open_session(server.endpoint, topic_name, "p", None))
    assert anywhere.init.partition == pinned
