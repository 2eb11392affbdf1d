"""weir.config: what an operator writes in TOML or the environment becomes the server's settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT
from weir import config
from weir.broker.config import BrokerConfig
from weir.config import ConfigError, load


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "weir.toml"
    path.write_text(text)
    return path


def test_defaults_are_the_broker_defaults() -> None:
    cfg = load()
    assert cfg.broker == BrokerConfig()
    assert (cfg.listen, cfg.metrics.enabled, cfg.log.level, cfg.log.json) == (
        "127.0.0.1:2136",
        False,
        "info",
        False,
    )


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[server]\nlisten = "0.0.0.0:7000"\ndata_dir = "/srv/weir"\n'
        '[storage]\nmap_size = "64GiB"\nmin_disk_free = 1048576\n'
        '[topics]\ndefault_retention_ms = "none"\nretention_interval_s = "1m"\n'
        '[auth]\nusers = { alice = "pw" }\n',
    )
    cfg = load(
        path,
        env={"WEIR_STORAGE_MAP_SIZE": "2G", "WEIR_ENDPOINT": "not-config", "WEIR_SOAK": "1"},
        overrides={"server.listen": ("127.0.0.1:0", "--listen")},
    )
    assert cfg.listen == "127.0.0.1:0"
    assert cfg.broker.data_dir == Path("/srv/weir")
    assert cfg.broker.map_size == 2 << 30
    assert cfg.broker.min_disk_free == 1 << 20
    assert cfg.broker.default_retention_ms is None
    assert cfg.broker.retention_interval_s == 60.0
    assert cfg.broker.users == {"alice": "pw"}
    assert cfg.sources["storage.map_size"] == "WEIR_STORAGE_MAP_SIZE"
    assert cfg.sources["server.data_dir"] == str(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1048576", 1 << 20),
        ("64MiB", 64 << 20),
        ("64M", 64 << 20),
        ("1.5 GiB", 3 << 29),
        ("1GB", 10**9),
        ("512kb", 512_000),
    ],
)
def test_sizes(text: str, expected: int) -> None:
    assert load(env={"WEIR_LIMITS_MAX_COMMIT_BYTES": text}).broker.max_commit_bytes == expected


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("3600000", 3_600_000),
        ("250ms", 250),
        ("90s", 90_000),
        ("1h30m", 5_400_000),
        ("7d", 604_800_000),
    ],
)
def test_durations(text: str, ms: int) -> None:
    assert load(env={"WEIR_TOPICS_DEFAULT_RETENTION_MS": text}).broker.default_retention_ms == ms


def test_environment_booleans_and_users() -> None:
    cfg = load(env={"WEIR_LOG_JSON": "yes", "WEIR_AUTH_USERS": "alice:a,bob:b:c"})
    assert cfg.log.json is True
    assert cfg.broker.users == {"alice": "a", "bob": "b:c"}


@pytest.mark.parametrize(
    ("toml", "env", "message"),
    [
        ('[storage]\nmap_size = "lots"\n', {}, 'storage.map_size = "lots" ('),
        ("[storage]\nverify_on_start = 1\n", {}, "storage.verify_on_start = 1 ("),
        ("[topics]\ndefault_partitions = 0\n", {}, "topics.default_partitions = 0"),
        ("[limits]\nmax_batch_bytes = -5\n", {}, "limits.max_batch_bytes = -5"),
        ("[server]\nport = 1\n", {}, "unknown key"),
        ("listen = 1\n", {}, "listen"),
        ("", {"WEIR_METRICS_ENABLED": "maybe"}, 'metrics.enabled = "maybe" (WEIR_METRICS_ENABLED)'),
        ("", {"WEIR_TLS_PEER_CA_FILE": "/ca.pem"}, "the brokers of a cluster speak TLS"),
        ("", {"WEIR_LOG_FORMAT": "json"}, "WEIR_LOG_FORMAT"),
    ],
)
def test_errors_name_the_key_the_value_and_the_source(
    tmp_path: Path, toml: str, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load(write(tmp_path, toml), env=env)
    assert message in err.value.message
    assert "\n" not in err.value.message


def test_default_file_loads_back_to_the_defaults(tmp_path: Path) -> None:
    assert load(write(tmp_path, config.default_toml())).values() == load().values()


def test_docs_list_every_key_with_its_default() -> None:
    docs = (ROOT / "docs" / "configuration.md").read_text()
    assert config.reference_markdown() in docs, (
        "regenerate the table: weir.config.reference_markdown()"
    )


def test_read_cache_size_takes_zero_to_turn_it_off(tmp_path: Path) -> None:
    assert load(env={"WEIR_STORAGE_READ_CACHE_BYTES": "0"}).broker.read_cache_bytes == 0
    cfg = load(write(tmp_path, '[storage]\nread_cache_bytes = "1GiB"\n')).broker
    assert cfg.read_cache_bytes == 1 << 30
    with pytest.raises(ConfigError, match="read_cache_bytes"):
        load(env={"WEIR_STORAGE_READ_CACHE_BYTES": "-5"})


def test_docs_show_the_default_file_as_the_server_writes_it() -> None:
    """The example file in the docs is `default_toml()` (it had fallen behind once: two
    tier keys were missing)."""
    docs = (ROOT / "docs" / "configuration.md").read_text()
    assert config.default_toml().rstrip("\n") in docs, (
        "regenerate the example: weir.config.default_toml()"
    )
