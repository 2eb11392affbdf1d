"""The Kafka listener's settings: on by default, off when asked, under the same secure
defaults as every port (an open server listens on loopback only unless --insecure)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import Weir, one_line_error
from tests.conftest import ServerProcess


def test_the_listener_can_be_turned_off(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", env={"WEIR_KAFKA_ENABLED": "false"})
    srv.start()
    try:
        assert not any("kafka listening" in line for line in srv.log)
    finally:
        srv.stop()


def test_an_open_server_refuses_a_non_loopback_kafka_listener(tmp_path: Path) -> None:
    r = Weir()(
        "serve",
        "--data-dir",
        str(tmp_path / "data"),
        "--listen",
        "127.0.0.1:0",
        env={"WEIR_KAFKA_LISTEN": "0.0.0.0:0"},
    )
    assert r.code == 2, r.err
    assert one_line_error(r).startswith("error: refusing to listen on")
    assert not (tmp_path / "data").exists()


def test_the_advertised_listener_is_what_metadata_names(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient

    srv = ServerProcess(
        tmp_path / "data", env={"WEIR_KAFKA_ADVERTISED_LISTENER": "kafka.example:19092"}
    )
    srv.start()
    try:
        md = AdminClient({"bootstrap.servers": srv.kafka}).list_topics(timeout=10)
        (broker,) = md.brokers.values()
        assert (broker.host, broker.port) == ("kafka.example", 19092)
    finally:
        srv.stop()
