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
import math
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weir.broker.config import BrokerConfig
from weir.broker.topics import MAX_PARTITIONS
from weir.storage.kv import DEFAULT_MAP_SIZE

ENV_PREFIX = "WEIR_"
CONFIG_ENV = "WEIR_CONFIG"
DEFAULT_LISTEN = "127.0.0.1:2136"
DEFAULT_METRICS_LISTEN = "127.0.0.1:9464"
# Environment variables of the client commands that share a config section's prefix.
CLIENT_ENV = frozenset({"WEIR_TLS_CA", "WEIR_TLS_CERT", "WEIR_TLS_KEY"})
LOG_LEVELS = ("debug", "info", "warning", "error")


class ConfigError(Exception):
    """A configuration problem, worded for the person who wrote the config."""

    def __init__(
        self, reason: str, *, key: str = "", value: object = None, source: str = ""
    ) -> None:
        where = f" ({source})" if source else ""
        if key:
            shown = "" if value is None else f" = {_show(value)}"
            message = f"{key}{shown}{where}: {reason}"
        else:
            message = f"{reason}{where}"
        super().__init__(message)
        self.message = message
        self.key = key
        self.value = value
        self.source = source


def _show(value: object) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


# ---------------------------------------------------------------------------- value kinds

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)


def _size_units() -> dict[str, int]:
    """k, ki, kib: binary (as in "64M" or "64MiB"); kb: decimal."""
    units = {"": 1, "b": 1}
    for power, letter in enumerate("kmgt", start=1):
        units |= dict.fromkeys((letter, f"{letter}i", f"{letter}ib"), 1 << (10 * power))
        units[f"{letter}b"] = 1000**power
    return units


_SIZE_UNITS = _size_units()
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)", re.IGNORECASE)
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_size(value: object) -> int:
    """Bytes from an integer or a string such as ``"64MiB"``, ``"64M"`` (binary) or ``"1GB"``."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError("a size cannot be negative")
        return value
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m:
            return int(float(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()])
    raise ValueError('expected a size in bytes, such as 1048576, "64MiB" or "1GB"')


def parse_duration_ms(value: object, unit_ms: float = 1.0) -> float:
    """Milliseconds from a number (in ``unit_ms``) or a string such as ``"7d"`` or ``"1h30m"``."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0 or not math.isfinite(value):
            raise ValueError("a duration must be a finite number >= 0")
        return float(value) * unit_ms
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        parts = list(_DURATION_PART.finditer(text))
        if parts and "".join(p.group(0) for p in parts) == text:
            return sum(float(p.group(1)) * _DURATION_MS[p.group(2).lower()] for p in parts)
        try:
            return parse_duration_ms(float(text), unit_ms)
        except ValueError:
            pass
    raise ValueError('expected a duration, such as 500, "250ms", "10s", "5m", "12h" or "7d"')


@dataclass(frozen=True)
class Kind:
    """How one kind of value is read from TOML (``parse``) and from text (``from_text``)."""

    name: str
    parse: Callable[[object], Any]
    from_text: Callable[[str], object] = lambda text: text
    render: Callable[[Any], str] = _show


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    return value


def _address(value: object) -> str:
    text = _str(value)
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError('expected "HOST:PORT", such as "127.0.0.1:2136" (port 0 picks a free one)')
    return text


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError("expected true or false")
    return value


def _bool_text(text: str) -> object:
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    return text


def _int_text(text: str) -> object:
    try:
        return int(text.strip())
    except ValueError:
        return text


def _positive_int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError("expected a positive integer")
    return value


def _partitions(value: object) -> int:
    n = _positive_int(value)
    if n > MAX_PARTITIONS:
        raise ValueError(f"expected 1 to {MAX_PARTITIONS} partitions")
    return n


def _size(value: object) -> int:
    n = parse_size(_number_text(value))
    if n <= 0:
        raise ValueError("a size must be greater than 0")
    return n


def _size_or_zero(value: object) -> int:
    return parse_size(_number_text(value))


def _optional(parse: Callable[[object], Any]) -> Callable[[object], Any]:
    def parse_optional(value: object) -> Any:
        if isinstance(value, str) and value.strip().lower() == "none":
            return None
        try:
            return parse(value)
        except ValueError as exc:
            raise ValueError(f'{exc}, or "none" for no limit') from None

    return parse_optional


def _number_text(value: object) -> object:
    """Env and flag values arrive as text: "1048576" means the number."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return value


def _ms(value: object) -> int:
    ms = parse_duration_ms(value)
    if ms < 1:
        raise ValueError("a duration must be at least 1 ms")
    return round(ms)


def _seconds(value: object) -> float:
    ms = parse_duration_ms(value, unit_ms=1000.0)
    if ms <= 0:
        raise ValueError("a duration must be greater than 0")
    return ms / 1000.0


def _level(value: object) -> str:
    text = _str(value).strip().lower()
    if text not in LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}")
    return text


def _users(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError('expected a table of user = "password"')
    for user, password in value.items():
        if not isinstance(password, str):
            raise ValueError(f"password of user {user!r} must be a string")
    return dict(value)


def _users_text(text: str) -> object:
    """``alice:secret,bob:pw`` (the environment has no tables)."""
    users: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        user, sep, password = item.partition(":")
        if not sep or not user:
            return text
        users[user] = password
    return users


def _render_duration_ms(ms: int | None) -> str:
    if ms is None:
        return '"none"'
    for unit in ("d", "h", "m", "s"):
        if ms % _DURATION_MS[unit] == 0:
            return f'"{ms // _DURATION_MS[unit]}{unit}"'
    return str(ms)


def _render_seconds(s: float) -> str:
    return f'"{s:g}s"'


def _render_size(n: int | None) -> str:
    if n is None:
        return '"none"'
    if n == 0:
        return "0"
    for unit, factor in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n % factor == 0:
            return f'"{n // factor}{unit}"'
    return str(n)


def _render_users(users: dict[str, str]) -> str:
    return (
        "{}"
        if not users
        else "{ " + ", ".join(f"{k} = {_show(v)}" for k, v in users.items()) + " }"
    )


def _names(value: object) -> list[str]:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError('expected a list of names, such as ["admin"]')
    return list(value)


def _render_names(names: list[str]) -> str:
    return "[" + ", ".join(_show(n) for n in names) + "]"


STRING = Kind("string", _str)
SECRET = Kind("secret", _str)  # weir config check replaces it
NAMES = Kind("list of names", _names, render=_render_names)
ADDRESS = Kind("host:port", _address)
PATH = Kind("path", lambda v: Path(_str(v)), render=lambda p: _show(str(p)))
BOOL = Kind("bool", _bool, _bool_text)


def _optional_path(value: object) -> Path | None:
    text = _str(value).strip()
    return Path(text) if text else None


OPTIONAL_ADDRESS = Kind("host:port or empty", lambda v: _address(v) if _str(v) else "")
OPTIONAL_PATH = Kind("path or empty", _optional_path, render=lambda p: _show(str(p) if p else ""))
PARTITIONS = Kind("integer", _partitions, _int_text, str)
SIZE = Kind("size", _size, render=_render_size)
SIZE_OR_ZERO = Kind("size", _size_or_zero, render=_render_size)  # 0 turns a feature off
OPTIONAL_SIZE = Kind("size or none", _optional(_size), render=_render_size)
DURATION_MS = Kind("duration", _ms, render=_render_duration_ms)
OPTIONAL_DURATION_MS = Kind("duration or none", _optional(_ms), render=_render_duration_ms)
DURATION_S = Kind("duration", _seconds, render=_render_seconds)
LEVEL = Kind("level", _level)
USERS = Kind("table", _users, _users_text, _render_users)


# ---------------------------------------------------------------------------- the keys


@dataclass(frozen=True, eq=False)
class Key:
    """One configuration key: ``[section] name``, what it holds and where it goes."""

    section: str
    name: str
    kind: Kind
    default: Any
    doc: str
    broker_field: str = ""  # the BrokerConfig field it sets, if any

    @property
    def path(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def env(self) -> str:
        return f"{ENV_PREFIX}{self.section}_{self.name}".upper()


_B = BrokerConfig()

KEYS: tuple[Key, ...] = (
    Key(
        "server",
        "listen",
        ADDRESS,
        DEFAULT_LISTEN,
        "Address of the gRPC port (native protocol and YDB Topic API).",
    ),
    Key(
        "server",
        "data_dir",
        PATH,
        Path("weir-data"),
        "Directory of the LMDB environment; one server per directory.",
        "data_dir",
    ),
    Key(
        "server",
        "shutdown_grace_s",
        DURATION_S,
        5.0,
        "On SIGTERM/SIGINT, how long open streams get to finish before they are cut.",
    ),
    Key(
        "storage",
        "map_size",
        SIZE,
        DEFAULT_MAP_SIZE,
        "Largest size the LMDB file may grow to (address space, not disk, until used).",
        "map_size",
    ),
    Key(
        "storage",
        "low_watermark",
        SIZE,
        _B.low_watermark,
        "Head size at which small blobs are compacted into a big one.",
        "low_watermark",
    ),
    Key(
        "storage",
        "max_blob_size",
        SIZE,
        _B.max_blob_size,
        "Target size of a compacted blob; larger writes go straight to big blobs.",
        "max_blob_size",
    ),
    Key(
        "storage",
        "min_disk_free",
        SIZE,
        _B.min_disk_free,
        "Free disk kept in reserve: writes that would eat into it are refused (retryable).",
        "min_disk_free",
    ),
    Key(
        "storage",
        "verify_on_start",
        BOOL,
        _B.verify_on_start,
        "Check the CRC of every stored batch at start, not only the heads (slow on big data).",
        "verify_on_start",
    ),
    Key(
        "storage",
        "read_cache_bytes",
        SIZE_OR_ZERO,
        _B.read_cache_bytes,
        "Memory for the read cache all partitions share: a big blob is checked once, then "
        "served to every reader from memory. 0 turns it off.",
        "read_cache_bytes",
    ),
    Key(
        "limits",
        "max_batch_bytes",
        SIZE,
        _B.max_batch_bytes,
        "Largest single batch a client may send.",
        "max_batch_bytes",
    ),
    Key(
        "limits",
        "max_message_bytes",
        SIZE,
        _B.max_message_bytes,
        "Largest message (data plus key) a writer may send, on every front; writers learn it "
        "when they connect (capped at limits.max_batch_bytes less 4KiB).",
        "max_message_bytes",
    ),
    Key(
        "limits",
        "max_partition_queue_bytes",
        SIZE,
        _B.max_partition_queue_bytes,
        "Bytes waiting for commit per partition before writes are refused as overloaded.",
        "max_partition_queue_bytes",
    ),
    Key(
        "limits",
        "max_commit_bytes",
        SIZE,
        _B.max_commit_bytes,
        "Bytes of one partition taken into one group commit.",
        "max_commit_bytes",
    ),
    Key(
        "limits",
        "max_session_inflight_bytes",
        SIZE,
        _B.max_session_inflight_bytes,
        "Unacknowledged bytes per write session: past it the native front refuses with "
        "OVERLOADED; the YDB front stops reading the stream (backpressure) until acks catch up.",
        "max_session_inflight_bytes",
    ),
    Key(
        "topics",
        "default_partitions",
        PARTITIONS,
        _B.default_partitions,
        "Partitions of a topic created without a count.",
        "default_partitions",
    ),
    Key(
        "topics",
        "default_retention_ms",
        OPTIONAL_DURATION_MS,
        _B.default_retention_ms,
        'Retention by age of a topic created without one ("none": keep forever).',
        "default_retention_ms",
    ),
    Key(
        "topics",
        "default_retention_bytes",
        OPTIONAL_SIZE,
        _B.default_retention_bytes,
        'Retention by size per partition of a topic created without one ("none": no limit).',
        "default_retention_bytes",
    ),
    Key(
        "topics",
        "auto_create",
        BOOL,
        _B.auto_create_topics,
        "A producer or consumer (native front) of an unknown topic creates it in its "
        "namespace; a namespace's auto_create_topics policy overrides this.",
        "auto_create_topics",
    ),
    Key(
        "topics",
        "retention_interval_s",
        DURATION_S,
        _B.retention_interval_s,
        "How often retention runs.",
        "retention_interval_s",
    ),
    Key(
        "topics",
        "producer_idle_timeout_ms",
        OPTIONAL_DURATION_MS,
        _B.producer_idle_timeout_ms,
        "A producer that has not written for this long is no longer pinned to its partition "
        '("none": pinned while its messages last).',
        "producer_idle_timeout_ms",
    ),
    Key(
        "consumers",
        "auto_create",
        BOOL,
        _B.auto_create_consumers,
        "A reader or commit naming an unknown consumer registers it (else: an error).",
        "auto_create_consumers",
    ),
    Key(
        "consumers",
        "rebalance_timeout_s",
        DURATION_S,
        _B.rebalance_timeout_s,
        "How long a reader gets to release a partition given to another reader.",
        "rebalance_timeout_s",
    ),
    Key(
        "auth",
        "users",
        USERS,
        dict(_B.users),
        'Static users (YDB Auth Login and the native Login), as user = "password" '
        '(env: "user:pw,user2:pw2").',
        "users",
    ),
    Key(
        "auth",
        "allow_anonymous",
        BOOL,
        _B.allow_anonymous,
        "Serve clients that send no credentials (on every front).",
        "allow_anonymous",
    ),
    Key(
        "auth",
        "superusers",
        NAMES,
        [],
        "Principals (users, token subjects, client certificate names) with every permission, "
        "user and grant management included. With anonymous access off, naming one turns "
        'grants on (empty: every authenticated principal may do everything) (env: "admin,ops").',
    ),
    Key(
        "auth",
        "jwt_secret",
        SECRET,
        "",
        "Accept JWTs signed with this HS256 secret (subject = principal; exp required). "
        "Never shown by weir config check.",
    ),
    Key(
        "auth",
        "jwt_public_key_file",
        OPTIONAL_PATH,
        None,
        "Accept JWTs signed (RS256 or ES256) by the private key of this PEM public key.",
    ),
    Key(
        "auth",
        "jwt_audience",
        STRING,
        "",
        'When set, a JWT must name it in its "aud" claim.',
    ),
    Key(
        "tls",
        "cert_file",
        OPTIONAL_PATH,
        None,
        "PEM certificate (chain) of the gRPC port and the metrics endpoint: set, both speak "
        "TLS only. Replacing the file (or SIGHUP) takes effect at the next handshake.",
    ),
    Key(
        "tls",
        "key_file",
        OPTIONAL_PATH,
        None,
        "PEM private key of tls.cert_file.",
    ),
    Key(
        "tls",
        "client_ca_file",
        OPTIONAL_PATH,
        None,
        "PEM CA bundle that signs client certificates: set, clients present one (mTLS).",
    ),
    Key(
        "kafka",
        "enabled",
        BOOL,
        True,
        "Serve the Kafka protocol (docs/kafka.md): unmodified Kafka clients produce, consume "
        "and administer weir topics.",
    ),
    Key(
        "kafka",
        "listen",
        OPTIONAL_ADDRESS,
        "",
        "Address of the Kafka listener. Empty: port 9092 of the server.listen host. TLS and "
        "authentication follow the [tls] and [auth] sections, as on the gRPC port.",
    ),
    Key(
        "kafka",
        "advertised_listener",
        OPTIONAL_ADDRESS,
        "",
        "HOST:PORT Kafka clients are told to connect to (Metadata, FindCoordinator), for "
        "clients that reach the server through another name. Empty: the listen address.",
    ),
    Key(
        "metrics",
        "enabled",
        BOOL,
        False,
        "Serve /metrics (Prometheus), /healthz and /readyz over HTTP.",
    ),
    Key(
        "metrics",
        "listen",
        ADDRESS,
        DEFAULT_METRICS_LISTEN,
        "Address of the metrics HTTP endpoint (when enabled).",
    ),
    Key(
        "console",
        "enabled",
        BOOL,
        True,
        "Serve the web console at /console on the metrics HTTP endpoint (when that runs).",
    ),
    Key("log", "level", LEVEL, "info", "Least severe level logged: debug, info, warning or error."),
    Key(
        "log",
        "audit_file",
        OPTIONAL_PATH,
        None,
        "Append the audit log here (JSON lines): authentication failures, refusals, admin "
        "operations on topics, changes of users and grants. Empty: no audit log.",
    ),
    Key(
        "log",
        "json",
        BOOL,
        False,
        "One JSON object per line instead of text (one line per event either way).",
    ),
)

_BY_PATH = {k.path: k for k in KEYS}
SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(k.section for k in KEYS))


# ---------------------------------------------------------------------------- the result


@dataclass(frozen=True)
class MetricsConfig:
    enabled: bool = False
    listen: str = DEFAULT_METRICS_LISTEN


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


@dataclass(frozen=True)
class TlsConfig:
    """The ``[tls]`` section: no cert_file means plain text."""

    cert_file: Path | None = None
    key_file: Path | None = None
    client_ca_file: Path | None = None

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
    console: ConsoleConfig = dataclasses.field(default_factory=ConsoleConfig)
    tls: TlsConfig = dataclasses.field(default_factory=TlsConfig)
    auth: AuthConfig = dataclasses.field(default_factory=AuthConfig)
    log: LogConfig = dataclasses.field(default_factory=LogConfig)
    kafka: KafkaConfig = dataclasses.field(default_factory=KafkaConfig)
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)

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
    tls = TlsConfig(
        values["tls.cert_file"],
        values["tls.key_file"],
        values["tls.client_ca_file"],
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
    broker = BrokerConfig(**{k.broker_field: values[k.path] for k in KEYS if k.broker_field})
    return Config(
        broker=broker,
        listen=values["server.listen"],
        shutdown_grace_s=values["server.shutdown_grace_s"],
        metrics=MetricsConfig(values["metrics.enabled"], values["metrics.listen"]),
        console=ConsoleConfig(values["console.enabled"]),
        tls=tls,
        auth=AuthConfig(
            tuple(values["auth.superusers"]),
            values["auth.jwt_secret"],
            values["auth.jwt_public_key_file"],
            values["auth.jwt_audience"],
        ),
        log=LogConfig(values["log.level"], values["log.json"], values["log.audit_file"]),
        kafka=KafkaConfig(
            values["kafka.enabled"], values["kafka.listen"], values["kafka.advertised_listener"]
        ),
        sources=sources,
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
