"""The `weir` command line."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Annotated

import typer

from weir.broker.config import BrokerConfig
from weir.errors import WeirError
from weir.server import DEFAULT_LISTEN, Server, serve

app = typer.Typer(
    help="weir: a durable, partitioned topic service.", no_args_is_help=True, add_completion=False
)


@app.callback()
def main_callback() -> None:
    """weir: a durable, partitioned topic service."""


@app.command("serve")
def serve_cmd(
    data_dir: Annotated[
        Path, typer.Option("--data-dir", help="Directory holding the data.")
    ] = Path("data"),
    listen: Annotated[
        str, typer.Option("--listen", help="HOST:PORT to listen on.")
    ] = DEFAULT_LISTEN,
) -> None:
    """Start the server with its embedded storage (Ctrl-C or SIGTERM stops it cleanly)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    def ready(server: Server) -> None:
        typer.echo(f"weir listening on {server.endpoint}, data in {data_dir}", err=True)

    try:
        asyncio.run(serve(BrokerConfig(data_dir=data_dir), listen, ready))
    except (WeirError, OSError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None


def main() -> None:
    app()


if __name__ == "__main__":
    main()
