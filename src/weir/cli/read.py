"""`weir read TOPIC`: print messages raw, as JSON lines, or through a format string.

Two ways to read, chosen by the options:

- offset ranges (the default, and with ``--from OFFSET|-N`` or ``--partition``): each
  chosen partition is read from exactly its start position to the end offset it had
  when the command started (or on, with ``--follow``). A lost connection is retried
  from the last printed offset, so nothing is printed twice; with ``--consumer`` the
  offsets printed are committed.
- a read session (``--consumer`` reading from its committed offset): partitions are
  shared with the consumer's other readers, and what is printed is committed. Without
  ``--follow`` it stops at the end offsets the topic had when the command started, or
  IDLE_STOP_S after its own partitions are done while other readers hold the rest.

With ``--compacted`` each partition is read as compacted (offset ranges): the latest
message of each key below the compacted view's position, at their own offsets, then
every later message.

A read that cannot reach the end offsets it set out to (the server lost or silent
for ``--timeout``) says so on stderr and exits 1.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from weir.cli import output
from weir.cli.common import (
    DEFAULT_ENDPOINT,
    DEFAULT_TIMEOUT,
    CliError,
    Endpoint,
    Json,
    Password,
    ReconnectNotice,
    Timeout,
    TlsCa,
    TlsCert,
    TlsKey,
    TokenOption,
    User,
    bad,
    connect,
    plural,
    timestamp_ms,
    tls_options,
    unescape,
)
from weir.cli.progress import Progress
from weir.errors import UnknownConsumerError, WeirError

if TYPE_CHECKING:
    from weir.client.admin import TopicInfo
    from weir.client.messages import Message
    from weir.client.sync import Client, Reader
    from weir.client.tls import Tls

IDLE_STOP_S = 5.0  # without --follow: give up on partitions other readers hold
_POLL_S = 0.1  # how long one receive waits before the "caught up?" check
_BACKOFF_MAX_S = 1.0  # --follow over offset ranges: longest pause between polls
STARTS = ("earliest", "latest", "committed")


class OutputClosed(Exception):
    """stdout went away (``| head``): stop quietly."""


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def _iso(ms: int) -> str:
    return (
        dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def _json_bytes(doc: dict[str, Any], name: str, value: bytes) -> None:
    try:
        doc[name] = value.decode("utf-8")
    except UnicodeDecodeError:
        doc[name] = base64.b64encode(value).decode()
        doc[f"{name}_encoding"] = "base64"


def message_json(m: Message) -> dict[str, Any]:
    """A message with its metadata; a value or key that is not UTF-8 is base64 (``value_encoding``)."""
    doc: dict[str, Any] = {"topic": m.topic, "partition": m.partition, "offset": m.offset}
    if m.key:
        _json_bytes(doc, "key", m.key)
    else:
        doc["key"] = None
    _json_bytes(doc, "value", m.data)
    doc.update(
        headers=dict(m.headers),
        producer_id=m.producer_id,
        seq_no=m.seq_no,
        created_at_ms=m.created_at_ms,
        written_at_ms=m.written_at_ms,
    )
    return doc


FORMAT_FIELDS = (
    "topic",
    "partition",
    "offset",
    "key",
    "value",
    "headers",
    "producer_id",
    "seq_no",
    "created_at",
    "written_at",
    "created_at_ms",
    "written_at_ms",
    "size",
)


def format_fields(m: Message) -> dict[str, Any]:
    return {
        "topic": m.topic,
        "partition": m.partition,
        "offset": m.offset,
        "key": _text(m.key),
        "value": _text(m.data),
        "headers": json.dumps(dict(m.headers), ensure_ascii=False),
        "producer_id": m.producer_id,
        "seq_no": m.seq_no,
        "created_at": _iso(m.created_at_ms),
        "written_at": _iso(m.written_at_ms),
        "created_at_ms": m.created_at_ms,
        "written_at_ms": m.written_at_ms,
        "size": len(m.data),
    }


class Printer:
    """Writes messages to stdout in the chosen format, flushing after each batch."""

    def __init__(self, fmt: str, delimiter: bytes) -> None:
        self.delimiter = delimiter
        self.out = sys.stdout.buffer
        self.template: str | None = None
        if fmt == "raw":
            self.render = self._raw
        elif fmt == "json":
            self.render = self._json
        elif "{" in fmt:
            self.template = unescape(fmt)
            self._check_template(self.template)
            self.render = self._formatted
        else:
            raise bad(
                "--format",
                f"expected raw, json or a format string such as '{{offset}}: {{value}}', got {fmt!r}",
            )

    @staticmethod
    def _check_template(template: str) -> None:
        sample = dict.fromkeys(FORMAT_FIELDS, 0)
        try:
            template.format_map(sample)
        except KeyError as exc:
            raise bad(
                "--format", f"unknown field {{{exc.args[0]}}}; fields: {', '.join(FORMAT_FIELDS)}"
            ) from None
        except (ValueError, IndexError) as exc:
            raise bad("--format", f"bad format string: {exc}") from None

    def _raw(self, m: Message) -> bytes:
        return m.data + self.delimiter

    def _json(self, m: Message) -> bytes:
        return json.dumps(message_json(m), ensure_ascii=False).encode() + b"\n"

    def _formatted(self, m: Message) -> bytes:
        assert self.template is not None
        return self.template.format_map(format_fields(m)).encode() + self.delimiter

    def print(self, messages: Sequence[Message]) -> None:
        try:
            self.out.write(b"".join(self.render(m) for m in messages))
            self.out.flush()
        except BrokenPipeError:
            # Python would complain again when it flushes stdout at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise OutputClosed from None


def _held_offsets(reader: Reader) -> dict[int, int]:
    """Partition -> next offset for the partitions this reader holds now."""
    for _ in range(3):  # the client's thread may be changing the sessions right now
        try:
            return {ps.partition: ps.read_offset for ps in reader.partitions}
        except RuntimeError:
            continue
    return {}


def _behind(positions: dict[int, int], targets: dict[int, int]) -> str:
    """ "partition 0 at offset 120 of 500, ..." for the partitions not read to their target."""
    left = [
        f"partition {p} at offset {positions.get(p, '?')} of {t}"
        for p, t in sorted(targets.items())
        if positions.get(p, -1) < t
    ]
    return ", ".join(left) if left else "every partition read"


def stopped_early(
    why: str, printed: int, positions: dict[int, int], targets: dict[int, int]
) -> CliError:
    """The error of a read that ends before the end offsets it set out to reach."""
    return CliError(
        f"read stopped before the end: {why}; printed {printed} messages "
        f"({_behind(positions, targets)})"
    )


def read_session(
    client: Client,
    topic: str,
    targets: dict[int, int],
    *,
    consumer: str,
    start: str,
    since_ms: int | None,
    count: int | None,
    follow: bool,
    printer: Printer,
    bar: Progress,
    timeout: float,
    endpoint: str,
) -> int:
    """Read as a consumer through a read session; returns how many messages were printed.

    Everything printed is committed (with its ack) before reading on, so a session that
    reconnects continues right after it. Without --follow the read ends at ``targets``;
    partitions other readers of the consumer hold are theirs: once this reader has read
    its own to their targets and nothing came for IDLE_STOP_S, it stops and says so.
    A server that is lost (or sends nothing to a reader that has data to get) for
    ``timeout`` seconds ends the read with an error.
    """
    reader = client.reader(
        topic,
        consumer=consumer,
        start=start,
        read_from=since_ms,
        on_reconnect=ReconnectNotice(endpoint),
    )
    printed = 0
    held: dict[int, int] = {}
    try:
        reader.wait_connected(timeout)
        quiet_since = time.monotonic()
        was_connected = True
        while count is None or printed < count:
            batch = reader.receive_batch(timeout=_POLL_S)
            now = time.monotonic()
            if batch is not None:
                msgs = batch.messages if count is None else batch.messages[: count - printed]
                printer.print(msgs)
                printed += len(msgs)
                bar.update(completed=printed, messages=printed)
                reconnects = reader.reconnects
                try:
                    # acked before reading on: at exit no commit is left in flight
                    reader.commit_with_ack(msgs[-1], timeout)
                except WeirError as err:
                    if reader.connected and reader.reconnects == reconnects:
                        raise  # not a lost connection (a rebalance took the partition)
                    reason = reader.last_error.message if reader.last_error else err.message
                    raise CliError(
                        f"lost the connection to {endpoint} ({reason}) while committing; "
                        f"the last {plural(len(msgs), 'message')} printed may be printed again "
                        "by the next read of this consumer"
                    ) from None
                quiet_since = now
                continue
            down = reader.disconnected_for
            if not reader.connected:
                was_connected = False
            if not reader.connected and down >= timeout:
                reason = reader.last_error.message if reader.last_error else "no connection"
                why = f"lost the connection to {endpoint} for {down:.0f} s ({reason})"
                if follow:
                    raise CliError(f"{why}; printed {printed} messages")
                raise stopped_early(why, printed, held, targets)
            if not reader.connected:
                continue
            if not was_connected:  # back after a reconnect: the quiet time starts now
                was_connected, quiet_since = True, now
            if follow:
                continue
            mine = _held_offsets(reader)
            held.update(mine)
            if all(held.get(p, -1) >= t for p, t in targets.items()):
                break
            quiet = now - quiet_since
            if any(p in mine and mine[p] < t for p, t in targets.items()):
                if quiet >= timeout:  # our own partitions, and nothing comes: a stuck server
                    raise stopped_early(
                        f"no data from {endpoint} for {quiet:.0f} s", printed, held, targets
                    )
            elif quiet >= IDLE_STOP_S:
                # the rest is held by other readers: name what they have not committed yet
                lag = client.describe_consumer(topic, consumer, timeout=timeout).partitions
                committed = {c.partition: c.committed_offset for c in lag}
                others = sorted(
                    p
                    for p, t in targets.items()
                    if held.get(p, -1) < t and committed.get(p, -1) < t
                )
                if not others:
                    break  # they are done too
                output.stderr.print(
                    f"stopped after {IDLE_STOP_S:g} s without data: "
                    f"partition{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} "
                    f"of {topic} {'are' if len(others) > 1 else 'is'} read by other readers "
                    f"of consumer {consumer}",
                    markup=False,
                )
                break
    finally:
        reader.close()
    return printed


def read_ranges(
    client: Client,
    topic: str,
    positions: dict[int, int],
    targets: dict[int, int],
    *,
    consumer: str,
    count: int | None,
    follow: bool,
    printer: Printer,
    bar: Progress,
    timeout: float,
    endpoint: str,
    compacted: bool = False,
) -> int:
    """Read exact offset ranges partition by partition; with --follow, poll for more.

    Positions only move past what was printed, so a lost connection is retried from
    there (no message twice, none skipped); when the server has not answered for
    ``timeout`` seconds the read ends with an error that says where it stopped.
    """
    printed = 0
    pause = 0.05
    answered = time.monotonic()  # when the server last answered
    backoff = _POLL_S
    notice = ReconnectNotice(endpoint)
    pending = {p for p, pos in positions.items() if follow or pos < targets[p]}
    while pending:
        progressed = False
        try:
            for p in sorted(pending):
                if count is not None and printed >= count:
                    return printed
                end = -1 if follow else targets[p]
                if count is not None:  # end the range there, rather than abandon the stream
                    limit = positions[p] + count - printed
                    end = limit if end < 0 else min(end, limit)
                if end >= 0 and positions[p] >= end:
                    pending.discard(p)
                    continue
                wait = max(_POLL_S, timeout - (time.monotonic() - answered))
                for chunk in client.read_range(
                    topic, p, positions[p], end, timeout=wait, compacted=compacted
                ):
                    answered = time.monotonic()
                    msgs = chunk.messages(positions[p])
                    if count is not None:
                        msgs = msgs[: count - printed]
                    if msgs:
                        printer.print(msgs)
                        printed += len(msgs)
                        bar.update(completed=printed, messages=printed)
                        positions[p] = msgs[-1].offset + 1
                        progressed = True
                        if consumer:
                            client.commit_offset(topic, p, consumer, positions[p], timeout=timeout)
                    else:  # nothing left in the range here (retention removed it)
                        positions[p] = max(positions[p], chunk.next_offset)
                    if count is not None and printed >= count:
                        break
                answered = time.monotonic()
                if not follow:
                    pending.discard(p)  # read to its end offset (or as far as it now goes)
        except WeirError as err:
            if not err.retryable:
                raise
            silent = time.monotonic() - answered
            if silent >= timeout:
                why = f"no answer from {endpoint} for {silent:.0f} s ({err.message})"
                if follow:
                    raise CliError(f"{why}; printed {printed} messages") from None
                raise stopped_early(why, printed, positions, targets) from None
            notice(err)
            time.sleep(min(backoff, max(0.0, timeout - silent)))
            backoff = min(_BACKOFF_MAX_S, backoff * 2)
            continue
        backoff = _POLL_S
        if count is not None and printed >= count:
            return printed
        if not follow:
            continue
        if progressed:
            pause = 0.05
            continue
        time.sleep(pause)  # ReadRange cannot wait for new data: poll, backing off
        pause = min(_BACKOFF_MAX_S, pause * 2)
    return printed


def _positions(
    client: Client,
    info: TopicInfo,
    partitions: list[int],
    *,
    start: str,
    offset: int | None,
    back: int | None,
    since_ms: int | None,
    consumer: str,
    timeout: float,
    compacted: bool = False,
) -> dict[int, int]:
    parts = {p.partition: p for p in info.partition_info}
    if offset is not None:
        return dict.fromkeys(partitions, offset)
    if back is not None:  # --from -N: N before the end of each partition
        return {p: max(parts[p].start_offset, parts[p].end_offset - back) for p in partitions}
    if since_ms is not None:
        at = client.offsets_for_time(info.name, since_ms, timeout=timeout)
        return {p: at[p] for p in partitions}
    if start == "committed":
        try:
            lags = client.describe_consumer(info.name, consumer, timeout=timeout).partitions
        except UnknownConsumerError:  # a new consumer starts at the beginning
            return {p: parts[p].start_offset for p in partitions}
        committed = {c.partition: c.committed_offset for c in lags}
        return {p: committed[p] for p in partitions}
    if start == "latest":
        return {p: parts[p].end_offset for p in partitions}
    if compacted:  # a compacted view keeps the latest of keys from offset 0 on
        views = client.describe_compaction(info.name, timeout=timeout).partitions
        viewed = {v.partition for v in views if v.position > 0}
        return {p: 0 if p in viewed else parts[p].start_offset for p in partitions}
    return {p: parts[p].start_offset for p in partitions}


def read(
    topic: Annotated[str, typer.Argument(help="Topic to read.")],
    consumer: Annotated[
        str | None,
        typer.Option("--consumer", "-c", help="Read as this consumer and commit what was printed."),
    ] = None,
    subscription: Annotated[
        str | None,
        typer.Option(
            "--subscription",
            "-s",
            help="Read from this durable subscription (created when missing, from --from "
            "earliest or latest) and acknowledge what was printed.",
        ),
    ] = None,
    sub_type: Annotated[
        str,
        typer.Option(
            "--type", help="With --subscription: exclusive, failover, shared or key_shared."
        ),
    ] = "exclusive",
    from_: Annotated[
        str | None,
        typer.Option(
            "--from",
            "-o",
            help="Where to start: earliest, latest, committed (default with --consumer), an "
            "offset, or -N: N messages before the end of each partition.",
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            help='Start at messages written since: "2026-05-01T12:00:00Z", epoch ms, or "15m" ago.'
        ),
    ] = None,
    partition: Annotated[
        int | None, typer.Option("--partition", "-p", min=0, help="Read only this partition.")
    ] = None,
    count: Annotated[
        int | None, typer.Option("--count", "-n", min=1, help="Stop after this many messages.")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-F", help="Keep waiting for new messages (Ctrl-C stops).")
    ] = False,
    compacted: Annotated[
        bool,
        typer.Option(
            "--compacted",
            help="Read each partition as compacted: the latest message of each key below its "
            "compacted view's position (weir topic compact), then every later message.",
        ),
    ] = False,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="raw (the value), json (a line with metadata) or a format string: '{offset} {key}={value}'.",
        ),
    ] = "raw",
    delimiter: Annotated[
        str, typer.Option("--delimiter", "-D", help=r"Printed after each raw or formatted message.")
    ] = r"\n",
    progress: Annotated[
        bool | None,
        typer.Option(
            "--progress/--no-progress",
            help="Progress bar (default: when stdout is not a terminal).",
        ),
    ] = None,
    endpoint: Endpoint = DEFAULT_ENDPOINT,
    user: User = None,
    password: Password = None,
    token: TokenOption = None,
    tls_ca: TlsCa = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    timeout: Timeout = DEFAULT_TIMEOUT,
    json_out: Json = False,
) -> None:
    """Print messages: by default from the start (or the consumer's committed offset) to the end."""
    printer = Printer("json" if json_out else fmt, unescape(delimiter).encode())
    if subscription is not None:
        _read_subscription(
            topic,
            subscription,
            sub_type,
            (from_ or "earliest").strip().lower(),
            clash=[
                name
                for name, given in (
                    ("--consumer", consumer),
                    ("--since", since),
                    ("--partition", partition),
                    ("--compacted", True if compacted else None),
                )
                if given is not None
            ],
            count=count,
            follow=follow,
            printer=printer,
            progress=progress,
            endpoint=endpoint,
            user=user,
            password=password,
            token=token,
            tls=tls_options(tls_ca, tls_cert, tls_key),
            timeout=timeout,
        )
        return
    if from_ is not None and since is not None:
        raise bad("--since", "give either --from or --since, not both")
    start = (from_ or ("committed" if consumer else "earliest")).strip().lower()
    offset = int(start) if start.isdigit() else None
    back = int(start[1:]) if start[:1] == "-" and start[1:].isdigit() else None
    if offset is None and back is None and start not in STARTS:
        raise bad(
            "--from",
            f"expected earliest, latest, committed, an offset or -N (N before the end), "
            f"got {from_!r}",
        )
    if start == "committed" and not consumer:
        raise bad("--from", "committed needs --consumer")
    since_ms = timestamp_ms(since, "--since") if since is not None else None
    show = (
        progress if progress is not None else output.stderr.is_terminal and not sys.stdout.isatty()
    )
    with connect(endpoint, user, password, tls_options(tls_ca, tls_cert, tls_key), token) as client:
        info = client.describe_topic(topic, timeout=timeout)
        if partition is not None and partition >= info.partitions:
            raise CliError(
                f"topic {topic!r} has partitions 0..{info.partitions - 1}, not {partition}"
            )
        targets = {p.partition: p.end_offset for p in info.partition_info}
        chosen = [partition] if partition is not None else sorted(targets)
        # Exact offset ranges unless reading as a consumer from its own position: they
        # resume exactly where they stopped when the connection is lost.
        by_range = (
            not consumer
            or compacted  # offsets a view skipped: ranges, not a read session's targets
            or offset is not None
            or back is not None
            or partition is not None
        )
        positions = None
        if by_range or show:  # a read session finds its own; the bar wants a total
            positions = _positions(
                client,
                info,
                chosen,
                start=start,
                offset=offset,
                back=back,
                since_ms=since_ms,
                consumer=consumer or "",
                timeout=timeout,
                compacted=compacted,
            )
        if by_range and positions is not None:
            beyond = {p: targets[p] for p, pos in positions.items() if pos > targets[p]}
            if beyond:
                ends = ", ".join(f"{p} ends at {e}" for p, e in sorted(beyond.items()))
                then = "waiting for it" if follow else "nothing to read there"
                output.stderr.print(
                    f"note: offset {offset} is beyond the end offset of {topic} (partition "
                    f"{ends}); {then}",
                    markup=False,
                )
        total = None
        if positions is not None and not follow and not compacted:  # a view: fewer
            total = sum(max(0, targets[p] - pos) for p, pos in positions.items())
            total = total if count is None else min(total, count)
        common: dict[str, Any] = {
            "consumer": consumer or "",
            "count": count,
            "follow": follow,
            "printer": printer,
            "timeout": timeout,
            "endpoint": endpoint,
        }
        with Progress(f"reading {topic}", total=total, enabled=show, unit="messages") as bar:
            try:
                if by_range:
                    assert positions is not None
                    n = read_ranges(
                        client, topic, positions, targets, bar=bar, compacted=compacted, **common
                    )
                else:
                    parts = {p.partition: p for p in info.partition_info}
                    n = read_session(
                        client,
                        topic,
                        # an empty partition has nothing to wait for, whoever holds it
                        {p: targets[p] for p in chosen if targets[p] > parts[p].start_offset},
                        start=start,
                        since_ms=since_ms,
                        bar=bar,
                        **common,
                    )
                bar.finish(completed=n, messages=n)
            except OutputClosed:
                return


def _read_subscription(
    topic: str,
    subscription: str,
    sub_type: str,
    start: str,
    *,
    clash: list[str],
    count: int | None,
    follow: bool,
    printer: Printer,
    progress: bool | None,
    endpoint: str,
    user: str | None,
    password: str | None,
    token: str | None,
    tls: Tls | None,
    timeout: float,
) -> None:
    from weir.cli.read_subscription import read_subscription

    if clash:
        raise bad(clash[0], "cannot be combined with --subscription")
    if start not in ("earliest", "latest"):
        raise bad("--from", f"with --subscription: earliest or latest, got {start!r}")
    show = (
        progress if progress is not None else output.stderr.is_terminal and not sys.stdout.isatty()
    )
    with (
        connect(endpoint, user, password, tls, token) as client,
        Progress(f"reading {topic}", total=count, enabled=show, unit="messages") as bar,
    ):
        try:
            n = read_subscription(
                client,
                topic,
                subscription,
                type=sub_type,
                initial_position=start,
                count=count,
                follow=follow,
                printer=printer,
                bar=bar,
                timeout=timeout,
                endpoint=endpoint,
            )
            bar.finish(completed=n, messages=n)
        except OutputClosed:
            return
