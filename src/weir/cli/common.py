"""What every client command shares: its options, the client it opens, value parsing, errors."""

from __future__ import annotations

import datetime as dt
import functools
import getpass
import inspect
import logging
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from weir.config_values import parse_duration_ms, parse_size
from weir.errors import TokenRejectedError, UnauthorizedError, UnavailableError, WeirError

if TYPE_CHECKING:
    from weir.client.credentials import Token
    from weir.client.sync import Client
    from weir.client.tls import Tls

DEFAULT_ENDPOINT = "127.0.0.1:2136"
DEFAULT_TIMEOUT = 10.0
TOKEN_REFUSED = "the server refused the token (--token / WEIR_TOKEN)"
R = TypeVar("R")


class CliError(Exception):
    """A failure to report as one line ``error: ...`` and an exit status (1 unless told)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


Endpoint = Annotated[
    str,
    typer.Option(
        "--endpoint",
        "-e",
        envvar="WEIR_ENDPOINT",
        help="Server address, HOST:PORT.",
        show_envvar=True,
    ),
]
Timeout = Annotated[
    float,
    typer.Option(
        "--timeout",
        envvar="WEIR_TIMEOUT",
        min=0.1,
        help="Seconds to wait for the server before giving up.",
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Print the result as JSON, for scripts.")]
User = Annotated[
    str | None,
    typer.Option(
        "--user",
        envvar="WEIR_USER",
        help="Log in as this user (a server with auth.users); every call then carries its token.",
        show_envvar=True,
    ),
]
Password = Annotated[
    str | None,
    typer.Option(
        "--password",
        envvar="WEIR_PASSWORD",
        help="Password of --user (prefer the environment variable: a flag shows in ps); "
        "asked for at a terminal when missing.",
        show_envvar=True,
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="WEIR_TOKEN",
        help="A bearer token (a JWT, e.g. from `weir token create`) sent on every call instead "
        "of --user; never echoed (prefer the environment variable: a flag shows in ps).",
        show_envvar=True,
        show_default=False,
    ),
]


TlsCa = Annotated[
    Path | None,
    typer.Option(
        "--tls-ca",
        envvar="WEIR_TLS_CA",
        help="Speak TLS and trust this CA bundle (PEM) for the server's certificate.",
        show_envvar=True,
    ),
]
TlsCert = Annotated[
    Path | None,
    typer.Option(
        "--tls-cert",
        envvar="WEIR_TLS_CERT",
        help="Client certificate (PEM) for a server that asks for one (mTLS).",
        show_envvar=True,
    ),
]
TlsKey = Annotated[
    Path | None,
    typer.Option(
        "--tls-key",
        envvar="WEIR_TLS_KEY",
        help="Private key (PEM) of --tls-cert.",
        show_envvar=True,
    ),
]


def tls_options(ca: Path | None, cert: Path | None, key: Path | None) -> Tls | None:
    """The client's TLS from --tls-ca/--tls-cert/--tls-key (None: as the endpoint says)."""
    from weir.client.tls import Tls

    if (cert is None) != (key is None):
        raise CliError("--tls-cert and --tls-key go together", 2)
    if ca is None and cert is None:
        return None
    return Tls(ca=ca, cert=cert, key=key)


def credentials(
    user: str | None, password: str | None, token: str | None = None
) -> tuple[str, str] | Token | None:
    """(user, password) from the options (the password is asked for at a terminal), else
    the bearer token of --token / WEIR_TOKEN (a JWT), else None."""
    from weir.client.credentials import Token

    token = (token or "").strip() or None
    if user and token:
        raise CliError("--token (WEIR_TOKEN) and --user (WEIR_USER): give one, not both", 2)
    if not user:
        if password is not None:
            raise CliError("--password (or WEIR_PASSWORD) needs --user (or WEIR_USER)", 2)
        if token is None:
            return None
        if any(c.isspace() for c in token):
            raise CliError("--token (WEIR_TOKEN) must be one word, without spaces", 2)
        return Token(token)
    if password is None:
        if not sys.stdin.isatty():
            raise CliError(f"--user {user} needs --password or WEIR_PASSWORD", 2)
        password = getpass.getpass(f"password for {user}: ")
    return (user, password)


@dataclass(frozen=True, slots=True)
class ServerOptions:
    """How a command reaches the server: --endpoint, --user, --password, --token, --tls-ca,
    --tls-cert, --tls-key and --timeout, declared once (`server_options`)."""

    endpoint: str = DEFAULT_ENDPOINT
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    timeout: float = DEFAULT_TIMEOUT

    def connect(self) -> AbstractContextManager[Client]:
        """A client for one command (see `connect`)."""
        tls = tls_options(self.tls_ca, self.tls_cert, self.tls_key)
        return connect(self.endpoint, self.user, self.password, tls, self.token)


SERVER_DEFAULTS = ServerOptions()
_SERVER_OPTIONS = {
    "endpoint": Endpoint,
    "user": User,
    "password": Password,
    "token": TokenOption,
    "tls_ca": TlsCa,
    "tls_cert": TlsCert,
    "tls_key": TlsKey,
    "timeout": Timeout,
}


def server_options(command: Callable[..., R]) -> Callable[..., R]:
    """Give a command the server options in place of its ``server: ServerOptions``
    parameter: typer sees the eight options there (the same flags, variables and help in
    every command), and the command gets them as one `ServerOptions`."""
    sig = inspect.signature(command, eval_str=True)
    params: list[inspect.Parameter] = []
    for p in sig.parameters.values():
        if p.name != "server":
            params.append(p)
            continue
        params.extend(
            inspect.Parameter(
                name, p.kind, default=getattr(SERVER_DEFAULTS, name), annotation=annotation
            )
            for name, annotation in _SERVER_OPTIONS.items()
        )
    if len(params) != len(sig.parameters) + len(_SERVER_OPTIONS) - 1:
        raise TypeError(f"{command.__name__} has no server: ServerOptions parameter")

    @functools.wraps(command)
    def with_server(*args: Any, **kwargs: Any) -> R:
        server = ServerOptions(**{name: kwargs.pop(name) for name in _SERVER_OPTIONS})
        return command(*args, server=server, **kwargs)

    with_server.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    return with_server


class ReconnectNotice:
    """The SDK's ``on_reconnect`` hook for a command: "reconnecting to HOST:PORT... (reason)"
    on stderr, once for a run of retries with the same reason."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._last = ""

    def __call__(self, err: WeirError) -> None:
        if err.message == self._last:
            return
        self._last = err.message
        from weir.cli import output

        output.stderr.print(f"reconnecting to {self.endpoint}... ({err.message})", markup=False)


@contextmanager
def connect(
    endpoint: str,
    user: str | None = None,
    password: str | None = None,
    tls: Tls | None = None,
    token: str | None = None,
) -> Iterator[Client]:
    """A client for one command; server errors become one-line CLI errors."""
    from weir.client.credentials import Token
    from weir.client.sync import Client

    creds = credentials(user, password, token)
    # the command says "reconnecting..." itself (ReconnectNotice): no SDK log lines too
    logging.getLogger("weir.client").setLevel(logging.ERROR)

    try:
        client = Client(endpoint, credentials=creds, tls=tls)
    except WeirError as err:
        raise CliError(err.message, 2) from None
    try:
        yield client
    except UnavailableError as err:
        where = "" if endpoint in err.message else f" (endpoint {endpoint})"
        raise CliError(err.message + where) from None
    except (UnauthorizedError, TokenRejectedError) as err:
        if isinstance(creds, Token):  # say which credential; the server never echoes it
            raise CliError(f"{TOKEN_REFUSED}: {err.message}") from None
        raise CliError(err.message) from None
    except CliError as err:  # the command said it (write, read): say which credential too
        refused = isinstance(err.__context__, (UnauthorizedError, TokenRejectedError))
        if isinstance(creds, Token) and refused:
            raise CliError(f"{TOKEN_REFUSED}: {err.message}", err.code) from None
        raise
    except WeirError as err:
        raise CliError(err.message) from None
    finally:
        client.close()


# ---------------------------------------------------------------------------- values


def plural(n: int, noun: str) -> str:
    """The count and the noun, singular for one: "1 message", "2 messages"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def bad(option: str, message: str) -> typer.BadParameter:
    return typer.BadParameter(message, param_hint=f"'{option}'")


def optional_size(text: str | None, option: str) -> int | None:
    """Bytes from "64MiB" / "1000000", None for "none"."""
    if text is None or text.strip().lower() == "none":
        return None
    try:
        value = parse_size(int(text) if text.strip().isdigit() else text)
    except ValueError as exc:
        raise bad(option, f'{exc}, or "none"') from None
    if value <= 0:
        raise bad(option, 'must be greater than 0 (use "none" for no limit)')
    return value


def optional_count(text: str | None, option: str) -> int | None:
    if text is None or text.strip().lower() == "none":
        return None
    if not text.strip().isdigit() or int(text) <= 0:
        raise bad(option, f'expected a positive number or "none", got {text!r}')
    return int(text)


def retention_ms(text: str, option: str) -> int | None:
    """ms from "7d" / "12h" / "3600000", None for "none" (keep forever)."""
    if text.strip().lower() == "none":
        return None
    try:
        ms = round(parse_duration_ms(text))
    except ValueError as exc:
        raise bad(option, f'{exc}, or "none"') from None
    if ms <= 0:
        raise bad(option, 'must be greater than 0 (use "none" to keep messages forever)')
    return ms


def timestamp_ms(text: str, option: str) -> int:
    """A point in time: ISO 8601 ("2026-05-01T12:00:00Z"), epoch ms, or a duration ago ("15m")."""
    t = text.strip()
    if t.isdigit():
        return int(t)
    try:
        parsed = dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        pass
    else:
        if parsed.tzinfo is None:
            parsed = parsed.astimezone()  # local time, as a person typing it means
        return int(parsed.timestamp() * 1000)
    try:
        ago = parse_duration_ms(t)
    except ValueError:
        raise bad(
            option,
            f'expected a time such as "2026-05-01T12:00:00Z", epoch ms, or a duration ago '
            f'such as "15m", got {text!r}',
        ) from None
    return int(time.time() * 1000 - ago)


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\"}
_ESCAPE = re.compile(r"\\(.)")


def unescape(text: str) -> str:
    r"""Turn ``\n``, ``\t``, ``\r``, ``\0`` and ``\\`` typed on a command line into characters."""
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(0)), text)
