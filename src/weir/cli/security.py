"""`weir user ...`, `weir grant | revoke | grants`, `weir whoami` and `weir token create`.

Passwords are read from stdin (``--password-stdin``) or asked for at a terminal,
never taken as a flag value (it would show in ``ps`` and shell history) and never
printed; `token create` signs offline with the server's JWT secret or a private key.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import getpass
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from weir.cli import output
from weir.cli.common import (
    SERVER_DEFAULTS,
    CliError,
    Json,
    ServerOptions,
    server_options,
)
from weir.config_values import parse_duration_ms
from weir.errors import WeirError

user_app = typer.Typer(help="Users kept by the server (passwords stored as scrypt hashes).")
token_app = typer.Typer(help="Signed JWTs for a server with auth.jwt_* settings.")

PasswordStdin = Annotated[
    bool,
    typer.Option(
        "--password-stdin",
        help="Read the new password from the first line of stdin (else asked at a terminal).",
    ),
]
Name = Annotated[str, typer.Argument(help="User name.")]


def _new_password(name: str, from_stdin: bool) -> str:
    if from_stdin:
        line = sys.stdin.readline()
        password = line[:-1] if line.endswith("\n") else line
        if not password:
            raise CliError("no password on stdin", 2)
        return password
    if not sys.stdin.isatty():
        raise CliError("give the new password on stdin with --password-stdin", 2)
    first = getpass.getpass(f"new password for {name}: ")
    if getpass.getpass("again: ") != first:
        raise CliError("the passwords differ", 2)
    return first


@user_app.command("add")
@server_options
def user_add(
    name: Name,
    password_stdin: PasswordStdin = False,
    server: ServerOptions = SERVER_DEFAULTS,
) -> None:
    """Add a user (needs a superuser)."""
    new = _new_password(name, password_stdin)
    with server.connect() as client:
        client.add_user(name, new, timeout=server.timeout)
    output.stdout.print(f"added user {name}", markup=False)


@user_app.command("passwd")
@server_options
def user_passwd(
    name: Name,
    password_stdin: PasswordStdin = False,
    server: ServerOptions = SERVER_DEFAULTS,
) -> None:
    """Change a user's password (a superuser, or the user itself); its tokens stop working."""
    new = _new_password(name, password_stdin)
    with server.connect() as client:
        client.set_password(name, new, timeout=server.timeout)
    output.stdout.print(f"changed the password of {name}", markup=False)


@user_app.command("delete")
@server_options
def user_delete(
    name: Name,
    server: ServerOptions = SERVER_DEFAULTS,
) -> None:
    """Delete a user and its grants (needs a superuser); its tokens stop working."""
    with server.connect() as client:
        client.delete_user(name, timeout=server.timeout)
    output.stdout.print(f"deleted user {name}", markup=False)


@user_app.command("list")
@server_options
def user_list(
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """List users (needs a superuser); passwords are never shown."""
    with server.connect() as client:
        users = client.list_users(timeout=server.timeout)
    if json_out:
        output.print_json([dataclasses.asdict(u) for u in users])
        return
    for u in users:
        flags = [u.source] + (["superuser"] if u.superuser else [])
        output.stdout.print(f"{u.user}  ({', '.join(flags)})", markup=False, highlight=False)


@server_options
def grant(
    principal: Annotated[
        str, typer.Argument(help="User, token subject or certificate name; * for all.")
    ],
    permission: Annotated[str, typer.Argument(help="produce, consume or admin.")],
    resource: Annotated[
        str,
        typer.Argument(
            help="Topic name or pattern (orders, shop/*, *), tenant:NAME or namespace:[TENANT/]NAME."
        ),
    ],
    server: ServerOptions = SERVER_DEFAULTS,
) -> None:
    """Grant a permission on the topics a name or pattern covers, or on a tenant or namespace
    (and every topic in it) (needs a superuser)."""
    with server.connect() as client:
        changed = client.grant(principal, permission, resource, timeout=server.timeout)
    what = "granted" if changed else "already granted:"
    output.stdout.print(f"{what} {permission} on {resource} to {principal}", markup=False)


@server_options
def revoke(
    principal: Annotated[str, typer.Argument(help="As given to weir grant.")],
    permission: Annotated[str, typer.Argument(help="produce, consume or admin.")],
    resource: Annotated[str, typer.Argument(help="As given to weir grant.")],
    server: ServerOptions = SERVER_DEFAULTS,
) -> None:
    """Take back a grant (needs a superuser)."""
    with server.connect() as client:
        changed = client.revoke(principal, permission, resource, timeout=server.timeout)
    what = "revoked" if changed else "no such grant:"
    output.stdout.print(f"{what} {permission} on {resource} from {principal}", markup=False)


@server_options
def grants(
    principal: Annotated[str, typer.Argument(help="Only this principal's grants.")] = "",
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """List grants (yours, or everyone's for a superuser)."""
    with server.connect() as client:
        found = client.list_grants(principal, timeout=server.timeout)
    if json_out:
        output.print_json([dataclasses.asdict(g) for g in found])
        return
    for g in found:
        output.stdout.print(
            f"{g.principal}  {g.permission}  {g.resource}", markup=False, highlight=False
        )


@server_options
def whoami(
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Who the server takes you for (user, token subject, certificate name)."""
    with server.connect() as client:
        me = client.whoami(timeout=server.timeout)
    if json_out:
        output.print_json(dataclasses.asdict(me))
        return
    name = me.principal or "anonymous"
    extra = ", superuser" if me.superuser else ""
    output.stdout.print(f"{name} ({me.mechanism}{extra})", markup=False, highlight=False)


@token_app.command("create")
def token_create(
    subject: Annotated[str, typer.Option("--subject", help="The principal the token proves.")],
    expires: Annotated[
        str, typer.Option("--expires", help="Lifetime: 30m, 12h, 7d (required: tokens expire).")
    ],
    audience: Annotated[
        str | None, typer.Option("--audience", help="The server's auth.jwt_audience, if set.")
    ] = None,
    private_key: Annotated[
        Path | None,
        typer.Option(
            "--private-key",
            help="Sign with this PEM key (RS256 or ES256) instead of the HS256 secret.",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", envvar="WEIR_CONFIG", help="Config with auth.jwt_secret."),
    ] = None,
) -> None:
    """Print a JWT for --subject, signed with auth.jwt_secret (config or WEIR_AUTH_JWT_SECRET)
    or with --private-key. Clients send it with WEIR_TOKEN / weir.Token(...)."""
    from weir import config as configuration
    from weir.security.jwt_tokens import create_token

    try:
        ms = parse_duration_ms(expires)
    except ValueError as exc:
        raise CliError(f"--expires: {exc}", 2) from None
    if ms <= 0:
        raise CliError("--expires must be more than 0", 2)
    cfg = configuration.load(config, env=os.environ)
    key = None
    if private_key is not None:
        try:
            key = private_key.read_bytes()
        except OSError as exc:
            raise CliError(f"--private-key {private_key}: {exc.strerror}", 2) from None
    elif not cfg.auth.jwt_secret:
        raise CliError(
            "nothing to sign with: set auth.jwt_secret (WEIR_AUTH_JWT_SECRET) or give --private-key",
            2,
        )
    try:
        token = create_token(
            subject,
            dt.timedelta(milliseconds=ms),
            secret=cfg.auth.jwt_secret,
            private_key=key,
            audience=audience if audience is not None else cfg.auth.jwt_audience,
        )
    except WeirError as err:
        raise CliError(err.message, 2) from None
    output.stdout.out(token, highlight=False)
