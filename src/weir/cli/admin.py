"""`weir topic ...` and `weir consumer ...`: administration over the native protocol."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from weir.cli import output
from weir.cli.common import (
    SERVER_DEFAULTS,
    CliError,
    Json,
    ServerOptions,
    bad,
    optional_count,
    optional_size,
    retention_ms,
    server_options,
)
from weir.cli.tenancy import PolicyOption, parse_policies
from weir.errors import AlreadyExistsError, BadRequestError
from weir.storage.codecs import Codec

topic_app = typer.Typer(help="Create, inspect, change and drop topics.", no_args_is_help=True)
consumer_app = typer.Typer(help="Inspect consumers and move their offsets.", no_args_is_help=True)

TopicName = Annotated[
    str,
    typer.Argument(help="Topic name: 'orders' (in public/default) or 'tenant/namespace/orders'."),
]
InheritOption = Annotated[
    list[str] | None,
    typer.Option("--inherit", help="A policy the topic follows from its namespace again (repeat)."),
]
Retention = Annotated[
    str | None,
    typer.Option(help='Keep messages this long: "7d", "12h", ms, or "none" (forever).'),
]
RetentionBytes = Annotated[
    str | None,
    typer.Option(help='Keep at most this much per partition: "10GiB", bytes, or "none".'),
]
MaxPartitionBytes = Annotated[
    str | None,
    typer.Option(help='Refuse writes past this size per partition: "1GiB" or "none".'),
]
MaxPartitionMessages = Annotated[
    str | None,
    typer.Option(help='Refuse writes past this many messages per partition, or "none".'),
]
Codecs = Annotated[
    list[str] | None,
    typer.Option("--codec", help="Accepted codec (repeat): raw, gzip, lz4, zstd; 'any' for all."),
]


def _codecs(values: list[str] | None) -> list[str] | None:
    if values is None:
        return None
    if [v.lower() for v in values] == ["any"]:
        return []
    for v in values:
        try:
            Codec.parse(v)
        except BadRequestError:
            raise bad("--codec", f"unknown codec {v!r}: use raw, gzip, lz4, zstd or any") from None
    return [v.lower() for v in values]


def _consumers(plain: list[str] | None, important: list[str] | None) -> list[Any]:
    from weir.client.admin import Consumer

    return [Consumer(n) for n in plain or []] + [
        Consumer(n, important=True) for n in important or []
    ]


@topic_app.command("create")
@server_options
def create(
    topic: TopicName,
    partitions: Annotated[
        int | None,
        typer.Option("--partitions", min=1, help="Number of partitions (default: the server's)."),
    ] = None,
    retention: Retention = None,
    retention_bytes: RetentionBytes = None,
    max_partition_bytes: MaxPartitionBytes = None,
    max_partition_messages: MaxPartitionMessages = None,
    codec: Codecs = None,
    consumer: Annotated[
        list[str] | None, typer.Option("--consumer", help="Register a consumer (repeat).")
    ] = None,
    important_consumer: Annotated[
        list[str] | None,
        typer.Option(
            "--important-consumer", help="Register a consumer that holds back retention (repeat)."
        ),
    ] = None,
    policy: PolicyOption = None,
    kind: Annotated[
        str,
        typer.Option(
            "--kind",
            help="persistent (stored) or non-persistent (only to the readers and subscribers "
            "connected now, never stored; a slow one's messages are dropped and counted).",
        ),
    ] = "persistent",
    if_not_exists: Annotated[
        bool,
        typer.Option(
            "--if-not-exists",
            help="Succeed if the topic exists with these settings (else: an error naming "
            "what differs). For scripts that may run twice.",
        ),
    ] = False,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Create a topic."""
    if kind not in ("persistent", "non-persistent"):
        raise bad("--kind", f"unknown kind {kind!r}: use persistent or non-persistent")
    kwargs: dict[str, Any] = {
        "kind": kind,
        "retention_bytes": optional_size(retention_bytes, "--retention-bytes"),
        "max_partition_bytes": optional_size(max_partition_bytes, "--max-partition-bytes"),
        "max_partition_messages": optional_count(
            max_partition_messages, "--max-partition-messages"
        ),
        "codecs": _codecs(codec) or (),
        "consumers": _consumers(consumer, important_consumer),
        "policies": parse_policies(policy),
    }
    if retention is not None:
        kwargs["retention"] = retention_ms(retention, "--retention")
    created = True
    with server.connect() as client:
        try:
            info = client.create_topic(topic, partitions or 0, timeout=server.timeout, **kwargs)
        except AlreadyExistsError:
            if not if_not_exists:
                raise
            # the same call again, accepting the topic only if it is the one asked for
            info = client.create_topic(
                topic, partitions or 0, timeout=server.timeout, exist_ok=True, **kwargs
            )
            created = False
    if json_out:
        output.print_json(output.topic_json(info))
    else:
        output.stdout.print(
            f"{'created topic' if created else 'topic'} {info.name} "
            f"{'with' if created else 'already exists with'} {info.partitions} "
            f"partition{'s' if info.partitions != 1 else ''}, "
            + (
                "non-persistent"
                if info.kind == "non-persistent"
                else f"retention {output.human_duration_ms(info.retention_ms)}"
            )
        )


@topic_app.command("describe")
@server_options
def describe(
    topic: TopicName,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Show a topic's settings, its partitions (offsets, sizes) and its consumers."""
    with server.connect() as client:
        info = client.describe_topic(topic, timeout=server.timeout)
    if json_out:
        output.print_json(output.topic_json(info))
    else:
        output.show_topic(info)


@topic_app.command("alter")
@server_options
def alter(
    topic: TopicName,
    partitions: Annotated[
        int | None,
        typer.Option(
            "--partitions", min=1, help="New number of partitions (can grow, never shrink)."
        ),
    ] = None,
    retention: Retention = None,
    retention_bytes: RetentionBytes = None,
    max_partition_bytes: MaxPartitionBytes = None,
    max_partition_messages: MaxPartitionMessages = None,
    codec: Codecs = None,
    add_consumer: Annotated[
        list[str] | None, typer.Option("--add-consumer", help="Register a consumer (repeat).")
    ] = None,
    add_important_consumer: Annotated[
        list[str] | None,
        typer.Option(
            "--add-important-consumer", help="Register a consumer that holds back retention."
        ),
    ] = None,
    drop_consumer: Annotated[
        list[str] | None,
        typer.Option("--drop-consumer", help="Remove a consumer and its offsets (repeat)."),
    ] = None,
    policy: PolicyOption = None,
    inherit: InheritOption = None,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Change a topic; settings left out stay as they are."""
    kwargs: dict[str, Any] = {
        "partitions": partitions,
        "codecs": _codecs(codec),
        "add_consumers": _consumers(add_consumer, add_important_consumer),
        "drop_consumers": drop_consumer or [],
        "policies": parse_policies(policy),
        "inherit": inherit or [],
    }
    if retention is not None:
        kwargs["retention"] = retention_ms(retention, "--retention")
    if retention_bytes is not None:
        kwargs["retention_bytes"] = optional_size(retention_bytes, "--retention-bytes")
    if max_partition_bytes is not None:
        kwargs["max_partition_bytes"] = optional_size(max_partition_bytes, "--max-partition-bytes")
    if max_partition_messages is not None:
        kwargs["max_partition_messages"] = optional_count(
            max_partition_messages, "--max-partition-messages"
        )
    options = (partitions, retention, retention_bytes, max_partition_bytes, max_partition_messages)
    lists = (codec, add_consumer, add_important_consumer, drop_consumer, policy, inherit)
    if all(v is None for v in options) and not any(lists):
        raise typer.BadParameter("nothing to change: give at least one option")
    with server.connect() as client:
        info = client.alter_topic(topic, timeout=server.timeout, **kwargs)
    if json_out:
        output.print_json(output.topic_json(info))
    else:
        output.show_topic(info)


@topic_app.command("drop")
@server_options
def drop(
    topic: TopicName,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Delete a topic with all its messages and consumer offsets."""
    with server.connect() as client:
        client.drop_topic(topic, timeout=server.timeout)
    if json_out:
        output.print_json({"dropped": topic})
    else:
        output.stdout.print(f"dropped topic {topic}")


@topic_app.command("compact")
@server_options
def compact(
    topic: TopicName,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait", help="Return when the run has ended (its error if it failed), not at once."
        ),
    ] = False,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Compact a topic: keep the latest message of each key (readers ask for it with
    --compacted); writers are never held up."""
    with server.connect() as client:
        info = client.compact(topic, wait=wait, timeout=None if wait else server.timeout)
    if json_out:
        output.print_json(output.compaction_json(info))
    elif wait:
        output.show_compaction(info)
    else:
        output.stdout.print(f"compaction of {info.topic} started")


@topic_app.command("compaction-status")
@server_options
def compaction_status(
    topic: TopicName,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """A topic's compacted views (per partition: position, keys, bytes before and after)
    and the run going on, or why the last one failed."""
    with server.connect() as client:
        info = client.describe_compaction(topic, timeout=server.timeout)
    if json_out:
        output.print_json(output.compaction_json(info))
    else:
        output.show_compaction(info)


@topic_app.command("list")
@server_options
def list_topics(
    prefix: Annotated[str, typer.Argument(help="Only topics whose name starts with this.")] = "",
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """List topics with their partitions, messages, size, retention and consumers."""
    with server.connect() as client:
        topics = client.list_topics(prefix, timeout=server.timeout)
    if json_out:
        output.print_json([output.topic_json(t) for t in topics])
    else:
        output.show_topic_list(topics)


@consumer_app.command("describe")
@server_options
def describe_consumer(
    topic: TopicName,
    consumer: Annotated[str, typer.Argument(help="Consumer name.")],
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Committed offset, end offset and lag of a consumer, per partition."""
    with server.connect() as client:
        info = client.describe_consumer(topic, consumer, timeout=server.timeout)
    if json_out:
        output.print_json(output.consumer_json(info))
    else:
        output.show_consumer(info)


@consumer_app.command("commit")
@server_options
def commit(
    topic: TopicName,
    consumer: Annotated[str, typer.Argument(help="Consumer name.")],
    partition: Annotated[int, typer.Argument(min=0, help="Partition.")],
    offset: Annotated[int, typer.Argument(min=0, help="Next offset the consumer reads.")],
    allow_backwards: Annotated[
        bool, typer.Option("--allow-backwards", help="Allow moving back (re-read messages).")
    ] = False,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Set a consumer's committed offset in one partition (skip ahead, or rewind)."""
    with server.connect() as client:
        changed = client.commit_offset(
            topic,
            partition,
            consumer,
            offset,
            allow_backwards=allow_backwards,
            timeout=server.timeout,
        )
        info = client.describe_consumer(topic, consumer, timeout=server.timeout)
    committed = next(
        (p.committed_offset for p in info.partitions if p.partition == partition), offset
    )
    if not changed and offset < committed:
        # refused, not done: a script must not take it for a rewind
        raise CliError(
            f"offset {offset} is behind the committed offset {committed} of consumer "
            f"{consumer!r} in partition {partition}; nothing changed "
            "(use --allow-backwards to rewind)"
        )
    if json_out:
        output.print_json({"changed": changed, **output.consumer_json(info)})
        return
    if not changed:
        output.stderr.print("offset unchanged")
    output.show_consumer(info)
