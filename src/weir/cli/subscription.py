"""`weir subscription ...`: durable subscriptions (list, describe, create, seek, skip, delete)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import typer
from rich.table import Table

from weir.cli import output
from weir.cli.common import (
    SERVER_DEFAULTS,
    Json,
    ServerOptions,
    bad,
    server_options,
    timestamp_ms,
)
from weir.client.admin import SubscriptionInfo

subscription_app = typer.Typer(
    help="Durable subscriptions: list, describe, create, seek, skip, delete.",
    no_args_is_help=True,
)

TopicName = Annotated[
    str, typer.Argument(help="Topic name: 'orders' or 'tenant/namespace/orders'.")
]
SubscriptionName = Annotated[str, typer.Argument(help="Subscription name.")]


def subscription_json(info: SubscriptionInfo) -> dict[str, Any]:
    return dataclasses.asdict(info)


def show_subscription(info: SubscriptionInfo) -> None:
    table = Table(
        title=f"subscription {info.name} of {info.topic} ({info.type}, "
        + (
            "the consumer's committed offsets)"
            if info.consumer
            else f"started at {info.initial_position})"
        ),
        title_justify="left",
        show_footer=True,
    )
    table.add_column("partition", "total", justify="right")
    table.add_column("mark-delete", justify="right")
    table.add_column("acked ranges", justify="right")
    table.add_column("backlog", str(info.backlog), justify="right")
    table.add_column("unacked", str(info.unacked), justify="right")
    table.add_column("active consumer")
    for p in info.partitions:
        table.add_row(
            str(p.partition),
            str(p.mark_delete),
            str(p.acked_ranges),
            str(p.backlog),
            str(p.unacked),
            p.active_consumer or "-",
        )
    output.stdout.print(table)
    output.stdout.print(
        f"last 10 s: {info.msg_rate_out:,.1f} msg/s out "
        f"({info.msg_rate_redeliver:,.1f} msg/s delivered again), "
        f"{info.ack_rate:,.1f} msg/s acknowledged"
    )
    if info.consumers:
        consumers = Table(title="consumers", title_justify="left")
        sticky = any(c.sticky_ranges for c in info.consumers)
        for name in ("id", "name", "permits", "unacked") + (("sticky ranges",) if sticky else ()):
            consumers.add_column(
                name, justify="right" if name in ("id", "permits", "unacked") else "left"
            )
        for c in info.consumers:
            row = [str(c.consumer_id), c.name, str(c.permits), str(c.unacked)]
            if sticky:
                row.append(", ".join(f"{a}..{b}" for a, b in c.sticky_ranges) or "-")
            consumers.add_row(*row)
        output.stdout.print(consumers)
    else:
        output.stdout.print("no consumers attached")


@subscription_app.command("list")
@server_options
def list_subscriptions(
    topic: TopicName,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """List a topic's subscriptions: type, backlog, unacknowledged messages, consumers."""
    with server.connect() as client:
        subs = client.list_subscriptions(topic, timeout=server.timeout)
    if json_out:
        output.print_json([subscription_json(s) for s in subs])
        return
    table = Table(title=f"subscriptions of {topic}", title_justify="left")
    for name in ("name", "type", "backlog", "unacked", "consumers", "out msg/s", "acks msg/s"):
        table.add_column(name, justify="left" if name in ("name", "type") else "right")
    for s in subs:
        table.add_row(
            s.name,
            s.type + (" (consumer)" if s.consumer else ""),
            str(s.backlog),
            str(s.unacked),
            str(len(s.consumers)),
            f"{s.msg_rate_out:,.1f}",
            f"{s.ack_rate:,.1f}",
        )
    output.stdout.print(table)


@subscription_app.command("describe")
@server_options
def describe(
    topic: TopicName,
    subscription: SubscriptionName,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Per partition: mark-delete position, acked ranges, backlog, unacked; the rates of
    the last 10 s (delivered, delivered again, acknowledged); the consumers."""
    with server.connect() as client:
        info = client.describe_subscription(topic, subscription, timeout=server.timeout)
    if json_out:
        output.print_json(subscription_json(info))
    else:
        show_subscription(info)


@subscription_app.command("create")
@server_options
def create(
    topic: TopicName,
    subscription: SubscriptionName,
    type: Annotated[
        str, typer.Option("--type", help="exclusive, failover, shared or key_shared.")
    ] = "exclusive",
    initial_position: Annotated[
        str,
        typer.Option("--initial-position", help="Where the cursor starts: latest or earliest."),
    ] = "latest",
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Create a subscription without a consumer: retention keeps what it has not acked."""
    with server.connect() as client:
        info = client.create_subscription(
            topic,
            subscription,
            type=type,
            initial_position=initial_position,
            timeout=server.timeout,
        )
    if json_out:
        output.print_json(subscription_json(info))
    else:
        show_subscription(info)


def _offsets(values: list[str]) -> dict[int, int]:
    out: dict[int, int] = {}
    for v in values:
        p, sep, o = v.partition("=")
        if not sep or not p.strip().isdigit() or not o.strip().isdigit():
            raise bad("--offset", f"expected PARTITION=OFFSET such as 0=1500, got {v!r}")
        out[int(p)] = int(o)
    return out


@subscription_app.command("seek")
@server_options
def seek(
    topic: TopicName,
    subscription: SubscriptionName,
    offset: Annotated[
        list[str] | None,
        typer.Option("--offset", help="PARTITION=OFFSET: the first offset to deliver (repeat)."),
    ] = None,
    time_: Annotated[
        str | None,
        typer.Option(
            "--time",
            help="Every partition to its first message at/after this time: ISO 8601, epoch ms, "
            'or a duration ago ("15m").',
        ),
    ] = None,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Move a subscription's cursor (back to deliver again, forward to skip); its consumers
    reconnect and go on from there."""
    if bool(offset) == (time_ is not None):
        raise bad("--offset/--time", "give --offset (repeat) or --time, one of the two")
    offsets = _offsets(offset or [])
    ts = timestamp_ms(time_, "--time") if time_ is not None else None
    with server.connect() as client:
        info = client.seek_subscription(
            topic, subscription, offsets=offsets or None, timestamp=ts, timeout=server.timeout
        )
    if json_out:
        output.print_json(subscription_json(info))
    else:
        show_subscription(info)


@subscription_app.command("skip")
@server_options
def skip(
    topic: TopicName,
    subscription: SubscriptionName,
    count: Annotated[
        int | None,
        typer.Option("--count", "-n", min=1, help="Skip this many messages of each partition."),
    ] = None,
    all_: Annotated[
        bool, typer.Option("--all", help="Skip every unacknowledged message (clear the backlog).")
    ] = False,
    partition: Annotated[
        int | None, typer.Option("--partition", "-p", min=0, help="Only this partition.")
    ] = None,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Acknowledge the oldest unacknowledged messages without delivering them (--count N
    per partition, or --all); the consumers stay attached."""
    if (count is None) == (not all_):
        raise bad("--count/--all", "give --count N or --all, one of the two")
    with server.connect() as client:
        skipped = client.skip_subscription(
            topic, subscription, count, partition=partition, timeout=server.timeout
        )
        info = client.describe_subscription(topic, subscription, timeout=server.timeout)
    if json_out:
        output.print_json({"skipped": skipped, "subscription": subscription_json(info)})
    else:
        output.stdout.print(f"skipped {skipped} message(s) of subscription {subscription}")
        show_subscription(info)


@subscription_app.command("delete")
@server_options
def delete(
    topic: TopicName,
    subscription: SubscriptionName,
    force: Annotated[
        bool, typer.Option("--force", help="Delete even with consumers attached.")
    ] = False,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Delete a subscription and its cursor (refused while consumers are attached)."""
    with server.connect() as client:
        client.delete_subscription(topic, subscription, force=force, timeout=server.timeout)
    if json_out:
        output.print_json({"deleted": subscription, "topic": topic})
    else:
        output.stdout.print(f"deleted subscription {subscription} of {topic}")
