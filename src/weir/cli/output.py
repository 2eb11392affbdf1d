"""How results look: Rich tables for people, JSON for scripts, one-line errors on stderr.

Results go to stdout; progress, summaries and errors go to stderr, so a pipe
only ever carries the result.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from weir.client.admin import CompactionInfo, ConsumerInfo, TopicInfo

stdout = Console(highlight=False, soft_wrap=True)
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(value: Any) -> None:
    """One JSON document on stdout."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def error_line(message: str) -> None:
    """``error: ...`` on stderr, one line however the message was built."""
    text = " ".join(message.split())
    sys.stderr.write(f"error: {text}\n")
    sys.stderr.flush()


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_duration_ms(ms: int | None) -> str:
    if ms is None:
        return "forever"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def human_time_ms(ms: int) -> str:
    if ms <= 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# ---------------------------------------------------------------------------- topics


def topic_json(info: TopicInfo) -> dict[str, Any]:
    doc = dataclasses.asdict(info)
    doc["messages"] = info.messages
    doc["size_bytes"] = sum(p.size_bytes for p in info.partition_info)
    return doc


def show_topic(info: TopicInfo) -> None:
    size = sum(p.size_bytes for p in info.partition_info)
    settings = Table.grid(padding=(0, 2))
    settings.add_column(style="bold")
    settings.add_column()
    settings.add_row("topic", info.name)
    settings.add_row("partitions", str(info.partitions))
    if info.kind != "persistent":
        settings.add_row("kind", f"{info.kind} ({info.dropped_messages} dropped)")
    settings.add_row("messages", f"{info.messages} ({human_bytes(size)})")
    settings.add_row("retention", human_duration_ms(info.retention_ms))
    settings.add_row("retention bytes", _limit(info.retention_bytes, human_bytes))
    settings.add_row("max partition bytes", _limit(info.max_partition_bytes, human_bytes))
    settings.add_row("max partition messages", _limit(info.max_partition_messages, str))
    settings.add_row("codecs", ", ".join(info.codecs) or "any")
    if info.policies:  # the rest follow its namespace
        settings.add_row(
            "own policies", ", ".join(f"{k}={v}" for k, v in sorted(info.policies.items()))
        )
    settings.add_row("created", human_time_ms(info.created_at_ms))
    stdout.print(settings)
    parts = Table(title="partitions", title_justify="left")
    for col in ("partition", "start", "end", "messages", "size"):
        parts.add_column(col, justify="right")
    parts.add_column("last write")
    for p in info.partition_info:
        parts.add_row(
            str(p.partition),
            str(p.start_offset),
            str(p.end_offset),
            str(p.end_offset - p.start_offset),
            human_bytes(p.size_bytes),
            human_time_ms(p.last_write_ms),
        )
    stdout.print(parts)
    if info.consumers:
        consumers = Table(title="consumers", title_justify="left")
        consumers.add_column("consumer")
        consumers.add_column("important")
        consumers.add_column("reads from")
        for c in info.consumers:
            consumers.add_row(
                c.name,
                "yes" if c.important else "no",
                human_time_ms(c.read_from_ms) if c.read_from_ms else "start",
            )
        stdout.print(consumers)


def _limit(value: int | None, render: Any) -> str:
    return "none" if value is None else str(render(value))


def compaction_json(info: CompactionInfo) -> dict[str, Any]:
    doc = dataclasses.asdict(info)
    doc["keys"] = info.keys
    return doc


def show_compaction(info: CompactionInfo) -> None:
    state = "running" if info.running else "idle"
    if info.last_error:
        state += f"; the last run failed: {info.last_error}"
    stdout.print(f"compaction of {info.topic}: {state}")
    table = Table()
    for col in ("partition", "position", "keys", "tombstones", "before", "after"):
        table.add_column(col, justify="right")
    table.add_column("finished")
    for p in info.partitions:
        table.add_row(
            str(p.partition),
            str(p.position),
            str(p.keys),
            str(p.tombstones),
            f"{p.messages_before} ({human_bytes(p.bytes_before)})",
            f"{p.messages_after} ({human_bytes(p.bytes_after)})",
            p.phase or (human_time_ms(p.finished_ms) if p.finished_ms else "never"),
        )
    stdout.print(table)


def show_topic_list(topics: list[TopicInfo]) -> None:
    if not topics:
        stderr.print("no topics")
        return
    table = Table()
    # a name is what a user copies into the next command: never cut it short to fit
    table.add_column("topic", no_wrap=True, min_width=max(len(t.name) for t in topics))
    for col in ("partitions", "messages", "size"):
        table.add_column(col, justify="right")
    table.add_column("retention")
    table.add_column("consumers")
    for t in topics:
        table.add_row(
            t.name,
            str(t.partitions),
            str(t.messages),
            human_bytes(sum(p.size_bytes for p in t.partition_info)),
            human_duration_ms(t.retention_ms),
            ", ".join(c.name for c in t.consumers) or "-",
        )
    stdout.print(table)


# ---------------------------------------------------------------------------- consumers


def consumer_json(info: ConsumerInfo) -> dict[str, Any]:
    doc = dataclasses.asdict(info)
    doc["lag"] = info.lag
    return doc


def show_consumer(info: ConsumerInfo) -> None:
    table = Table(
        title=f"consumer {info.consumer.name} of {info.topic}"
        + (" (important)" if info.consumer.important else ""),
        title_justify="left",
        show_footer=True,
    )
    table.add_column("partition", "total", justify="right")
    table.add_column("committed", justify="right")
    table.add_column("end", justify="right")
    table.add_column("lag", str(info.lag), justify="right")
    for p in info.partitions:
        table.add_row(str(p.partition), str(p.committed_offset), str(p.end_offset), str(p.lag))
    stdout.print(table)
