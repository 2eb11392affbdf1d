from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from weir.storage.batch_encoding import encode_batch
from weir.storage.committer import GroupCommitter
from weir.storage.incoming import IncomingBatch, validate_incoming
from weir.storage.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "data")
    yield s
    s.close()


def make_batch(
    n: int,
    *,
    producer: str = "",
    first_seq: int = 1,
    size: int = 100,
    now_ms: int | None = None,
    tag: bytes = b"",
) -> list[IncomingBatch]:
    """One validated batch of n messages whose data encodes (producer, seq) for checking."""
    created = int(time.time() * 1000) if now_ms is None else now_ms
    data = []
    for i in range(n):
        head = f"{producer}:{first_seq + i}:".encode() + tag
        data.append(head + os.urandom(max(0, size - len(head))))
    return validate_incoming(
        [encode_batch(data, producer_id=producer, first_seq_no=first_seq, created_at=created)]
    )


async def queued(committer: GroupCommitter, count: int, timeout: float = 30) -> None:
    """Until ``count`` jobs wait in a `hold`-ed committer (polled from the event loop)."""
    deadline = time.monotonic() + timeout
    while committer.pending < count:
        assert time.monotonic() < deadline, "the writes never reached the committer"
        await asyncio.sleep(0.001)


def hold(committer: GroupCommitter) -> threading.Event:
    """Stop the committer's worker (inside a commit's callback) until the returned gate is
    set, so that jobs pile up; returns once the worker is held."""
    held, gate = threading.Event(), threading.Event()

    def wait(_: object) -> None:
        held.set()
        gate.wait(30)

    committer.submit([]).add_done_callback(wait)
    assert held.wait(10), "the committer never ran"
    return gate
