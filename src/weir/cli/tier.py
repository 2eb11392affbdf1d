"""`weir topic offload` and `weir topic offload-status`: tiered storage from the command
line (docs/tiered-storage.md)."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer
from rich.table import Table

from weir.cli import output
from weir.cli.admin import TopicName, topic_app
from weir.cli.common import SERVER_DEFAULTS, Json, ServerOptions, server_options


@topic_app.command("offload")
@server_options
def offload(
    topic: TopicName,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Offload every sealed blob now, whatever the topic's offload policy says.",
        ),
    ] = False,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Copy a topic's sealed blobs to the tier's object store now (by its offload policy,
    or all of them with --force); their local bytes are freed after the deletion lag."""
    with server.connect() as client:
        copied = client.offload_topic(topic, force=force, timeout=max(server.timeout, 600.0))
    if json_out:
        output.print_json({"topic": topic, "copied": copied})
    else:
        output.stdout.out(
            f"offloaded {sum(copied)} blob(s) of {topic}: "
            + ", ".join(f"partition {p}: {n}" for p, n in enumerate(copied))
        )


@topic_app.command("offload-status")
@server_options
def offload_status(
    topic: TopicName,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Show where a topic's data is: bytes held locally and in the object store, and the
    offsets only the object store holds."""
    with server.connect() as client:
        st = client.tier_status(topic, timeout=server.timeout)
    if json_out:
        output.print_json(dataclasses.asdict(st))
        return
    table = Table(title=f"{topic}: tiered storage ({st.store.get('backend', 'none')})")
    for col in ("partition", "offsets", "local", "offloaded", "segments", "only offloaded"):
        table.add_column(col, justify="right" if col != "offsets" else "left")
    for p in st.partitions:
        table.add_row(
            str(p.partition),
            f"{p.start_offset}..{p.end_offset}",
            output.human_bytes(p.local_bytes),
            output.human_bytes(p.remote_bytes),
            str(len(p.segments)),
            f"{p.start_offset}..{p.first_local_offset}" if p.segments else "-",
        )
    output.stdout.print(table)
    where = ", ".join(f"{k}={v}" for k, v in sorted(st.store.items()) if v)
    output.stdout.out(f"store: {where or 'none configured'}")
    if st.last_error:
        output.stdout.out(f"last store error: {st.last_error}")
