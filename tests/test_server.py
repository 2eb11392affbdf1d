"""The server facade: its listen address and a start on a port that is taken."""

from __future__ import annotations

from pathlib import Path

import pytest

from weir.broker.config import BrokerConfig
from weir.errors import BadRequestError
from weir.server import Server, parse_listen


@pytest.mark.parametrize("bad", ["nope", ":1", "host:", "host:x", "host:70000"])
def test_a_listen_address_must_be_host_colon_port(bad: str) -> None:
    with pytest.raises(BadRequestError, match="HOST:PORT"):
        parse_listen(bad)


def test_listen_addresses() -> None:
    assert parse_listen("0.0.0.0:2136") == ("0.0.0.0", 2136)
    assert parse_listen("[::1]:0") == ("::1", 0)


async def test_a_second_server_on_a_port_in_use_fails_clearly(tmp_path: Path) -> None:
    first = Server(BrokerConfig(data_dir=tmp_path / "a"), "127.0.0.1:0", fronts=[])
    await first.start()
    try:
        second = Server(BrokerConfig(data_dir=tmp_path / "b"), first.endpoint, fronts=[])
        with pytest.raises(OSError, match=f"cannot listen on {first.endpoint}"):
            await second.start()
    finally:
        await first.stop()
