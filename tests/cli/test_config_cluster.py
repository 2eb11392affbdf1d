"""storage.mode and the [cluster] keys: what an operator writes to run a broker of a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from weir.broker.broker import Broker
from weir.broker.config import BrokerConfig
from weir.config import ConfigError, load
from weir.errors import BadRequestError, UnavailableError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "weir.toml"
    path.write_text(text)
    return path


def test_embedded_is_the_default_and_needs_no_cluster() -> None:
    cfg = load().broker
    assert cfg.storage_mode == "embedded"
    assert (cfg.cluster_zookeeper, cfg.cluster_root) == ("", "/weir")
    assert (cfg.cluster_ensemble_size, cfg.cluster_write_quorum, cfg.cluster_ack_quorum) == (
        3,
        3,
        2,
    )


def test_replicated_mode_from_the_file_and_the_environment(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[storage]\nmode = "replicated"\n'
        '[cluster]\nzookeeper = "10.0.0.1:2181,10.0.0.2:2181"\nroot = "/prod"\n'
        'broker_id = "b1"\nensemble_size = 5\nwrite_quorum = 3\nsession_timeout_s = "20s"\n',
    )
    cfg = load(path, env={"WEIR_CLUSTER_ACK_QUORUM": "3", "WEIR_STORAGE_MODE": "Replicated"})
    b = cfg.broker
    assert b.storage_mode == "replicated"
    assert b.cluster_zookeeper == "10.0.0.1:2181,10.0.0.2:2181"
    assert (b.cluster_root, b.cluster_broker_id) == ("/prod", "b1")
    assert (b.cluster_ensemble_size, b.cluster_write_quorum, b.cluster_ack_quorum) == (5, 3, 3)
    assert b.cluster_session_timeout_s == 20.0
    assert cfg.sources["cluster.ack_quorum"] == "WEIR_CLUSTER_ACK_QUORUM"


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[storage]\nmode = "raft"\n', 'storage.mode = "raft"'),
        ('[storage]\nmode = "replicated"\n', "needs the cluster's ZooKeeper"),
        ("[cluster]\nwrite_quorum = 4\n", "cluster.write_quorum = 4 ("),
        ("[cluster]\nack_quorum = 3\nwrite_quorum = 2\n", "must not exceed cluster.write_quorum"),
        ("[cluster]\nensemble_size = 0\n", "cluster.ensemble_size = 0"),
        ('[cluster]\nroot = "weir/"\n', "cluster.root"),
        (
            '[storage]\nmode = "replicated"\n[cluster]\nzookeeper = "127.0.0.1:2181"\n'
            '[tier]\nbackend = "s3"\n',
            "tiered storage is not supported with storage.mode = 'replicated'",
        ),
    ],
)
def test_bad_cluster_settings_name_the_key(tmp_path: Path, toml: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(write(tmp_path, toml))
    assert message in err.value.message
    assert "\n" not in err.value.message


async def test_a_broker_refuses_an_unknown_storage_mode_before_touching_the_data_dir(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    cfg = BrokerConfig(data_dir=data, storage_mode="raft")
    with pytest.raises(BadRequestError, match=r"storage\.mode must be 'embedded' or 'replicated'"):
        await Broker.open(cfg)
    assert not data.exists()


async def test_a_replicated_broker_without_its_zookeeper_says_so_and_leaves_the_data_dir(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    cfg = BrokerConfig(
        data_dir=data,
        storage_mode="replicated",
        cluster_zookeeper="127.0.0.1:1",
        cluster_broker_id="b1",
        cluster_session_timeout_s=1.0,
    )
    with pytest.raises(UnavailableError, match=r"cannot reach the cluster's ZooKeeper"):
        await Broker.open(cfg)
    # the local store was closed again: an embedded broker opens the same directory
    broker = await Broker.open(BrokerConfig(data_dir=data))
    await broker.close()
