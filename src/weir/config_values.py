"""Kinds of configuration values: how a size, a duration, an address or a user table is
read from TOML and from text (``WEIR_*`` environment, flags) and shown back.

`weir.config` declares the keys with these kinds; the CLI reuses the parsers for its
own size and duration options, so ``10MiB`` or ``7d`` mean the same everywhere.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weir.broker.topics import MAX_PARTITIONS

LOG_LEVELS = ("debug", "info", "warning", "error")


def show_value(value: object) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


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
    render: Callable[[Any], str] = show_value


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


def _optional_address(value: object) -> str:
    text = _str(value).strip()
    if not text:
        return ""
    try:
        return _address(text)
    except ValueError:
        raise ValueError(
            'expected "HOST:PORT" (port 0 picks a free one), or "" for the default'
        ) from None


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


STORAGE_MODES = ("embedded", "replicated")


def _storage_mode(value: object) -> str:
    text = _str(value).strip().lower()
    if text not in STORAGE_MODES:
        raise ValueError(f"expected one of {', '.join(STORAGE_MODES)}")
    return text


def _zk_root(value: object) -> str:
    text = _str(value).strip()
    if not text.startswith("/") or text.endswith("/") or "//" in text:
        raise ValueError('expected a ZooKeeper path such as "/weir" (no trailing "/")')
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
        else "{ " + ", ".join(f"{k} = {show_value(v)}" for k, v in users.items()) + " }"
    )


def _routes(value: object) -> dict[str, str]:
    """Bookie id (``host:port``) -> the ``host:port`` to connect to instead."""
    if not isinstance(value, dict):
        raise ValueError('expected a table of "bookie id" = "host:port"')
    for bookie, target in value.items():
        _address(bookie)
        try:
            _address(target)
        except ValueError:
            raise ValueError(f'route of bookie {bookie!r}: expected "HOST:PORT"') from None
    return dict(value)


def _routes_text(text: str) -> object:
    """``127.0.0.1:3181=10.0.0.5:3181,...`` (the environment has no tables)."""
    routes: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        bookie, sep, target = item.partition("=")
        if not sep:
            return text
        routes[bookie.strip()] = target.strip()
    return routes


def _render_routes(routes: dict[str, str]) -> str:
    return (
        "{}"
        if not routes
        else "{ "
        + ", ".join(f"{show_value(k)} = {show_value(v)}" for k, v in routes.items())
        + " }"
    )


def _names(value: object) -> list[str]:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError('expected a list of names, such as ["admin"]')
    return list(value)


def _render_names(names: list[str]) -> str:
    return "[" + ", ".join(show_value(n) for n in names) + "]"


STRING = Kind("string", _str)
SECRET = Kind("secret", _str)  # weir config check replaces it
NAMES = Kind("list of names", _names, render=_render_names)
ADDRESS = Kind("host:port", _address)
OPTIONAL_ADDRESS = Kind("host:port or empty", _optional_address)
PATH = Kind("path", lambda v: Path(_str(v)), render=lambda p: show_value(str(p)))
BOOL = Kind("bool", _bool, _bool_text)


def _optional_path(value: object) -> Path | None:
    text = _str(value).strip()
    return Path(text) if text else None


OPTIONAL_PATH = Kind(
    "path or empty", _optional_path, render=lambda p: show_value(str(p) if p else "")
)
PARTITIONS = Kind("integer", _partitions, _int_text, str)
SIZE = Kind("size", _size, render=_render_size)
SIZE_OR_ZERO = Kind("size", _size_or_zero, render=_render_size)  # 0 turns a feature off
OPTIONAL_SIZE = Kind("size or none", _optional(_size), render=_render_size)
DURATION_MS = Kind("duration", _ms, render=_render_duration_ms)
OPTIONAL_DURATION_MS = Kind("duration or none", _optional(_ms), render=_render_duration_ms)
DURATION_S = Kind("duration", _seconds, render=_render_seconds)
LEVEL = Kind("level", _level)
STORAGE_MODE = Kind("mode", _storage_mode)
ZK_PATH = Kind("ZooKeeper path", _zk_root)
COUNT = Kind("integer", _positive_int, _int_text, str)
USERS = Kind("table", _users, _users_text, _render_users)
ROUTES = Kind("table", _routes, _routes_text, _render_routes)
