"""Helpers for driving weir with the real ``ydb`` SDK (sync and asyncio) over loopback."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import ydb

from tests.conftest import ServerProcess

DATABASE = "/local"
T = TypeVar("T")


def connect(srv: ServerProcess, **kwargs: object) -> ydb.Driver:
    """A sync driver connected to ``srv`` (discovery done)."""
    driver = ydb.Driver(endpoint=f"grpc://{srv.endpoint}", database=DATABASE, **kwargs)
    try:
        driver.wait(timeout=15, fail_fast=True)
    except BaseException:
        driver.stop(timeout=5)
        raise
    return driver


def path(topic: str) -> str:
    """A topic path as YDB users write it: under the database."""
    return f"{DATABASE}/{topic}"


def receive(
    reader: ydb.TopicReader, n: int, timeout: float = 30, commit: bool = False
) -> list[ydb.TopicReaderMessage]:
    """Up to ``n`` messages, batch by batch, within ``timeout`` seconds (committing each batch)."""
    out: list[ydb.TopicReaderMessage] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        try:
            batch = reader.receive_batch(timeout=0.5)
        except TimeoutError:
            continue
        out.extend(batch.messages)
        if commit:
            reader.commit(batch)
    return out


def nothing_more(reader: ydb.TopicReader, wait: float = 2.0) -> bool:
    """True if the reader gets no message within ``wait`` seconds."""
    try:
        reader.receive_batch(timeout=wait)
    except TimeoutError:
        return True
    return False


def close_after_reconnect(
    reader: ydb.TopicReader, session: str | None, timeout: float = 30
) -> None:
    """Close ``reader`` once the SDK has replaced its read session ``session`` with a new one.

    After a rolled-back transaction (or a failed commit) the SDK drops its read stream
    and opens another at once. A close() that lands in the event-loop turn where the new
    stream's InitResponse arrives hangs for ever on Python 3.11: the SDK awaits that answer
    through ``asyncio.wait_for``, which drops a cancellation that coincides with its result
    (CPython gh-86296, fixed in 3.12 only), so the reconnect loop goes on to serve the new
    stream and close() waits for it (ci43, 300 s). A new ``read_session_id`` is the event
    that the reconnect is over; only then is close() safe."""
    deadline = time.monotonic() + timeout
    while reader.read_session_id in (session, None):
        assert time.monotonic() < deadline, f"the reader did not reconnect in {timeout} s"
        time.sleep(0.01)
    reader.close()


def reconnected(call: Callable[[], T], timeout: float = 20) -> T:
    """``call()`` once the sync driver has found the (restarted) server again: calls made
    while its channel reconnects fail at once with a connection error."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except (ydb.issues.ConnectionError, ydb.issues.Unavailable):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # the SDK's discovery runs every second or two meanwhile


def config_file(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "weir.toml"
    p.write_text(text)
    return p


@pytest.fixture
def driver(shared_server: ServerProcess) -> Iterator[ydb.Driver]:
    d = connect(shared_server)
    yield d
    d.stop(timeout=10)
