"""`weir config ...`: write a starting config file, or check one before a restart."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from weir import config as configuration
from weir.cli import output
from weir.cli.common import Json

config_app = typer.Typer(help="Write or check the server's TOML config.", no_args_is_help=True)


@config_app.command("default")
def default() -> None:
    """Print a config file with every key at its default, each with a comment."""
    output.stdout.out(configuration.default_toml(), highlight=False, end="")


@config_app.command("check")
def check(
    config: Annotated[
        Path | None,
        typer.Option("--config", envvar="WEIR_CONFIG", help="TOML config file to check."),
    ] = None,
    json_out: Json = False,
) -> None:
    """Load the config as `weir serve` would (file, then WEIR_* variables) and print the result."""
    cfg = configuration.load(config, env=os.environ)
    values = cfg.values()
    # secrets are never shown: passwords and the JWT secret
    values["auth.users"] = {user: "<hidden>" for user in values["auth.users"]}
    values["auth.jwt_secret"] = "<set>" if values["auth.jwt_secret"] else ""
    values["auth.cluster_secret"] = "<set>" if values["auth.cluster_secret"] else ""
    if json_out:
        doc: dict[str, Any] = {}
        for key in configuration.KEYS:
            value = values[key.path]
            doc[key.path] = {
                "value": str(value) if isinstance(value, Path) else value,
                "source": cfg.sources[key.path],
            }
        output.print_json(doc)
        return
    output.stdout.out(configuration.render_toml(values), highlight=False, end="")
    overridden = sorted({s for s in cfg.sources.values() if s != "default"})
    output.stderr.print(f"config ok ({', '.join(overridden) or 'all defaults'})")
