"""`weir write TOPIC`: messages from stdin or a file, one per line or length-delimited."""

from __future__ import annotations

import contextlib
import os
import stat
import struct
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated

import typer

from weir.access_mode import AccessMode
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
    optional_size,
    plural,
    tls_options,
    unescape,
)
from weir.cli.progress import Progress
from weir.client.routing import ROUTING_NAMES
from weir.errors import BadRequestError, DeliveryTimeoutError, MessageTooLargeError, WeirError
from weir.hashing import KeyHash
from weir.storage.codecs import Codec

if TYPE_CHECKING:
    from weir.client.writer_settings import WriteResult

_LENGTH = struct.Struct(">I")
_READ_SIZE = 1 << 16


class CountingReader:
    """A binary input that counts the bytes taken from it (for the progress bar)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.consumed = 0

    def read_some(self) -> bytes:
        """What is available now (up to 64 KiB): a line typed at a terminal arrives at once."""
        read1 = getattr(self.raw, "read1", None)
        data: bytes = read1(_READ_SIZE) if read1 is not None else self.raw.read(_READ_SIZE)
        self.consumed += len(data)
        return data

    def read_exactly(self, n: int) -> bytes:
        data = self.raw.read(n)
        self.consumed += len(data)
        return data


def split_delimited(source: CountingReader, delimiter: bytes) -> Iterator[list[bytes]]:
    """Messages separated by ``delimiter``, in groups as the input arrives.

    A final delimiter does not start an empty message.
    """
    buf = bytearray()
    scan = 0
    while chunk := source.read_some():
        buf += chunk
        start = 0
        group = []
        while (i := buf.find(delimiter, max(start, scan - len(delimiter) + 1))) >= 0:
            group.append(bytes(buf[start:i]))
            start = i + len(delimiter)
        del buf[:start]
        scan = len(buf)
        if group:
            yield group
    if buf:
        yield [bytes(buf)]


def split_length_prefixed(source: CountingReader, group_size: int = 1024) -> Iterator[list[bytes]]:
    """Messages each preceded by its length as a 4-byte big-endian unsigned integer."""
    n = 0
    group: list[bytes] = []
    while head := source.read_exactly(_LENGTH.size):
        if len(head) < _LENGTH.size:
            raise CliError(f"input ends inside the length of message {n + 1}")
        (size,) = _LENGTH.unpack(head)
        data = source.read_exactly(size)
        if len(data) < size:
            raise CliError(f"input ends inside message {n + 1}: {len(data)} of {size} bytes")
        n += 1
        group.append(data)
        if len(group) >= group_size:
            yield group
            group = []
    if group:
        yield group


@dataclass
class Offsets:
    """Where the sampled messages (first, and last of each input group) were stored.

    A future per message would cost more than the write itself, so only the
    ends of each group carry one; together they give the offset range. When
    messages spread over partitions (by key, or round robin) every message
    carries one, and the range is kept per partition.
    """

    ranges: dict[int, list[int]] = field(default_factory=dict)  # partition -> [first, last]
    lock: threading.Lock = field(default_factory=threading.Lock)

    def done(self, fut: Future[WriteResult]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return  # the writer's flush reports the failure
        r = fut.result()
        if r.offset is None:  # a duplicate: stored earlier
            return
        with self.lock:
            span = self.ranges.setdefault(r.partition, [r.offset, r.offset])
            span[0] = min(span[0], r.offset)
            span[1] = max(span[1], r.offset)

    @property
    def single(self) -> tuple[int, int, int] | None:
        """(partition, first, last) when every stored message is in one partition."""
        if len(self.ranges) != 1:
            return None
        ((p, (first, last)),) = self.ranges.items()
        return p, first, last


def _split_key(data: bytes, sep: bytes) -> tuple[bytes | None, bytes]:
    """(key, value) split at the first ``sep``; no ``sep`` means no key."""
    key, found, value = data.partition(sep)
    return (key, value) if found else (None, data)


def _headers(items: list[str] | None) -> dict[str, str] | None:
    if not items:
        return None
    headers = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise bad("--header", f"expected NAME=VALUE, got {item!r}")
        headers[name] = value
    return headers


def _open_input(file: Path | None) -> tuple[IO[bytes], int | None]:
    """The input stream and its size when known (a regular file)."""
    if file is None or str(file) == "-":
        stream: IO[bytes] = sys.stdin.buffer
    else:
        try:
            stream = file.open("rb")
        except OSError as exc:
            raise CliError(f"cannot read {file}: {exc.strerror}") from None
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError):
        return stream, None
    return stream, st.st_size if stat.S_ISREG(st.st_mode) else None


def write(
    topic: Annotated[str, typer.Argument(help="Topic to write to.")],
    file: Annotated[
        Path | None,
        typer.Option("--file", help="Read messages from this file instead of stdin."),
    ] = None,
    delimiter: Annotated[
        str, typer.Option("--delimiter", "-D", help=r"Message separator (escapes: \n \t \0).")
    ] = r"\n",
    length_delimited: Annotated[
        bool,
        typer.Option(
            "--length-delimited", help="Each message is a 4-byte big-endian length, then the bytes."
        ),
    ] = False,
    key: Annotated[str | None, typer.Option("--key", "-k", help="Key of every message.")] = None,
    key_delimiter: Annotated[
        str | None,
        typer.Option(
            "--key-delimiter", "-K", help="Split each message at the first SEP into key and value."
        ),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option("--header", "-H", help="Header NAME=VALUE on every message (repeat)."),
    ] = None,
    routing: Annotated[
        str,
        typer.Option(
            "--routing",
            help="Partition choice: single-partition (a message with a key by its hash, "
            "murmur3 as Pulsar; the others to the producer's home partition), round-robin "
            "(the others spread), or pinned (every message to the producer's partition); "
            "key is single-partition by another name.",
        ),
    ] = "single-partition",
    key_hash: Annotated[
        str,
        typer.Option(
            "--key-hash",
            help="Hash that places keyed messages: murmur3 (Pulsar's client) or murmur2 "
            "(Kafka's default partitioner).",
        ),
    ] = "murmur3",
    producer_id: Annotated[
        str | None,
        typer.Option(
            "--producer-id", "-P", help="Producer id: pins a partition; resends are deduplicated."
        ),
    ] = None,
    partition: Annotated[
        int | None, typer.Option("--partition", "-p", min=0, help="Write to this partition.")
    ] = None,
    access_mode: Annotated[
        str,
        typer.Option(
            "--access-mode",
            help="Producer access mode: shared, exclusive (fail when another producer "
            "writes), wait-for-exclusive (wait, up to --timeout, until the others leave) "
            "or exclusive-with-fencing (take the topic; the others fail).",
        ),
    ] = "shared",
    codec: Annotated[str, typer.Option(help="Compression: raw, gzip, lz4 or zstd.")] = "raw",
    chunking: Annotated[
        bool,
        typer.Option(
            "--chunking",
            help="Split a message over the size limit into chunks (readers put them back "
            "together) instead of refusing it.",
        ),
    ] = False,
    max_message_bytes: Annotated[
        str | None,
        typer.Option(
            "--max-message-bytes",
            help="Refuse messages bigger than this (data plus key; 1MiB, bytes). "
            "Default: the server's limit (limits.max_message_bytes).",
        ),
    ] = None,
    progress: Annotated[
        bool | None,
        typer.Option("--progress/--no-progress", help="Progress bar (default: on a terminal)."),
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
    """Write messages read from stdin (or --file): one per line by default."""
    if key is not None and key_delimiter is not None:
        raise bad("--key-delimiter", "give either --key or --key-delimiter, not both")
    sep = unescape(delimiter).encode()
    if not sep:
        raise bad("--delimiter", "must not be empty")
    ksep = unescape(key_delimiter).encode() if key_delimiter is not None else None
    headers = _headers(header)
    try:
        Codec.parse(codec)
    except BadRequestError:
        raise bad("--codec", f"unknown codec {codec!r}: use raw, gzip, lz4 or zstd") from None
    try:
        mode = AccessMode.parse(access_mode)
    except BadRequestError as err:
        raise bad("--access-mode", err.message) from None
    if routing not in ROUTING_NAMES:
        raise bad("--routing", f"unknown routing {routing!r}: use {', '.join(ROUTING_NAMES)}")
    try:
        hash_choice = KeyHash.parse(key_hash)
    except BadRequestError as err:
        raise bad("--key-hash", err.message) from None
    if partition is not None and routing != "single-partition":
        raise bad("--routing", "--partition writes every message to that partition")
    # messages that may spread over partitions each carry a future: the summary is per partition
    spread = partition is None and (
        routing == "round-robin" or (routing != "pinned" and ksep is not None)
    )
    limit = optional_size(max_message_bytes, "--max-message-bytes")
    stream, size = _open_input(file)
    source = CountingReader(stream)
    messages = split_length_prefixed(source) if length_delimited else split_delimited(source, sep)
    # a bar when someone watches stderr and the input is not typed at that terminal
    show = progress if progress is not None else output.stderr.is_terminal and not _isatty(stream)
    offsets = Offsets()
    sent = nbytes = 0
    started = time.monotonic()
    with (
        connect(endpoint, user, password, tls_options(tls_ca, tls_cert, tls_key), token) as client,
        Progress(f"writing {topic}", total=size, enabled=show) as bar,
    ):
        writer = client.writer(
            topic,
            producer_id=producer_id,
            partition=partition,
            routing=None if partition is not None else routing,
            key_hash=hash_choice,
            codec=codec,
            access_mode=mode,
            chunking=chunking,
            max_message_bytes=limit,
            # --timeout holds mid-stream too: messages unacknowledged that long end the command
            delivery_timeout=timeout,
            on_reconnect=ReconnectNotice(endpoint),
        )
        try:
            writer.wait_init(timeout)
            for group in messages:
                for i, data in enumerate(group):
                    k: bytes | str | None = key
                    if ksep is not None:
                        k, data = _split_key(data, ksep)
                    try:
                        if spread or sent == 0 or i == len(group) - 1:
                            fut = writer.write_future(data, key=k, headers=headers)
                            fut.add_done_callback(offsets.done)
                        else:
                            writer.write(data, key=k, headers=headers)
                    except MessageTooLargeError as err:
                        before = f" ({plural(sent, 'message')} sent before it)" if sent else ""
                        raise CliError(f"message {sent + 1}: {err.message}{before}") from None
                    sent += 1
                    nbytes += len(data)
                bar.update(completed=source.consumed, messages=sent)
            writer.flush(timeout=None)  # bounded by the delivery timeout (--timeout)
            bar.finish(completed=source.consumed, messages=sent)
        except DeliveryTimeoutError as err:
            why = err.reason.message if err.reason is not None else "the server did not answer"
            raise CliError(
                f"{why} (gave up after {timeout:g} s, --timeout; "
                f"{writer.unacknowledged} of {plural(sent, 'message')} not acknowledged)"
            ) from None
        except WeirError as err:
            sent_before = f" ({plural(sent, 'message')} sent before it)" if sent else ""
            raise CliError(err.message + sent_before) from None
        finally:
            with contextlib.suppress(WeirError):
                writer.close(timeout)
            if stream is not sys.stdin.buffer:
                stream.close()
    seconds = time.monotonic() - started
    single = offsets.single
    result = {
        "topic": topic,
        "messages": sent,
        "bytes": nbytes,
        "partition": single[0]
        if single is not None
        else (writer.partition if not offsets.ranges else None),
        "first_offset": single[1] if single is not None else None,
        "last_offset": single[2] if single is not None else None,
        "partitions": {str(p): r for p, r in sorted(offsets.ranges.items())},
        "producer_id": writer.producer_id,
        "access_mode": mode.name.lower().replace("_", "-"),
        "producer_epoch": writer.producer_epoch,
        "seconds": round(seconds, 3),
    }
    if json_out:
        output.print_json(result)
        return
    where = ""
    if single is not None:
        where = f": partition {single[0]}, offsets {single[1]}..{single[2]}"
    elif offsets.ranges:
        where = ": " + ", ".join(
            f"partition {p} offsets {a}..{b}" for p, (a, b) in sorted(offsets.ranges.items())
        )
    output.stderr.print(
        f"wrote {plural(sent, 'message')} ({output.human_bytes(nbytes)}) to {topic}{where}"
    )


def _isatty(stream: IO[bytes]) -> bool:
    try:
        return stream.isatty()
    except (OSError, ValueError):
        return False
