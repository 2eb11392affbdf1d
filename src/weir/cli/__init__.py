"""The `weir` command line: serve, topic, consumer, subscription, tenant, namespace, write,
read, config.

Exit status: 0 done, 1 the operation failed (server error, unreachable server),
2 bad arguments or bad configuration, 130 interrupted. Every error is one line
on stderr, ``error: ...``.
"""

from __future__ import annotations

import os

# gRPC's core logs each failed TLS handshake on stderr; a command says what failed in its
# own one-line error instead (gRPC reads this once, when it is imported)
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import sys
from collections.abc import Sequence
from typing import Annotated

import typer

import weir
from weir.cli import output
from weir.cli.admin import consumer_app, topic_app
from weir.cli.common import CliError
from weir.cli.config_commands import config_app
from weir.cli.read import read
from weir.cli.replication import bookie_app, cluster_app, ledger_app
from weir.cli.security import grant, grants, revoke, token_app, user_app, whoami
from weir.cli.serve import serve
from weir.cli.subscription import subscription_app
from weir.cli.tenancy import namespace_app, tenant_app
from weir.cli.tier import offload, offload_status  # noqa: F401 - registers `topic offload*`
from weir.cli.write import write
from weir.config import ConfigError
from weir.errors import WeirError

app = typer.Typer(
    help="weir: a durable, partitioned topic service.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        output.stdout.out(f"weir {weir.__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print the version of weir and exit.",
        ),
    ] = False,
) -> None:
    """weir: a durable, partitioned topic service."""


app.command("serve")(serve)
app.add_typer(topic_app, name="topic")
app.add_typer(consumer_app, name="consumer")
app.add_typer(tenant_app, name="tenant")
app.add_typer(namespace_app, name="namespace")
app.add_typer(subscription_app, name="subscription")
app.command("write")(write)
app.command("read")(read)
app.add_typer(config_app, name="config")
app.add_typer(bookie_app, name="bookie")
app.add_typer(ledger_app, name="ledger")
app.add_typer(cluster_app, name="cluster")
app.add_typer(user_app, name="user")
app.add_typer(token_app, name="token")
app.command("grant")(grant)
app.command("revoke")(revoke)
app.command("grants")(grants)
app.command("whoami")(whoami)


def _usage_line(exc: typer.TyperException) -> str:
    """Click's message plus where to find help, without the usage block."""
    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    return exc.format_message() + hint


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status."""
    command = typer.main.get_command(app)
    try:
        result = command.main(
            args=list(sys.argv[1:] if argv is None else argv),
            prog_name="weir",
            standalone_mode=False,
        )
    except typer.TyperException as exc:  # click's usage errors: bad options, bad values
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # type: ignore[attr-defined]
        else:
            output.error_line(_usage_line(exc))
        return int(getattr(exc, "exit_code", 2))
    except typer.Abort:
        return 130
    except ConfigError as exc:
        output.error_line(f"config: {exc.message}")
        return 2
    except CliError as exc:
        output.error_line(exc.message)
        return exc.code
    except WeirError as exc:
        output.error_line(exc.message)
        return 1
    except KeyboardInterrupt:
        return 130
    return result if isinstance(result, int) else 0
