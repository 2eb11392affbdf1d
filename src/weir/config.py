"""The server's configuration: one TOML file, ``WEIR_*`` environment overrides, flags on top.

Every key is declared once in `KEYS` with its type, default and meaning; loading,
environment names, ``weir config default`` and the reference table in
docs/configuration.md all come from that list, so they cannot drift apart.
Values are checked when loaded: an unknown key or a bad value is a `ConfigError`
whose one-line message names the key, the value and where it came from.
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weir.broker.config import BrokerConfig
from weir.config_keys import (
    _BY_PATH,
    DEFAULT_HTTP_PORT,
    DEFAULT_KAFKA_PORT,
    DEFAULT_LISTEN,
    DEFAULT_METRICS_LISTEN,
    DEFAULT_NATIVE_TCP_PORT,
    DEFAULT_PULSAR_PORT,
    ENV_PREFIX,
    KEYS,
    SECTIONS,
    Key,
)
from weir.config_values import show_value

CONFIG_ENV = "WEIR_CONFIG"
__all__ = [
    "CLIENT_ENV",
    "CONFIG_ENV",
    "DEFAULT_HTTP_PORT",
    "DEFAULT_KAFKA_PORT",
    "DEFAULT_LISTEN",
    "DEFAULT_METRICS_LISTEN",
    "DEFAULT_NATIVE_TCP_PORT",
    "DEFAULT_PULSAR_PORT",
    "ENV_PREFIX",
    "KEYS",
    "SECTIONS",
    "AuthConfig",
    "Config",
    "ConfigError",
    "ConsoleConfig",
    "HttpConfig",
    "KafkaConfig",
    "Key",
    "LogConfig",
    "MetricsConfig",
    "NativeTcpConfig",
    "PulsarConfig",
    "TlsConfig",
    "default_toml",
    "load",
    "reference_markdown",
    "render_toml",
]
# Environment variables of the client commands that share a config section's prefix.
CLIENT_ENV = frozenset({"WEIR_TLS_CA", "WEIR_TLS_CERT", "WEIR_TLS_KEY"})


class ConfigError(Exception):
    """A configuration problem, worded for the person who wrote the config."""

    def __init__(
        self, reason: str, *, key: str = "", value: object = None, source: str = ""
    ) -> None:
        where = f" ({source})" if source else ""
        if key:
            shown = "" if value is None else f" = {show_value(value)}"
            message = f"{key}{shown}{where}: {reason}"
        else:
            message = f"{reason}{where}"
        super().__init__(message)
        self.message = message
        self.key = key
        self.value = value
        self.source = source


# ---------------------------------------------------------------------------- the result


@dataclass(frozen=True)
class MetricsConfig:
    enabled: bool = False
    listen: str = DEFAULT_METRICS_LISTEN


@dataclass(frozen=True)
class PulsarConfig:
    enabled: bool = True
    listen: str = ""  # empty: the host of server.listen, DEFAULT_PULSAR_PORT
    max_message_size: int = 5 << 20
    batch_index_ack: bool = False
    keep_alive_s: float = 30.0


@dataclass(frozen=True)
class NativeTcpConfig:
    """The ``[native_tcp]`` section: the native write and read streams over framed TCP."""

    enabled: bool = False
    listen: str = ""  # empty: the host of server.listen, DEFAULT_NATIVE_TCP_PORT


@dataclass(frozen=True)
class HttpConfig:
    enabled: bool = True
    listen: str = ""  # empty: the host of server.listen, DEFAULT_HTTP_PORT
    admin: bool = True


@dataclass(frozen=True)
class ConsoleConfig:
    enabled: bool = True


@dataclass(frozen=True)
class AuthConfig:
    """The ``[auth]`` keys that are not the broker's (users and the anonymous rule are)."""

    superusers: tuple[str, ...] = ()
    jwt_secret: str = dataclasses.field(default="", repr=False)
    jwt_public_key_file: Path | None = None
    jwt_audience: str = ""
    cluster_secret: str = dataclasses.field(default="", repr=False)


@dataclass(frozen=True)
class TlsConfig:
    """The ``[tls]`` section: no cert_file means plain text."""

    cert_file: Path | None = None
    key_file: Path | None = None
    client_ca_file: Path | None = None
    peer_ca_file: Path | None = None

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None


@dataclass(frozen=True)
class KafkaConfig:
    """The ``[kafka]`` section."""

    enabled: bool = True
    listen: str = ""
    advertised_listener: str = ""


@dataclass(frozen=True)
class LogConfig:
    level: str = "info"
    json: bool = False
    audit_file: Path | None = None


@dataclass(frozen=True)
class Config:
    """Everything `weir serve` runs with, after defaults, file, environment and flags."""

    broker: BrokerConfig
    listen: str = DEFAULT_LISTEN
    shutdown_grace_s: float = 5.0
    metrics: MetricsConfig = dataclasses.field(default_factory=MetricsConfig)
    pulsar: PulsarConfig = dataclasses.field(default_factory=PulsarConfig)
    native_tcp: NativeTcpConfig = dataclasses.field(default_factory=NativeTcpConfig)
    http: HttpConfig = dataclasses.field(default_factory=HttpConfig)
    console: ConsoleConfig = dataclasses.field(default_factory=ConsoleConfig)
    tls: TlsConfig = dataclasses.field(default_factory=TlsConfig)
    auth: AuthConfig = dataclasses.field(default_factory=AuthConfig)
    log: LogConfig = dataclasses.field(default_factory=LogConfig)
    kafka: KafkaConfig = dataclasses.field(default_factory=KafkaConfig)
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def listen_host(self) -> str:
        return self.listen.rpartition(":")[0]

    @property
    def pulsar_listen(self) -> str | None:
        """Where the Pulsar port listens (None: off)."""
        if not self.pulsar.enabled:
            return None
        return self.pulsar.listen or f"{self.listen_host}:{DEFAULT_PULSAR_PORT}"

    @property
    def native_tcp_listen(self) -> str | None:
        """Where the native TCP port listens (None: off)."""
        if not self.native_tcp.enabled:
            return None
        return self.native_tcp.listen or f"{self.listen_host}:{DEFAULT_NATIVE_TCP_PORT}"

    @property
    def kafka_listen(self) -> str | None:
        """Where the Kafka listener listens (None: off)."""
        if not self.kafka.enabled:
            return None
        return self.kafka.listen or f"{self.listen_host}:{DEFAULT_KAFKA_PORT}"

    @property
    def http_listen(self) -> str | None:
        """Where the HTTP port listens (None: off)."""
        if self.metrics.enabled:
            return self.metrics.listen
        if not self.http.enabled:
            return None
        return self.http.listen or f"{self.listen_host}:{DEFAULT_HTTP_PORT}"

    def values(self) -> dict[str, Any]:
        """The effective value of every key, by ``section.name``."""
        out: dict[str, Any] = {}
        for key in KEYS:
            if key.broker_field:
                out[key.path] = getattr(self.broker, key.broker_field)
        out["server.listen"] = self.listen
        out["server.shutdown_grace_s"] = self.shutdown_grace_s
        for f in dataclasses.fields(TlsConfig):
            out[f"tls.{f.name}"] = getattr(self.tls, f.name)
        out["auth.superusers"] = list(self.auth.superusers)
        out["auth.jwt_secret"] = self.auth.jwt_secret
        out["auth.jwt_public_key_file"] = self.auth.jwt_public_key_file
        out["auth.jwt_audience"] = self.auth.jwt_audience
        out["auth.cluster_secret"] = self.auth.cluster_secret
        out["pulsar.enabled"] = self.pulsar.enabled
        out["pulsar.listen"] = self.pulsar.listen
        out["pulsar.max_message_size"] = self.pulsar.max_message_size
        out["pulsar.batch_index_ack"] = self.pulsar.batch_index_ack
        out["pulsar.keep_alive_s"] = self.pulsar.keep_alive_s
        out["native_tcp.enabled"] = self.native_tcp.enabled
        out["native_tcp.listen"] = self.native_tcp.listen
        out["http.enabled"] = self.http.enabled
        out["http.listen"] = self.http.listen
        out["http.admin"] = self.http.admin
        out["kafka.enabled"] = self.kafka.enabled
        out["kafka.listen"] = self.kafka.listen
        out["kafka.advertised_listener"] = self.kafka.advertised_listener
        out["metrics.enabled"] = self.metrics.enabled
        out["metrics.listen"] = self.metrics.listen
        out["console.enabled"] = self.console.enabled
        out["log.level"] = self.log.level
        out["log.json"] = self.log.json
        out["log.audit_file"] = self.log.audit_file
        return {k.path: out[k.path] for k in KEYS}


def load(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, tuple[object, str]] | None = None,
) -> Config:
    """Defaults, then the TOML file at ``path``, then ``WEIR_*`` variables, then ``overrides``.

    ``overrides`` maps ``section.name`` to (text, where it came from, e.g. "--listen").
    Raises ConfigError on the first problem.
    """
    values: dict[str, Any] = {k.path: k.default for k in KEYS}
    sources: dict[str, str] = {k.path: "default" for k in KEYS}
    if path is not None:
        for key, raw in _read_file(Path(path)).items():
            values[key.path] = _parse(key, raw, str(path))
            sources[key.path] = str(path)
    for key, text, name in _env_values(env or {}):
        values[key.path] = _parse(key, key.kind.from_text(text), name)
        sources[key.path] = name
    for dotted, (raw, where) in (overrides or {}).items():
        key = _BY_PATH[dotted]
        value = key.kind.from_text(raw) if isinstance(raw, str) else raw
        values[key.path] = _parse(key, value, where)
        sources[key.path] = where
    return _build(values, sources)


def _read_file(path: Path) -> dict[Key, object]:
    try:
        with path.open("rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory") from None
    except PermissionError:
        raise ConfigError(f"config file {path} is not readable") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    found: dict[Key, object] = {}
    for section, table in doc.items():
        if section not in SECTIONS:
            raise ConfigError(
                f"unknown {'section' if isinstance(table, dict) else 'key'}{_did_you_mean(section, SECTIONS)}; "
                f"sections are {', '.join(SECTIONS)}",
                key=section,
                source=str(path),
            )
        if not isinstance(table, dict):
            raise ConfigError(
                f"expected a table [{section}]", key=section, value=table, source=str(path)
            )
        names = [k.name for k in KEYS if k.section == section]
        for name, raw in table.items():
            key = _BY_PATH.get(f"{section}.{name}")
            if key is None:
                raise ConfigError(
                    f"unknown key{_did_you_mean(name, names)}; [{section}] has {', '.join(names)}",
                    key=f"{section}.{name}",
                    source=str(path),
                )
            found[key] = raw
    return found


def _env_values(env: Mapping[str, str]) -> list[tuple[Key, str, str]]:
    """``WEIR_<SECTION>_<KEY>`` variables; others (WEIR_ENDPOINT, WEIR_CONFIG, the client's
    WEIR_TLS_CA / _CERT / _KEY) are not config."""
    out = []
    for name, text in sorted(env.items()):
        if not name.startswith(ENV_PREFIX) or name in CLIENT_ENV:
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        section = next((s for s in SECTIONS if rest.startswith(s + "_")), None)
        if section is None:
            continue
        key = _BY_PATH.get(f"{section}.{rest[len(section) + 1 :]}")
        if key is None:
            known = [k.env for k in KEYS if k.section == section]
            raise ConfigError(
                f"unknown setting{_did_you_mean(name, known)}; [{section}] is set by {', '.join(known)}",
                key=name,
                source="environment",
            )
        out.append((key, text, name))
    return out


def _parse(key: Key, raw: object, source: str) -> Any:
    try:
        return key.kind.parse(raw)
    except ValueError as exc:
        raise ConfigError(str(exc), key=key.path, value=raw, source=source) from None


def _build(values: dict[str, Any], sources: dict[str, str]) -> Config:
    if values["storage.low_watermark"] > values["storage.max_blob_size"]:
        raise ConfigError(
            f"must not exceed storage.max_blob_size ({values['storage.max_blob_size']})",
            key="storage.low_watermark",
            value=values["storage.low_watermark"],
            source=sources["storage.low_watermark"],
        )
    _check_cluster(values, sources)
    tls = TlsConfig(
        values["tls.cert_file"],
        values["tls.key_file"],
        values["tls.client_ca_file"],
        values["tls.peer_ca_file"],
    )
    if (tls.cert_file is None) != (tls.key_file is None):
        given, missing = (
            ("tls.cert_file", "tls.key_file")
            if tls.key_file is None
            else ("tls.key_file", "tls.cert_file")
        )
        raise ConfigError(
            f"{given} needs {missing} too",
            key=given,
            value=str(values[given]),
            source=sources[given],
        )
    if tls.client_ca_file is not None and tls.cert_file is None:
        raise ConfigError(
            "needs tls.cert_file and tls.key_file: client certificates are checked over TLS",
            key="tls.client_ca_file",
            value=str(tls.client_ca_file),
            source=sources["tls.client_ca_file"],
        )
    if tls.peer_ca_file is not None and tls.cert_file is None:
        raise ConfigError(
            "needs tls.cert_file and tls.key_file: the brokers of a cluster speak TLS to each "
            "other when they speak it to their clients",
            key="tls.peer_ca_file",
            value=str(tls.peer_ca_file),
            source=sources["tls.peer_ca_file"],
        )
    broker = BrokerConfig(**{k.broker_field: values[k.path] for k in KEYS if k.broker_field})
    return Config(
        broker=broker,
        listen=values["server.listen"],
        shutdown_grace_s=values["server.shutdown_grace_s"],
        metrics=MetricsConfig(values["metrics.enabled"], values["metrics.listen"]),
        pulsar=PulsarConfig(
            values["pulsar.enabled"],
            values["pulsar.listen"],
            values["pulsar.max_message_size"],
            values["pulsar.batch_index_ack"],
            values["pulsar.keep_alive_s"],
        ),
        native_tcp=NativeTcpConfig(values["native_tcp.enabled"], values["native_tcp.listen"]),
        http=HttpConfig(values["http.enabled"], values["http.listen"], values["http.admin"]),
        console=ConsoleConfig(values["console.enabled"]),
        tls=tls,
        auth=AuthConfig(
            tuple(values["auth.superusers"]),
            values["auth.jwt_secret"],
            values["auth.jwt_public_key_file"],
            values["auth.jwt_audience"],
            values["auth.cluster_secret"],
        ),
        log=LogConfig(values["log.level"], values["log.json"], values["log.audit_file"]),
        kafka=KafkaConfig(
            values["kafka.enabled"], values["kafka.listen"], values["kafka.advertised_listener"]
        ),
        sources=sources,
    )


MIN_CLUSTER_SECRET = 16  # characters of auth.cluster_secret
CLUSTER_SECRET_NEEDED = (
    "a replicated broker that requires authentication needs auth.cluster_secret (the "
    "same on every broker): brokers authenticate to each other with it, and it signs "
    "the login tokens every broker accepts (docs/cluster.md)"
)


def cluster_secret_missing(storage_mode: str, allow_anonymous: bool, secret: str) -> bool:
    """The one rule for ``auth.cluster_secret``: checked by the config for ``weir serve``
    and by ``Server.start`` for an embedded server built without it."""
    return storage_mode == "replicated" and not allow_anonymous and not secret


def _check_cluster(values: dict[str, Any], sources: dict[str, str]) -> None:
    """The [cluster] keys agree with each other and with storage.mode."""
    e, wq, aq = (values[f"cluster.{k}"] for k in ("ensemble_size", "write_quorum", "ack_quorum"))
    for name, value, bound, bound_name in (
        ("write_quorum", wq, e, "ensemble_size"),
        ("ack_quorum", aq, wq, "write_quorum"),
    ):
        if value > bound:
            raise ConfigError(
                f"must not exceed cluster.{bound_name} ({bound})",
                key=f"cluster.{name}",
                value=value,
                source=sources[f"cluster.{name}"],
            )
    if values["storage.mode"] != "replicated":
        return
    if not values["cluster.zookeeper"].strip():
        raise ConfigError(
            "storage.mode = 'replicated' needs the cluster's ZooKeeper: set cluster.zookeeper "
            '(e.g. "127.0.0.1:2181")',
            key="cluster.zookeeper",
            value=values["cluster.zookeeper"],
            source=sources["cluster.zookeeper"],
        )
    secret = values["auth.cluster_secret"]
    if cluster_secret_missing(values["storage.mode"], values["auth.allow_anonymous"], secret):
        raise ConfigError(
            CLUSTER_SECRET_NEEDED,
            key="auth.cluster_secret",
            value="",
            source=sources["auth.cluster_secret"],
        )
    if secret and len(secret) < MIN_CLUSTER_SECRET:
        raise ConfigError(
            f"must have at least {MIN_CLUSTER_SECRET} characters (a long random string)",
            key="auth.cluster_secret",
            value="<set>",
            source=sources["auth.cluster_secret"],
        )
    # not supported on replicated storage yet: say so rather than ignore the setting
    tier_set = [k.path for k in KEYS if k.section == "tier" and sources[k.path] != "default"]
    if tier_set:
        raise ConfigError(
            "tiered storage is not supported with storage.mode = 'replicated' (the ledgers "
            "are the durable tier; docs/cluster.md)",
            key=tier_set[0],
            value=values[tier_set[0]],
            source=sources[tier_set[0]],
        )


def _did_you_mean(word: str, options: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, options, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


# ---------------------------------------------------------------------------- documentation


def default_toml() -> str:
    """A complete config file with every key at its default, each with its meaning."""
    lines = ["# weir server configuration: every key with its default value.", ""]
    for section in SECTIONS:
        lines.append(f"[{section}]")
        for key in (k for k in KEYS if k.section == section):
            lines.append(f"# {key.doc}")
            lines.append(f"{key.name} = {key.kind.render(key.default)}")
        lines.append("")
    return "\n".join(lines)


def render_toml(values: Mapping[str, Any]) -> str:
    """Effective values (as returned by `Config.values`) as a TOML file."""
    lines: list[str] = []
    for section in SECTIONS:
        lines.append(f"[{section}]")
        for key in (k for k in KEYS if k.section == section):
            lines.append(f"{key.name} = {key.kind.render(values[key.path])}")
        lines.append("")
    return "\n".join(lines)


def reference_markdown() -> str:
    """The key reference table of docs/configuration.md."""
    rows = [
        "| Key | Type | Default | Environment | Meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key in KEYS:
        default = key.kind.render(key.default).replace("|", "\\|")
        rows.append(f"| `{key.path}` | {key.kind.name} | `{default}` | `{key.env}` | {key.doc} |")
    return "\n".join(rows) + "\n"
