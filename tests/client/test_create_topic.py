"""create_topic(exist_ok=True): a program that runs twice finds its topic, or a clear error."""

from __future__ import annotations

import datetime as dt

import pytest

import weir
import weir.aio
from tests.conftest import ServerProcess
from weir.errors import AlreadyExistsError


def test_exist_ok_returns_the_topic_only_if_it_is_the_one_asked_for(
    shared_server: ServerProcess, topic_name: str
) -> None:
    with weir.Client(shared_server.endpoint) as client:
        first = client.create_topic(
            topic_name, 3, retention=dt.timedelta(days=2), consumers=["billing"]
        )
        again = client.create_topic(
            topic_name, 3, retention=dt.timedelta(days=2), consumers=["billing"], exist_ok=True
        )
        assert again == first
        # settings left out, and partitions=0 (the server's default), match anything
        assert client.create_topic(topic_name, 0, exist_ok=True).partitions == 3

        with pytest.raises(AlreadyExistsError) as plain:
            client.create_topic(topic_name, 3)  # without exist_ok: as before
        assert plain.value.message == f"topic {topic_name!r} already exists"

        with pytest.raises(AlreadyExistsError) as other:
            client.create_topic(
                topic_name,
                4,
                retention=dt.timedelta(hours=12),
                consumers=[weir.Consumer("billing", important=True), "audit"],
                exist_ok=True,
            )
        assert other.value.message == (
            f"topic {topic_name!r} already exists with 3 partitions, not 4; retention 2d, "
            "not 12h; a plain consumer 'billing'; no consumer 'audit'"
        )
        assert client.describe_topic(topic_name) == first  # and it was left as it was


async def test_the_asyncio_twin_takes_exist_ok_too(
    shared_server: ServerProcess, topic_name: str
) -> None:
    async with weir.aio.Client(shared_server.endpoint) as client:
        first = await client.create_topic(topic_name, 2, codecs=["zstd"], exist_ok=True)
        assert await client.create_topic(topic_name, 2, codecs=["ZSTD"], exist_ok=True) == first
        with pytest.raises(AlreadyExistsError, match="codecs zstd, not raw"):
            await client.create_topic(topic_name, 2, codecs=["raw"], exist_ok=True)
