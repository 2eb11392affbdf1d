"""The YDB front's write session after a failed write, against a real broker: a request
read after the partition actor failed a write of the session, but before the session's
ack task heard of it, must not be stored (it would land after a gap in the producer's
seq_nos, and the SDK's resend of the failed write would be answered as already written,
never stored). The native front's twin is tests/broker/test_write_session_acks.py.

The gRPC call is a recorder of what the session writes (the session's only use of it
here, besides ending the call): a real ydb SDK cannot time its next request into the
turns between the actor and the ack task."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.protocols.ydb.auth import Authenticator
from weir.protocols.ydb.protos import ydb_topic_pb2
from weir.protocols.ydb.shutdown import Shutdown
from weir.protocols.ydb.write_session import WriteSession

W = ydb_topic_pb2.StreamWriteMessage


class Call:
    """What the session writes to its call, and how it ended it."""

    def __init__(self) -> None:
        self.written: list[Any] = []
        self.aborted: str | None = None

    def invocation_metadata(self) -> tuple[()]:
        return ()

    def auth_context(self) -> dict[str, Any]:
        return {}

    async def write(self, message: Any) -> None:
        self.written.append(message)

    async def abort(self, code: Any, details: str) -> None:
        self.aborted = details
        raise asyncio.CancelledError  # as grpc.aio ends the handler


class NotStopping:
    stopping = False


def _write(seq: int, data: bytes) -> Any:
    return W.FromClient(
        write_request=W.WriteRequest(
            messages=[W.WriteRequest.MessageData(seq_no=seq, data=data)], codec=1
        )
    )


async def test_a_request_read_after_a_failed_write_is_not_stored(tmp_path: Path) -> None:
    b = await Broker.open(
        BrokerConfig(data_dir=tmp_path, retention_interval_s=3600, map_size=1 << 20)
    )
    try:
        await b.create_topic("t", partitions=1)
        call = Call()
        session = WriteSession(b, Authenticator(b), Shutdown(NotStopping()), call, "")  # type: ignore[arg-type]

        async def requests() -> AsyncIterator[Any]:
            yield W.FromClient(init_request=W.InitRequest(path="t", producer_id="p"))
            yield _write(1, b"x" * (2 << 20))  # past the 1 MiB map: its commit fails
            # the next request arrives in the turn after the actor failed the first write
            while not (
                session._pending
                and session._pending[-1].future is not None
                and session._pending[-1].future.done()
            ):
                await asyncio.sleep(0)
            yield _write(2, b"fits")
            await asyncio.Event().wait()  # the SDK keeps the stream open

        run = asyncio.ensure_future(session.run(requests()))
        await asyncio.wait_for(asyncio.gather(run, return_exceptions=True), 30)
        assert call.aborted is not None and "full" in call.aborted
        await asyncio.sleep(0.05)  # a write wrongly submitted would have committed by now
        assert b.actor("t", 0).end_offset == 0  # neither write is stored
        assert b.last_seq_no("t", 0, "p") is None  # the SDK's resend starts over at 1
    finally:
        await b.close()
